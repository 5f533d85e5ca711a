//! The doctor on hostile input (issue 25): a corpus generated here from a real NVSHMEM release
//! and from small crafted sources. Each file gets its documented exit status and a message
//! within 2 s, never a signal, never a hang:
//! - the release cut at every `PT_LOAD` and section boundary and at seeded random offsets
//!   (before the fix: SIGBUS inside `dlopen`; a cut inside the symbol table: "stripped");
//! - a FIFO (before: blocked forever in `open`), a socket, `/dev/zero`, a directory, a symlink
//!   loop, a zero-length file;
//! - `nvshmem_info_get_name` / `nvshmemx_init_status` as data symbols (before: SIGSEGV, a jump
//!   into data), also placed in an executable section;
//! - `nvshmemi_device_state` with `st_size` 2^64-1, 2^16 or at an odd address (before: a panic
//!   in debug builds, "supported" in release builds);
//! - a library whose constructor crashes or stalls (contained: the doctor loads in a child
//!   process, killed after `UXN_DOCTOR_LOAD_TIMEOUT_S`).

mod common;
mod doctor_util;

use doctor_util::*;
use object::{Object, ObjectSection, ObjectSegment};
use std::path::Path;
use std::time::Duration;

/// Every corpus file: exit status and message within this many seconds.
const LIMIT_S: f64 = 2.0;
const KILL_AFTER: Duration = Duration::from_secs(30);

fn run(path: &Path) -> Outcome {
    doctor(&[path.to_str().unwrap()], &[], KILL_AFTER)
}

/// The offsets to cut `bytes` at: each PT_LOAD's start and end, each section's start and end,
/// the section header table's start, one byte either side of each, the first header sizes, and
/// `random` seeded offsets.
fn cut_points(bytes: &[u8], random: usize, seed: u64) -> Vec<u64> {
    let obj = object::File::parse(bytes).expect("a real ELF file");
    let len = bytes.len() as u64;
    let mut v = vec![1, 3, 4, 15, 16, 63, 64, 100, 512, 682, 1000, 4096];
    for seg in obj.segments() {
        let (off, size) = seg.file_range();
        v.extend([off, off + size]);
    }
    for s in obj.sections() {
        if let Some((off, size)) = s.file_range() {
            v.extend([off, off + size]);
        }
    }
    {
        v.push(u64::from_le_bytes(bytes[40..48].try_into().unwrap()));
    }
    let mut rng = Rng(seed);
    v.extend((0..random).map(|_| 1 + rng.below(len - 1)));
    let mut all: Vec<u64> = v.iter().flat_map(|&o| [o.saturating_sub(1), o, o + 1]).filter(|&o| o > 0 && o < len).collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Cuts a copy of `src` at each point (longest first: one copy, then `ftruncate`) and checks the
/// doctor's answer on each: exit 2, "is truncated" (or "not an ELF ..." for a cut inside the
/// magic), never "stripped", never a signal.
fn truncations(src: &Path, dir: &Path, random: usize) -> usize {
    let bytes = std::fs::read(src).unwrap();
    let mut points = cut_points(&bytes, random, 0x2525_0005);
    drop(bytes);
    points.reverse();
    let copy = dir.join("libnvshmem_host.so.3");
    std::fs::copy(src, &copy).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&copy).unwrap();
    for &n in &points {
        f.set_len(n).unwrap();
        let o = run(&copy);
        let what = format!("{} cut at {n} bytes", src.display());
        o.expect(2, LIMIT_S, &what);
        let text = o.text();
        if n < 4 {
            assert!(text.contains("is not an ELF shared library"), "{what}: {text}");
        } else {
            assert!(text.contains(&format!("is truncated: it has {n} bytes")), "{what}: {text}");
        }
        assert!(!text.contains("stripped"), "{what}: {text}");
        assert!(!text.contains("dlopen"), "{what}: the file was given to dlopen: {text}");
    }
    points.len()
}

#[test]
fn truncated_real_release() {
    let Some(lib) = real_library() else { return };
    let dir = scratch("corpus-cut-real");
    let n = truncations(&lib, &dir, 40);
    std::fs::remove_dir_all(&dir).ok();
    println!("{}: {n} truncations, each exit 2 'is truncated'", lib.display());
}

#[test]
fn truncated_crafted_library() {
    let dir = scratch("corpus-cut-small");
    let so = build_so(&dir, "libgood.so", &good_source());
    // The whole file first: supported.
    run(&so).expect(0, LIMIT_S, "the crafted library");
    let cut = scratch("corpus-cut-small-copies");
    let n = truncations(&so, &cut, 60);
    for d in [&dir, &cut] {
        std::fs::remove_dir_all(d).ok();
    }
    println!("crafted library: {n} truncations, each exit 2");
}

