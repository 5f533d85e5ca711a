//! Checks the offsets the library reads against each installed NVSHMEM release's own public
//! header (`include/device_host/nvshmem_types.h`), through bindgen, and the struct size against
//! the size of the `nvshmemi_device_state` symbol in that release's library.

mod common;

use upcxx_extra_nvshmem::internals::state_layout;

/// Parses bindgen's layout assertions: `["Offset of field: T::f"][offset_of!(T, f) - 40usize]`.
fn offset_in(generated: &str, ty: &str, field: &str) -> Option<usize> {
    let key = format!("\"Offset of field: {ty}::{field}\"]");
    let at = generated.find(&key)?;
    let rest = &generated[at..];
    let end = rest.find("usize]")?;
    let num = rest[..end].rsplit(" - ").next()?;
    num.trim().parse().ok()
}

fn size_in(generated: &str, ty: &str) -> Option<usize> {
    let key = format!("\"Size of {ty}\"]");
    let at = generated.find(&key)?;
    let rest = &generated[at..];
    let end = rest.find("usize]")?;
    rest[..end].rsplit(" - ").next()?.trim().parse().ok()
}

#[test]
fn offsets_match_every_release_header() {
    let roots = common::nvshmem_roots();
    let cuda_includes: Vec<String> =
        std::env::var("UXN_CUDA_INCLUDE").map(|s| s.split(':').filter(|p| !p.is_empty()).map(String::from).collect()).unwrap_or_default();
    for root in &roots {
        let header = root.join("include/device_host/nvshmem_types.h");
        let mut b = bindgen::Builder::default()
            .header(header.to_string_lossy())
            .clang_args(["-x", "c++", "-std=c++17"])
            .clang_arg(format!("-I{}", root.join("include").display()))
            .allowlist_type("nvshmemi_device_host_state_t")
            .layout_tests(true);
        for inc in &cuda_includes {
            b = b.clang_arg(format!("-I{inc}"));
        }
        let generated = b.generate().unwrap_or_else(|e| panic!("bindgen on {}: {e}", header.display())).to_string();
        // The typedef names a versioned struct (nvshmemi_device_host_state_v1, ...).
        let ty = generated
            .split("pub type nvshmemi_device_host_state_t = ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .unwrap_or("nvshmemi_device_host_state_t")
            .trim()
            .to_string();
        let expect = [
            ("version", state_layout::OFF_VERSION),
            ("mype", state_layout::OFF_MYPE),
            ("npes", state_layout::OFF_NPES),
            ("heap_base", state_layout::OFF_HEAP_BASE),
            ("heap_size", state_layout::OFF_HEAP_SIZE),
            ("peer_heap_base_p2p", state_layout::OFF_PEER_HEAP_BASE_P2P),
            ("peer_heap_base_remote", state_layout::OFF_PEER_HEAP_BASE_REMOTE),
        ];
        let release = common::release_of(root);
        for (field, off) in expect {
            let got = offset_in(&generated, &ty, field).unwrap_or_else(|| panic!("{release}: no offset for {ty}::{field}"));
            assert_eq!(got, off, "{release}: {ty}::{field} is at {got}, the library reads {off}");
        }
        let size = size_in(&generated, &ty).unwrap_or_else(|| panic!("{release}: no size for {ty}"));
        let lib = root.join("lib/libnvshmem_host.so.3");
        let sym = upcxx_extra_nvshmem::internals::elf::lookup(&lib, &["nvshmemi_device_state"]).unwrap().symbols[0].unwrap();
        assert_eq!(size as u64, sym.size, "{release}: sizeof({ty}) from the header vs st_size of nvshmemi_device_state");
        assert!(size >= state_layout::PREFIX_LEN);
        println!("{release}: {ty} is {size} bytes (= st_size); version field will be 0x{:x}; offsets {expect:?} match", 0x10000 + size);
    }
}
