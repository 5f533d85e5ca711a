//! What the built shared library exports: exactly the functions the header declares, each named
//! `upcxx_extra_nvshmem_*`, each through the `#[export]` panic boundary, and nothing else (no
//! data, no other function: the translation calls' slow paths stay private). The one check of
//! the exports (CMake and the C tests have none of their own).
//!
//! The compiler refuses a `no_mangle` outside `#[export]` (the crate denies `unsafe_code`; see the
//! doctests of `macros/src/lib.rs`), unless code allows the lint by hand. This test closes that
//! gap on the artifact: `#[export]` leaves each export's name in the library's
//! `upcxx_extra_nvshmem_exports` section, and every exported function must have its record there
//! (a `no_mangle` written by hand, nested in another function, or an `export_name`, has none).

use object::{Object, ObjectSection, ObjectSymbol};
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
    // Every symbol the library defines for others (functions, data, weak or not), as
    // `nm -D --defined-only` lists them, but the loader's _init/_fini.
    let defined: Vec<(String, object::SymbolKind)> = file
        .dynamic_symbols()
        .filter(|s| s.is_definition() && !s.is_local())
        .filter_map(|s| s.name().ok().map(|n| (n.to_string(), s.kind())))
        .filter(|(n, _)| n != "_init" && n != "_fini")
        .collect();
    let not_functions: Vec<&(String, object::SymbolKind)> = defined.iter().filter(|(_, k)| *k != object::SymbolKind::Text).collect();
    assert!(not_functions.is_empty(), "the library exports symbols that are not functions: {not_functions:?}");
    let exported: BTreeSet<String> = defined.into_iter().map(|(n, _)| n).collect();
    let declared = header_functions();
    assert!(declared.len() >= 19, "expected the whole C ABI in the header, found {declared:?}");
    let foreign: Vec<&String> = exported.iter().filter(|n| !n.starts_with("upcxx_extra_nvshmem_")).collect();
    assert!(foreign.is_empty(), "the library exports functions outside its prefix: {foreign:?}");
    assert_eq!(exported, declared, "exported functions vs the header's");
    // Every exported function went through #[export].
    let section = file.section_by_name("upcxx_extra_nvshmem_exports").expect("no upcxx_extra_nvshmem_exports section");
    let records = boundary_records(section.data().unwrap());
    let without: Vec<&String> = exported.difference(&records).collect();
    assert!(without.is_empty(), "exported without the #[export] boundary: {without:?}");
    assert_eq!(records, exported, "#[export] records vs exported functions");
}

/// The names `#[export]` recorded (NUL-terminated, back to back; the linker may pad between).
fn boundary_records(data: &[u8]) -> BTreeSet<String> {
    data.split(|b| *b == 0).filter(|r| !r.is_empty()).map(|r| String::from_utf8_lossy(r).into_owned()).collect()
}

#[test]
fn a_function_without_a_record_is_reported() {
    // The check above, on a section that lacks one of two exports' records.
    let exported: BTreeSet<String> = ["upcxx_extra_nvshmem_a", "upcxx_extra_nvshmem_b"].map(String::from).into();
    let records = boundary_records(b"upcxx_extra_nvshmem_a\0\0\0");
    let without: Vec<&String> = exported.difference(&records).collect();
    assert_eq!(without, ["upcxx_extra_nvshmem_b"]);
}