#[test]
fn files_that_are_not_regular_files() {
    let dir = scratch("corpus-special");
    let fifo = dir.join("fifo.so");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let sock = dir.join("socket.so");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let (a, b) = (dir.join("loop-a.so"), dir.join("loop-b.so"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let empty_dir = dir.join("emptydir");
    std::fs::create_dir(&empty_dir).unwrap();
    // A root whose lib/libnvshmem_host.so.3 is a FIFO: not taken for the library, and named.
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("lib")).unwrap();
    let c = std::ffi::CString::new(root.join("lib/libnvshmem_host.so.3").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);

    let cases: [(&Path, &str); 6] = [
        (&fifo, "is a FIFO (named pipe), not a regular file"),
        (&sock, "is a socket, not a regular file"),
        (Path::new("/dev/zero"), "is a character device, not a regular file"),
        (&empty_dir, "is a directory without an NVSHMEM host library"),
        (&a, "Too many levels of symbolic links"),
        (&root, "lib/libnvshmem_host.so.3 is a FIFO (named pipe), not a shared library"),
    ];
    for (path, want) in cases {
        for json in [false, true] {
            let args: Vec<&str> = if json { vec!["--json", path.to_str().unwrap()] } else { vec![path.to_str().unwrap()] };
            let o = doctor(&args, &[], KILL_AFTER);
            let what = format!("{}", path.display());
            o.expect(66, LIMIT_S, &what);
            assert!(o.stdout.is_empty(), "{what}: exit 66 writes nothing to stdout: {}", o.stdout);
            assert!(o.stderr.contains(want), "{what}: {}", o.stderr);
        }
    }
    // Zero bytes: read, and not a library (unsupported, exit 2).
    let zero = dir.join("zero.so");
    std::fs::write(&zero, b"").unwrap();
    let o = run(&zero);
    o.expect(2, LIMIT_S, "a zero-length file");
    assert!(o.stdout.contains("is empty (0 bytes): not an ELF shared library"), "{}", o.stdout);
    std::fs::remove_dir_all(&dir).ok();
}

fn json_of(o: &Outcome) -> serde_json::Value {
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("no JSON ({e}): {}", o.text()))
}

