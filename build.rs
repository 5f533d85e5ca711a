//! Generates the C header with cbindgen into `$OUT_DIR`; the checked-in copy under `include/` is
//! compared with it by `tests/header_drift.rs` (and rewritten by `UPCXX_EXTRA_NVSHMEM_BLESS=1`).

fn main() {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("upcxx_extra_nvshmem.h");
    println!("cargo:rerun-if-changed=src");
    // The shared library's soname carries the major version (0 until 1.0: the minor).
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap();
    let abi = if major == "0" { format!("0.{minor}") } else { major };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libupcxx_extra_nvshmem.so.{abi}");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).expect("cbindgen.toml");
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header")
        .write_to_file(&out);
    // cbindgen qualifies variants with the renamed type (`..._STATUS_T_OK`); drop the `_T`.
    let text = std::fs::read_to_string(&out).unwrap();
    let text = text.replace("UPCXX_EXTRA_NVSHMEM_STATUS_T_", "UPCXX_EXTRA_NVSHMEM_STATUS_")
        .replace("UPCXX_EXTRA_NVSHMEM_SOURCE_T_", "UPCXX_EXTRA_NVSHMEM_SOURCE_");
    std::fs::write(&out, text).unwrap();
    if std::env::var_os("UPCXX_EXTRA_NVSHMEM_BLESS").is_some() {
        std::fs::copy(&out, format!("{crate_dir}/include/upcxx_extra_nvshmem.h")).expect("bless header");
    }
}
