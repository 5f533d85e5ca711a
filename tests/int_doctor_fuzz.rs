//! A seeded ELF-mutation fuzz test of the doctor (issue 25): at least 10,000 mutated libraries
//! (`UXN_DOCTOR_FUZZ_ITERATIONS`, default 20,000; seed `UXN_DOCTOR_FUZZ_SEED`), built from a
//! small crafted NVSHMEM stand-in and the real `libnvshmem_host.so.3` of the smallest installed
//! release. The mutations aim at what the loader reads: the ELF header, the program and section
//! header tables, the dynamic section, the dynamic symbol, string, hash and relocation tables;
//! bytes, bit flips, fields set to edge values (aligned or not), truncations, and several at once.
//!
//! Each mutant goes through `elf::check_image`, the check the doctor runs before `dlopen`: no
//! panic, at most 1 s each, bounded memory; every truncation is refused. Mutants it accepts (and
//! a sample of those it refuses) are written out and given to the doctor binary: an exit status
//! of 0, 1 or 2 with a report, never a signal, never a hang (whatever passes the check and still
//! crashes the loader is contained in the doctor's child process and reported).
//! `UXN_DOCTOR_FUZZ_VERBOSE=1` prints each accepted mutant whose loading the child did not survive.

mod common;
mod doctor_util;

use doctor_util::*;
use object::{Object, ObjectSection};
use std::time::{Duration, Instant};
use upcxx_extra_nvshmem::internals::elf_check::{self as elf, FileProblem};

struct Base {
    name: String,
    bytes: Vec<u8>,
    /// File ranges the loader reads: the mutations land there.
    regions: Vec<(usize, usize)>,
    /// Mutants written out and run through the doctor binary (the real file is large).
    to_doctor: usize,
}

fn base(name: &str, bytes: Vec<u8>, to_doctor: usize) -> Base {
    let obj = object::File::parse(&*bytes).expect("ELF");
    let le64 = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    let le16 = |o: usize| u16::from_le_bytes(bytes[o..o + 2].try_into().unwrap()) as usize;
    let mut regions = vec![(0, 64), (le64(32), le64(32) + le16(56) * 56), (le64(40), le64(40) + le16(60) * 64)];
    for s in obj.sections() {
        let name = s.name().unwrap_or_default();
        if [
            ".dynamic",
            ".dynsym",
            ".dynstr",
            ".gnu.hash",
            ".hash",
            ".rela.dyn",
            ".rela.plt",
            ".gnu.version",
            ".gnu.version_r",
            ".gnu.version_d",
            ".note.gnu.build-id",
            ".note.gnu.property",
            ".init_array",
            ".fini_array",
            ".symtab",
            ".strtab",
            ".shstrtab",
        ]
        .contains(&name)
        {
            if let Some((off, size)) = s.file_range() {
                // The first 64 KiB of a large table is where any index into it starts.
                regions.push((off as usize, (off + size.min(65536)) as usize));
            }
        }
    }
    regions.retain(|(a, b)| a < b && *b <= bytes.len());
    Base { name: name.to_string(), bytes, regions, to_doctor }
}

const EDGES: [u64; 14] = [0, 1, 2, 7, 8, 0x38, 0x40, 0x7f, 0xff, 0xffff, 0x7fff_ffff, 0xffff_ffff, 1 << 63, u64::MAX];

