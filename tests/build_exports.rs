//! What the built shared library exports: exactly the functions the header declares, each named
//! `upcxx_extra_nvshmem_*`, and nothing else (the translation calls' slow paths stay private).
//!
//! That every export runs inside the panic boundary is not checked here: the compiler enforces it
//! (the crate denies `unsafe_code`, and only the `#[export]` macro allows a `no_mangle`; see the
//! doctests of `macros/src/lib.rs`, which show an export without the macro failing to compile).
//! This test reads the artifact, so a symbol exported some other way (a `#[export_name]`, a
//! dependency) is caught too.

use object::{Object, ObjectSymbol};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// The shared library of this build: `cargo test` builds the rlib the tests link, not always the
/// cdylib, so the test asks cargo for it (the same target directory and profile; a no-op when
/// it is up to date).
fn cdylib() -> PathBuf {
    // target/<profile>/deps/build_exports-<hash> -> target/<profile>/libupcxx_extra_nvshmem.so
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let release = dir.file_name().is_some_and(|n| n == "release");
    let mut cargo = std::process::Command::new(env!("CARGO"));
    cargo.args(["build", "--lib", "--locked", "--manifest-path", concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")]);
    if release {
        cargo.arg("--release");
    }
    let status = cargo.env("CARGO_TARGET_DIR", dir.parent().unwrap()).status().expect("run cargo");
    assert!(status.success(), "cargo build --lib failed");
    let so = dir.join("libupcxx_extra_nvshmem.so");
    assert!(so.is_file(), "{} not built", so.display());
    so
}

fn header_functions() -> BTreeSet<String> {
    let header = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/upcxx_extra_nvshmem.h")).unwrap();
    let mut out = BTreeSet::new();
    for line in header.lines().filter(|l| !l.trim_start().starts_with(['*', '/', '#'])) {
        for (i, _) in line.match_indices("upcxx_extra_nvshmem_") {
            let name: String = line[i..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if line[i + name.len()..].starts_with('(') {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn the_library_exports_exactly_the_header_functions() {
    let bytes = std::fs::read(cdylib()).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let exported: BTreeSet<String> = file
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.is_global() && s.kind() == object::SymbolKind::Text)
        .filter_map(|s| s.name().ok().map(str::to_string))
        .collect();
    let declared = header_functions();
    assert!(declared.len() >= 17, "expected the whole C ABI in the header, found {declared:?}");
    let ours: BTreeSet<String> = exported.iter().filter(|n| n.starts_with("upcxx_extra_nvshmem_")).cloned().collect();
    assert_eq!(ours, declared, "exported functions vs the header's");
    let foreign: Vec<&String> = exported.iter().filter(|n| !n.starts_with("upcxx_extra_nvshmem_")).collect();
    assert!(foreign.is_empty(), "the library exports functions outside its prefix: {foreign:?}");
}
