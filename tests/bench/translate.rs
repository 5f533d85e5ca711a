//! Criterion benches of the translation hot path through the C ABI, against the same
//! arithmetic inlined (the baseline measured in the same run), for 2 .. 1,048,576 PEs with
//! uniform bases + identity ranks and with random bases + a shuffled PE -> rank map.
//! Host memory stands in for the heap (no GPU needed): translation never dereferences it.
//!
//! Run: `cargo bench --bench translate` (figures go to BENCHMARKS.md).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::ffi::c_void;
use std::hint::black_box;
use upcxx_extra_nvshmem::abi::Source;
use upcxx_extra_nvshmem::abi::*;

const HEAP: usize = 1 << 30;
const LANES: usize = 4096;

/// A tiny deterministic generator (no extra dependency).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 17
    }
}

struct Setup {
    base: usize,
    bases: Vec<usize>,
    rank_of_pe: Vec<i32>,
    pes: Vec<i32>,
    offs: Vec<usize>,
}

fn setup(n: usize, random: bool) -> Setup {
    let mut rng = Lcg(42 + n as u64);
    let base = 0x4_2000_0000_usize;
    let bases: Vec<usize> =
        (0..n).map(|p| if random && p != 0 { 0x1000_0000_0000 + (rng.next() as usize % 1_000_000) * HEAP } else { base }).collect();
    let mut rank_of_pe: Vec<i32> = (0..n as i32).collect();
    if random {
        for i in (1..n).rev() {
            rank_of_pe.swap(i, rng.next() as usize % (i + 1));
        }
    }
    let info = HeapInfo {
        base: base as *mut c_void,
        size: HEAP,
        mapped_size: HEAP,
        my_pe: 0,
        n_pes: n as i32,
        device: 0,
        version_major: -1,
        version_minor: -1,
        version_patch: -1,
        source: Source::Manual,
    };
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_attach(&info) as i32, 0);
        let peers: Vec<Peer> = (0..n).map(|p| Peer { rank: rank_of_pe[p], base: bases[p] as *mut c_void }).collect();
        assert_eq!(upcxx_extra_nvshmem_set_peers(n as i32, peers.as_ptr()) as i32, 0);
    }
    let pes = (0..LANES).map(|_| (rng.next() as usize % n) as i32).collect();
    let offs = (0..LANES).map(|_| rng.next() as usize % HEAP).collect();
    Setup { base, bases, rank_of_pe, pes, offs }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("translate");
    for &n in &[2usize, 64, 4096, 65_536, 1_048_576] {
        for random in [false, true] {
            let s = setup(n, random);
            let case = if random { "random" } else { "uniform" };
            let id = |what: &str| BenchmarkId::new(format!("{what}/{case}"), n);
            g.bench_function(id("inline_baseline"), |b| {
                let mut i = 0usize;
                b.iter(|| {
                    i = (i + 1) & (LANES - 1);
                    let pe = s.pes[i] as usize;
                    let sym = s.base + s.offs[i];
                    black_box((s.rank_of_pe[pe], s.bases[pe] + (sym - s.base)))
                })
            });
            g.bench_function(id("to_global_ptr"), |b| {
                let mut i = 0usize;
                let mut out = GlobalPtr { rank: 0, device: 0, raw: std::ptr::null_mut(), pe: 0 };
                b.iter(|| {
                    i = (i + 1) & (LANES - 1);
                    let st = unsafe { upcxx_extra_nvshmem_to_global_ptr((s.base + s.offs[i]) as *const c_void, s.pes[i], &mut out) };
                    black_box((st, out.raw))
                })
            });
            g.bench_function(id("from_global_ptr"), |b| {
                let mut i = 0usize;
                let (mut sym, mut pe) = (std::ptr::null_mut(), 0);
                b.iter(|| {
                    i = (i + 1) & (LANES - 1);
                    let p = s.pes[i] as usize;
                    let st = unsafe {
                        upcxx_extra_nvshmem_from_global_ptr(s.rank_of_pe[p], (s.bases[p] + s.offs[i]) as *const c_void, &mut sym, &mut pe)
                    };
                    black_box((st, sym))
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_millis(300)).measurement_time(std::time::Duration::from_millis(800));
    targets = bench
}
criterion_main!(benches);
