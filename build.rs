//! Generates the C header with cbindgen into `$OUT_DIR`; the checked-in copy under `include/` is
//! compared with it by `tests/build_header_drift.rs` (and rewritten by `UPCXX_EXTRA_NVSHMEM_BLESS=1`).

fn main() {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("upcxx_extra_nvshmem.h");
    println!("cargo:rerun-if-changed=src");
    // The shared library's soname carries the C ABI's version, read from the one place it is
    // written (Cargo.toml, which CMakeLists.txt reads for the install's names too).
    let abi = abi_version(&crate_dir);
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libupcxx_extra_nvshmem.so.{abi}");
    println!("cargo:rerun-if-changed=Cargo.toml");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-env-changed=UPCXX_EXTRA_NVSHMEM_BLESS");
    let mut config = cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).expect("cbindgen.toml");
    // Version macros from Cargo.toml's version (one source of truth), for #if in users' code.
    let v = |k: &str| std::env::var(k).unwrap();
    config.after_includes = Some(format!(
        "\n/** The version of upcxx-extra-nvshmem this header belongs to (`upcxx_extra_nvshmem_version()` says the library's). */\n\
         #define UPCXX_EXTRA_NVSHMEM_VERSION_MAJOR {}\n#define UPCXX_EXTRA_NVSHMEM_VERSION_MINOR {}\n\
         #define UPCXX_EXTRA_NVSHMEM_VERSION_PATCH {}\n#define UPCXX_EXTRA_NVSHMEM_VERSION_STRING \"{}\"\n\
         /** Thread safety: every function may be called from any thread; none waits on another process but\n\
         \x20* upcxx_extra_nvshmem_nvshmem_init and _nvshmem_finalize (NVSHMEM's own collectives); the translation\n\
         \x20* functions are lock-free. Process-wide state: the heap, its peer table, the selected resolution step and\n\
         \x20* NVSHMEM's host library once loaded; thread-local: the last error message. Each function below lists the\n\
         \x20* statuses it returns. */",
        v("CARGO_PKG_VERSION_MAJOR"),
        v("CARGO_PKG_VERSION_MINOR"),
        v("CARGO_PKG_VERSION_PATCH"),
        v("CARGO_PKG_VERSION")
    ));
    let mut text = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config.clone())
        .generate()
        .expect("cbindgen could not generate the header")
        .write(&mut text);
    let mut text = String::from_utf8(text).expect("the header is UTF-8");
    // The C enum values are named after their type without its `_t`: cbindgen's prefix
    // (`prefix_with_name`) is the whole C type name, so `_T_` goes here. Every C enum's values
    // must have had it (else the rule above changed, and this must be looked at again).
    for c_name in config.export.rename.values().filter(|c| c.ends_with("_t")) {
        let upper = c_name.to_uppercase();
        let (with_t, without) = (format!("{upper}_"), format!("{}_", &upper[..upper.len() - 2]));
        if text.contains(&format!("typedef enum {c_name} ")) {
            assert!(text.contains(&with_t), "no value of enum {c_name} starts with {with_t}");
            text = text.replace(&with_t, &without);
        }
    }
    std::fs::write(&out, &text).expect("write the header");
    if std::env::var_os("UPCXX_EXTRA_NVSHMEM_BLESS").is_some() {
        std::fs::copy(&out, format!("{crate_dir}/include/upcxx_extra_nvshmem.h")).expect("bless header");
    }
}

/// The C ABI's version: the line `abi = "..."` of Cargo.toml (`[package.metadata.upcxx-extra-nvshmem]`;
/// CMakeLists.txt reads the same line). The package's version must lie within it (0.1 holds 0.1.x).
fn abi_version(crate_dir: &str) -> String {
    let manifest = std::fs::read_to_string(format!("{crate_dir}/Cargo.toml")).expect("read Cargo.toml");
    let abi = manifest
        .lines()
        .find_map(|l| l.strip_prefix("abi")?.trim_start().strip_prefix('=')?.trim().strip_prefix('"')?.strip_suffix('"'))
        .expect("Cargo.toml: no `abi = \"...\"` in [package.metadata.upcxx-extra-nvshmem]")
        .to_string();
    let version = std::env::var("CARGO_PKG_VERSION").unwrap();
    assert!(
        version.starts_with(&format!("{abi}.")),
        "Cargo.toml: version {version} is not within the ABI version {abi} ([package.metadata.upcxx-extra-nvshmem] abi): \
         change abi with the version"
    );
    abi
}