/// One mutation, applied in place; returns the undo (offset, old bytes).
fn mutate(rng: &mut Rng, b: &mut [u8], regions: &[(usize, usize)]) -> (usize, Vec<u8>) {
    let (lo, hi) = regions[rng.below(regions.len() as u64) as usize];
    let mut at = lo + rng.below((hi - lo) as u64) as usize;
    let op = rng.below(10);
    let width = [1usize, 2, 4, 8][rng.below(4) as usize];
    if op >= 4 && rng.below(2) == 0 {
        at -= at % width; // a field, aligned as the headers' fields are
    }
    let width = if op < 4 { 1 } else { width.min(b.len() - at) };
    let old = b[at..at + width].to_vec();
    match op {
        0 | 1 => b[at] = rng.next() as u8,
        2 | 3 => b[at] ^= 1 << rng.below(8),
        _ => {
            let cur = old.iter().rev().fold(0u64, |v, x| (v << 8) | u64::from(*x));
            let v = match rng.below(5) {
                0 | 1 => EDGES[rng.below(EDGES.len() as u64) as usize],
                2 => b.len() as u64 + rng.below(3) - 1,
                3 => cur.wrapping_add(rng.below(33)).wrapping_sub(16),
                _ => rng.next(),
            };
            b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
        }
    }
    (at, old)
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

#[test]
fn mutated_libraries_never_crash_or_hang_the_doctor() {
    let iterations: usize = std::env::var("UXN_DOCTOR_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let seed: u64 = std::env::var("UXN_DOCTOR_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_2025);
    println!("seed {seed} (UXN_DOCTOR_FUZZ_SEED), {iterations} mutants (UXN_DOCTOR_FUZZ_ITERATIONS)");
    let dir = scratch("fuzz");
    let small = build_so(&dir, "libfake_nvshmem.so", &good_source());
    let mut bases = vec![base("crafted", std::fs::read(&small).unwrap(), 200)];
    if let Some(real) = real_library() {
        bases.push(base(&real.display().to_string(), std::fs::read(&real).unwrap(), 3));
    }
    for b in &bases {
        assert!(elf::check_image(&b.bytes[..]).is_ok(), "{}: the unmutated file must pass the check", b.name);
    }
    let out = dir.join("libmutant.so");
    let mut rng = Rng(seed | 1);
    let rss_before = rss_kib();
    let t0 = Instant::now();
    let (mut passed, mut refused, mut truncations) = (0usize, 0usize, 0usize);
    let mut kinds = std::collections::BTreeMap::<&str, usize>::new();
    let mut doctored = vec![0usize; bases.len()];
    let mut refused_doctored = 0usize;
    // Accepted mutants whose loading crashed or stalled the doctor's child (contained, reported).
    let mut contained = 0usize;
    let mut slowest = 0f64;
    for i in 0..iterations {
        // Mostly the small file (cheap to write out and load); one in four the real release.
        let which = if bases.len() > 1 && rng.below(4) == 0 { 1 } else { 0 };
        let b = &mut bases[which];
        let truncate = rng.below(8) == 0;
        let n_mut = if truncate && rng.below(2) == 0 { 0 } else { 1 + rng.below(4) as usize };
        let undo: Vec<(usize, Vec<u8>)> = (0..n_mut).map(|_| mutate(&mut rng, &mut b.bytes, &b.regions)).collect();
        let len = if truncate { rng.below(b.bytes.len() as u64) as usize } else { b.bytes.len() };
        let what = format!("mutant {i} of {} (seed {seed}): {undo:?} mutated, length {len}", b.name);
        let t = Instant::now();
        let r = std::panic::catch_unwind(|| elf::check_image(&b.bytes[..len])).unwrap_or_else(|_| panic!("{what}: check_image panicked"));
        let secs = t.elapsed().as_secs_f64();
        slowest = slowest.max(secs);
        assert!(secs < 1.0, "{what}: check_image took {secs:.2} s");
        match &r {
            Ok(_) => passed += 1,
            Err(p) => {
                refused += 1;
                *kinds
                    .entry(match p {
                        FileProblem::Truncated { .. } => "truncated",
                        FileProblem::Corrupt(_) => "corrupt",
                        FileProblem::NotElf => "not ELF",
                        FileProblem::Empty => "empty",
                        FileProblem::Unsupported(_) => "not loadable here",
                        FileProblem::NotRegular(_) | FileProblem::Io(_) => "io",
                    })
                    .or_default() += 1;
            }
        }
        if truncate && n_mut == 0 {
            // A partial copy is never given to dlopen (the SIGBUS of issue 25).
            truncations += 1;
            assert!(
                matches!(r, Err(FileProblem::Truncated { .. } | FileProblem::NotElf | FileProblem::Empty)),
                "{what}: a truncation passed the check: {r:?}"
            );
        }
        // The doctor binary on every accepted mutant (up to the base's share) and on a sample of
        // the refused ones: the same check, then dlopen in its child process.
        let run_it = if r.is_ok() { doctored[which] < b.to_doctor } else { which == 0 && refused_doctored < 40 && rng.below(50) == 0 };
        if run_it {
            std::fs::write(&out, &b.bytes[..len]).unwrap();
            let o = doctor(&["--json", out.to_str().unwrap()], &[], Duration::from_secs(40));
            assert!(!o.timed_out, "{what}: the doctor hung\n{}", o.text());
            assert_eq!(o.signal, None, "{what}: the doctor died of signal {:?}\n{}", o.signal, o.text());
            assert!(matches!(o.code, Some(0..=2)), "{what}: exit {:?}\n{}", o.code, o.text());
            let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{what}: no JSON ({e}): {}", o.text()));
            assert!(j["reason"].as_str().is_some_and(|s| !s.is_empty()), "{what}: {j:#}");
            if r.is_ok() {
                doctored[which] += 1;
                let reason = j["reason"].as_str().unwrap();
                contained += usize::from(reason.contains("the process that loaded it"));
                if std::env::var("UXN_DOCTOR_FUZZ_VERBOSE").is_ok() && reason.contains("the process that loaded it") {
                    println!("CONTAINED {what}: {reason}");
                }
            } else {
                refused_doctored += 1;
                assert_eq!(o.code, Some(2), "{what}: a refused file is unsupported: {j:#}");
                assert!(!j["reason"].as_str().unwrap().contains("dlopen"), "{what}: {j:#}");
            }
        }
        for (at, old) in undo.into_iter().rev() {
            b.bytes[at..at + old.len()].copy_from_slice(&old);
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let grown = rss_kib().saturating_sub(rss_before);
    println!(
        "{iterations} mutants in {secs:.1} s: {passed} passed the check, {refused} refused {kinds:?}; {truncations} pure truncations; \
         {} accepted ({contained} of them crashing the loader, contained in the doctor's child) and {refused_doctored} refused mutants \
         run through the doctor; slowest check {:.1} ms; RSS grew {grown} KiB",
        doctored.iter().sum::<usize>(),
        slowest * 1e3
    );
    assert!(iterations >= 10_000 || std::env::var("UXN_DOCTOR_FUZZ_ITERATIONS").is_ok(), "CI runs at least 10,000 mutants");
    assert!(grown < 64 * 1024, "memory grew by {grown} KiB over {iterations} checks");
    std::fs::remove_dir_all(&dir).ok();
}
