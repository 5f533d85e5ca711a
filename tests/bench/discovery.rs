//! Criterion benches of discovery on the real NVSHMEM host libraries (the pip wheels that
//! `scripts/install-deps.sh` caches): the first `.symtab` read of the file (mmap + parse +
//! symbol search, no cache) and a repeated resolution (cached by file identity), each against
//! a baseline measured in the same run: a `stat` of the same file.
//!
//! Run: `cargo bench --bench discovery` (figures go to BENCHMARKS.md).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::ffi::CString;
use std::hint::black_box;
use std::path::PathBuf;
use upcxx_extra_nvshmem::internals::discovery;
use upcxx_extra_nvshmem::internals::elf;

fn roots() -> Vec<PathBuf> {
    if let Ok(s) = std::env::var("UXN_NVSHMEM_ROOTS") {
        return s.split(':').filter(|p| !p.is_empty()).map(PathBuf::from).collect();
    }
    let cache = std::env::var("UXN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/upcxx-extra-nvshmem"));
    ["3.1.7", "3.4.5", "3.8.0"].iter().map(|v| cache.join("nvshmem").join(v).join("nvidia/nvshmem")).filter(|p| p.is_dir()).collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("discovery");
    for root in roots() {
        let lib = root.join("lib/libnvshmem_host.so.3");
        let release = root
            .parent()
            .and_then(|p| p.parent())
            .and_then(|p| p.file_name())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let size_mb = std::fs::metadata(&lib).map(|m| m.len() / 1_000_000).unwrap_or(0);
        let id = |what: &str| BenchmarkId::new(what, format!("{release} ({size_mb} MB)"));
        g.bench_function(id("stat_baseline"), |b| b.iter(|| black_box(std::fs::metadata(&lib).unwrap().len())));
        g.bench_function(id("symtab_first_read"), |b| {
            b.iter(|| black_box(elf::lookup_uncached(&lib, &["nvshmemi_device_state"]).unwrap()))
        });
        // Repeated resolution in a process that has the library loaded (as a job has).
        let c = CString::new(lib.to_str().unwrap()).unwrap();
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null());
        g.bench_function(id("locate_symtab_repeated"), |b| {
            b.iter(|| black_box(discovery::locate(Some(discovery::Step::Symtab)).unwrap().version_field))
        });
        unsafe { libc::dlclose(h) };
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(std::time::Duration::from_millis(200)).measurement_time(std::time::Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
