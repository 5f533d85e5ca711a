//! The checked-in header must be exactly what cbindgen generates from the code.
//! Regenerate with `UPCXX_EXTRA_NVSHMEM_BLESS=1 cargo build`.

#[test]
fn checked_in_header_matches_generated() {
    let generated = include_str!(concat!(env!("OUT_DIR"), "/upcxx_extra_nvshmem.h"));
    let checked_in = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/upcxx_extra_nvshmem.h")).unwrap();
    assert!(
        generated == checked_in,
        "include/upcxx_extra_nvshmem.h drifted from the code: run `UPCXX_EXTRA_NVSHMEM_BLESS=1 cargo build` and commit it"
    );
    assert!(checked_in.contains("do not edit"));
}
