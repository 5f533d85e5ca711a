//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::ffi::c_void;
use std::path::PathBuf;
use upcxx_extra_nvshmem::abi::HeapInfo;
use upcxx_extra_nvshmem::abi::Source;

/// A heap description for `upcxx_extra_nvshmem_attach`: `size` bytes at `base`, all mapped,
/// PE `my_pe` of `n_pes`, device and versions unknown (tests change fields with `..`).
pub fn heap_info(base: *mut c_void, size: usize, my_pe: i32, n_pes: i32) -> HeapInfo {
    HeapInfo {
        base,
        size,
        mapped_size: size,
        my_pe,
        n_pes,
        device: -1,
        version_major: -1,
        version_minor: -1,
        version_patch: -1,
        source: Source::None,
    }
}

/// The `.../nvidia/nvshmem` directories of the pip-installed NVSHMEM releases to test against:
/// `UXN_NVSHMEM_ROOTS` (colon-separated), else `$UXN_CACHE` or `~/.cache/upcxx-extra-nvshmem`
/// `/nvshmem/<version>/nvidia/nvshmem` as `.ci/run` installs them.
/// With `UXN_REQUIRE_NVSHMEM=1` (CI) finding none is a failure; otherwise the caller skips,
/// printing why.
pub fn nvshmem_roots() -> Vec<PathBuf> {
    let roots: Vec<PathBuf> = match std::env::var("UXN_NVSHMEM_ROOTS") {
        Ok(s) if !s.is_empty() => s.split(':').map(PathBuf::from).collect(),
        _ => {
            let cache = std::env::var("UXN_CACHE").map(PathBuf::from).unwrap_or_else(|_| {
                PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cache/upcxx-extra-nvshmem")
            });
            let mut v: Vec<PathBuf> = std::fs::read_dir(cache.join("nvshmem"))
                .map(|d| d.flatten().map(|e| e.path().join("nvidia/nvshmem")).filter(|p| p.is_dir()).collect())
                .unwrap_or_default();
            v.sort();
            v
        }
    };
    let roots: Vec<PathBuf> = roots.into_iter().filter(|r| r.join("lib/libnvshmem_host.so.3").is_file()).collect();
    if roots.is_empty() {
        assert!(
            std::env::var("UXN_REQUIRE_NVSHMEM").is_err(),
            "UXN_REQUIRE_NVSHMEM is set but no NVSHMEM release was found (set UXN_NVSHMEM_ROOTS or run .ci/run)"
        );
        eprintln!("SKIPPED: no pip-installed NVSHMEM found (set UXN_NVSHMEM_ROOTS or UXN_CACHE; .ci/run installs them)");
    }
    roots
}

/// The release of a root, read from the wheel's dist-info beside it ("3.4.5"), or the dir name.
pub fn release_of(root: &std::path::Path) -> String {
    let site = root.parent().and_then(|p| p.parent());
    if let Some(site) = site {
        if let Ok(d) = std::fs::read_dir(site) {
            for e in d.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if let Some(rest) = n.strip_prefix("nvidia_nvshmem_cu12-").or_else(|| n.strip_prefix("nvidia_nvshmem_cu13-")) {
                    return rest.trim_end_matches(".dist-info").to_string();
                }
            }
        }
    }
    root.display().to_string()
}

/// Every `.rs` file below `dir`, recursively (the source checks of `build_layers` and
/// `build_owners`).
pub fn rust_files(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}
