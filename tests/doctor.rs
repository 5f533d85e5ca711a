//! The doctor against each pip-installed NVSHMEM release (supported), a stripped copy of one
//! (degraded: only the public route is left), a shared library that is not NVSHMEM and a file
//! that is not a library (unsupported). Golden checks on JSON fields, not on whole text.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn doctor(args: &[&str], env: &[(&str, &str)]) -> (i32, Value, f64) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_upcxx-nvshmem-doctor"));
    c.arg("--json").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let t = Instant::now();
    let out = c.output().unwrap();
    let secs = t.elapsed().as_secs_f64();
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor {args:?} printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), json, secs)
}

fn step<'a>(j: &'a Value, name: &str) -> &'a Value {
    j["steps"].as_array().unwrap().iter().find(|s| s["step"] == name).unwrap()
}

#[test]
fn every_release_is_supported() {
    for root in common::nvshmem_roots() {
        let lib = root.join("lib/libnvshmem_host.so.3");
        let (code, j, secs) = doctor(&[lib.to_str().unwrap()], &[]);
        let release = common::release_of(&root);
        assert_eq!(code, 0, "{release}: {j:#}");
        assert_eq!(j["verdict"], "supported");
        assert_eq!(j["exit_code"], 0);
        assert_eq!(j["nvshmem"]["version"], release.as_str(), "{j:#}");
        assert_eq!(j["symtab_present"], true);
        assert_eq!(step(&j, "dlsym")["available"], false);
        assert_eq!(step(&j, "dlsym")["status"], "STEP_UNAVAILABLE");
        assert_eq!(step(&j, "symtab")["available"], true);
        assert_eq!(step(&j, "cumodule")["available"], true);
        assert_eq!(j["layout"]["check"], "pass");
        let size = j["layout"]["state_size"].as_u64().unwrap();
        assert_eq!(j["layout"]["expected_version"].as_u64().unwrap(), 0x10000 + size);
        assert_eq!(j["layout"]["offsets"]["heap_base"], 40);
        assert_eq!(j["symbols"][0]["name"], "nvshmemi_device_state");
        assert_eq!(j["symbols"][0]["binding"], "local");
        assert!(secs < 5.0, "{release}: the doctor took {secs:.2} s");
        println!("{release}: supported, state {size} bytes, {secs:.2} s");
    }
}

#[test]
fn search_finds_nvshmem_home_and_ld_library_path() {
    let Some(root) = common::nvshmem_roots().into_iter().next() else { return };
    let (code, j, _) = doctor(&[], &[("NVSHMEM_HOME", root.to_str().unwrap())]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["library"]["found_by"], "NVSHMEM_HOME");
    let lib = root.join("lib");
    let (code, j, _) = doctor(&[], &[("NVSHMEM_HOME", "/nonexistent"), ("LD_LIBRARY_PATH", lib.to_str().unwrap())]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["library"]["found_by"], "LD_LIBRARY_PATH");
}

fn strip_available() -> bool {
    Command::new("strip").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn stripped_copy_is_degraded() {
    let Some(root) = common::nvshmem_roots().into_iter().next() else { return };
    assert!(strip_available(), "strip (binutils) is needed for this test");
    let dir = std::env::temp_dir().join(format!("uxn-doctor-strip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("libnvshmem_host.so.3");
    std::fs::copy(root.join("lib/libnvshmem_host.so.3"), &copy).unwrap();
    assert!(Command::new("strip").arg("--strip-all").arg(&copy).status().unwrap().success());
    let (code, j, _) = doctor(&[copy.to_str().unwrap()], &[]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 1, "{j:#}");
    assert_eq!(j["verdict"], "degraded");
    assert!(j["reason"].as_str().unwrap().contains("public route only"));
    assert_eq!(j["symtab_present"], false);
    assert_eq!(step(&j, "symtab")["available"], false);
    assert!(step(&j, "symtab")["reason"].as_str().unwrap().contains("no .symtab"));
    assert_eq!(step(&j, "cumodule")["available"], true);
}

fn libc_path() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        .map(PathBuf::from)
        .expect("libc in /proc/self/maps")
}

#[test]
fn not_nvshmem_is_unsupported() {
    let libc = libc_path();
    let (code, j, _) = doctor(&[libc.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{j:#}");
    assert_eq!(j["verdict"], "unsupported");
    assert!(j["reason"].as_str().unwrap().contains("not an NVSHMEM host library"), "{j:#}");

    let (code, j, _) = doctor(&[concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")], &[]);
    assert_eq!(code, 2);
    assert!(j["reason"].as_str().unwrap().contains("not an ELF shared library"), "{j:#}");

    let (code, j, _) = doctor(&["/nonexistent/libnvshmem_host.so.3"], &[]);
    assert_eq!(code, 2);
    assert!(j["reason"].as_str().unwrap().contains("cannot read"), "{j:#}");
    assert!(Path::new(&libc).exists());
}