#[test]
fn data_symbols_named_like_the_api_are_not_called() {
    let dir = scratch("corpus-data");
    for (name, src) in [("libdata.so", DATA_API), ("libtextdata.so", DATA_IN_TEXT_API)] {
        let so = build_so(&dir, name, src);
        let o = doctor(&["--json", so.to_str().unwrap()], &[], KILL_AFTER);
        o.expect(2, LIMIT_S, name);
        let j = json_of(&o);
        let reason = j["reason"].as_str().unwrap();
        assert!(reason.contains("it exports neither nvshmemx_init_status nor nvshmem_info_get_name as a function"), "{name}: {reason}");
        assert!(reason.contains("nvshmemx_init_status and nvshmem_info_get_name are each a data symbol there, never called"), "{reason}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn absurd_or_misaligned_state_symbols_are_refused() {
    let dir = scratch("corpus-state");
    let cases = [
        ("libhuge.so", state_source("0xffffffffffffffff", 0), "is 18446744073709551615 bytes (st_size), more than the 65535 bytes"),
        ("lib64k.so", state_source("0x10000", 0), "is 65536 bytes (st_size), more than the 65535 bytes"),
        ("libodd.so", state_source("848", 1), "not 8-byte aligned"),
        ("libodd4.so", state_source("848", 4), "not 8-byte aligned"),
        ("libsmall.so", state_source("16", 0), "is 16 bytes, smaller than the 72 bytes read"),
    ];
    for (name, src, want) in cases {
        let so = build_so(&dir, name, &src);
        let o = doctor(&["--json", so.to_str().unwrap()], &[], KILL_AFTER);
        o.expect(2, LIMIT_S, name);
        let j = json_of(&o);
        assert_eq!(j["verdict"], "unsupported", "{name}: {j:#}");
        assert_eq!(j["layout"]["check"], "fail", "{name}: {j:#}");
        assert!(j["layout"]["detail"].as_str().unwrap().contains(want), "{name}: {j:#}");
        let symtab = j["steps"].as_array().unwrap().iter().find(|s| s["step"] == "symtab").unwrap();
        assert_eq!(symtab["available"], false, "{name}: {j:#}");
        assert_eq!(symtab["status"], "UNSUPPORTED_LAYOUT", "{name}: {j:#}");
    }
    // The same source with a sane symbol is supported: the refusals above are the symbol's.
    let so = build_so(&dir, "libsane.so", &state_source("848", 0));
    let o = doctor(&["--json", so.to_str().unwrap()], &[], KILL_AFTER);
    o.expect(0, LIMIT_S, "libsane.so");
    assert_eq!(json_of(&o)["layout"]["check"], "pass");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_library_that_crashes_when_loaded_is_reported() {
    let dir = scratch("corpus-ctor");
    let so = build_so(&dir, "libboom.so", &crashing_constructor_source());
    let o = doctor(&["--json", so.to_str().unwrap()], &[], KILL_AFTER);
    o.expect(2, LIMIT_S, "libboom.so");
    let j = json_of(&o);
    let reason = j["reason"].as_str().unwrap();
    assert!(reason.contains("killed the process that loaded it with signal 11"), "{reason}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_library_that_stalls_when_loaded_is_reported() {
    // The load timeout (20 s) shortened to 1 s: the child is killed, the doctor answers.
    let dir = scratch("corpus-stall");
    let so = build_so(&dir, "libstall.so", &stalling_constructor_source());
    let o = doctor(&["--json", so.to_str().unwrap()], &[("UXN_DOCTOR_LOAD_TIMEOUT_S", "1")], KILL_AFTER);
    o.expect(2, LIMIT_S + 1.0, "libstall.so");
    let reason = json_of(&o)["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("loading it had not finished after 1 s (the process that loaded it was killed)"), "{reason}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn corrupt_headers_are_named_corrupt() {
    // A few hand-made corruptions of the crafted library: each named, none loaded.
    let dir = scratch("corpus-corrupt");
    let so = build_so(&dir, "libgood.so", &good_source());
    let bytes = std::fs::read(&so).unwrap();
    let le64 = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let phoff = le64(&bytes, 32) as usize;
    let shoff = le64(&bytes, 40) as usize;
    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    let mut b = bytes.clone();
    b[54] = 55; // e_phentsize
    cases.push(("e_phentsize 55", b, "is a corrupt ELF file (e_phentsize is 55, not 56)"));
    let mut b = bytes.clone();
    b[phoff + 32..phoff + 40].copy_from_slice(&u64::MAX.to_le_bytes()); // PT_LOAD 0 p_filesz
    cases.push(("p_filesz 2^64-1", b, "is a corrupt ELF file (program header 0 (PT_LOAD): p_filesz 0xffffffffffffffff > p_memsz"));
    let mut b = bytes.clone();
    b[phoff + 8..phoff + 16].copy_from_slice(&(u64::MAX - 8).to_le_bytes()); // PT_LOAD 0 p_offset
    cases.push(("p_offset 2^64-9", b, "is a corrupt ELF file (program header 0 (PT_LOAD): offset 0xfffffffffffffff7 + size"));
    let mut b = bytes.clone();
    b[40..48].copy_from_slice(&(shoff as u64 + 3).to_le_bytes()); // e_shoff past the table
    cases.push(("e_shoff moved", b, "is truncated"));
    // .symtab's sh_link pointed at a section that is no string table (it used to be "stripped"
    // or "unreadable" after dlopen): corrupt.
    let mut b = bytes.clone();
    let shnum = u16::from_le_bytes([bytes[60], bytes[61]]) as usize;
    let symtab = (0..shnum).map(|i| shoff + i * 64).find(|o| bytes[o + 4] == 2).expect(".symtab");
    b[symtab + 40..symtab + 44].copy_from_slice(&1u32.to_le_bytes());
    cases.push((".symtab linked to section 1", b, "its string table 1 is not a string table section"));
    let mut b = bytes.clone();
    b[4] = 1; // ELFCLASS32
    cases.push(("ELFCLASS32", b, "cannot be loaded by this process: it is a 32-bit ELF file"));
    let mut b = bytes.clone();
    b[16] = 2; // ET_EXEC
    cases.push(("ET_EXEC", b, "an executable (ET_EXEC), not a shared library"));
    for (what, b, want) in cases {
        let p = dir.join("libcorrupt.so");
        std::fs::write(&p, &b).unwrap();
        let o = run(&p);
        o.expect(2, LIMIT_S, what);
        assert!(o.stdout.contains(want), "{what}: {}", o.stdout);
        assert!(!o.stdout.contains("stripped"), "{what}: {}", o.stdout);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_library_writing_to_stdout_does_not_corrupt_the_report() {
    // A constructor that writes to the child's stdout (write(2), unbuffered), JSON-looking
    // noise included: the report is still the doctor's own, and the noise goes to stderr.
    let dir = scratch("corpus-noise");
    let src = format!(
        "{}\n#include <unistd.h>\n__attribute__((constructor)) static void noise(void) {{ \
         static const char m[] = \"{{\\\"verdict\\\": \\\"forged\\\"\\n\"; write(1, m, sizeof m - 1); }}\n",
        good_source()
    );
    let so = build_so(&dir, "libnoisy.so", &src);
    let o = doctor(&["--json", so.to_str().unwrap()], &[], KILL_AFTER);
    o.expect(0, LIMIT_S, "libnoisy.so");
    let j = json_of(&o);
    assert_eq!(j["verdict"], "supported", "{}", o.text());
    assert!(o.stderr.contains("\"verdict\": \"forged\""), "the library's output is passed on to stderr: {}", o.stderr);
    std::fs::remove_dir_all(&dir).ok();
}
