//! The doctor against each pip-installed NVSHMEM release (supported), a stripped copy of one
//! (degraded: only the public route is left), a shared library that is not NVSHMEM and a file
//! that is not a library (unsupported); its exit statuses (0/1/2, 64 usage, 66 no input); the
//! search without PATH (the environment, then the install cache); and the in-job report after a
//! manual attach. Golden checks on JSON fields and message fragments, not
//! on whole text.

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

/// The doctor's exit status, stdout and stderr. `env` sets, `unset` removes variables.
fn doctor_raw(args: &[&str], env: &[(&str, &str)], unset: &[&str]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_upcxx-nvshmem-doctor"));
    c.args(args);
    for k in unset {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A fresh, empty directory for one test.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("uxn-doctor-{tag}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
    assert!(j["library"]["why"].as_str().unwrap().starts_with("NVSHMEM_HOME is set"), "{j:#}");
    // No quickstart NVSHMEM (an empty cache): the loader's path is next.
    let lib = root.join("lib");
    let empty = scratch("home-ld-cache");
    let (code, j, _) = doctor(
        &[],
        &[("NVSHMEM_HOME", "/nonexistent"), ("LD_LIBRARY_PATH", lib.to_str().unwrap()), ("UXN_CACHE", empty.to_str().unwrap())],
    );
    std::fs::remove_dir_all(&empty).ok();
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
    // Nothing says the symbol is LOCAL in a file without a symbol table.
    let dlsym = step(&j, "dlsym")["reason"].as_str().unwrap();
    assert!(dlsym.contains("is not exported") && dlsym.contains("the file has no symbol table (stripped)"), "{dlsym}");
    assert!(!dlsym.contains("LOCAL"), "{dlsym}");
    assert!(!j["reason"].as_str().unwrap().contains("stripped?"), "{j:#}");
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
    // dlopen worked: the doctor says so, and what is missing.
    let reason = j["reason"].as_str().unwrap();
    let want = format!(
        "{} loaded, but it is not an NVSHMEM host library: it exports none of nvshmemx_init_status, nvshmem_ptr, nvshmem_info_get_name",
        libc.display()
    );
    assert_eq!(reason, want, "{j:#}");
    assert!(!reason.contains("dlopen failed"), "{j:#}");

    let (code, j, _) = doctor(&[concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")], &[]);
    assert_eq!(code, 2);
    assert!(j["reason"].as_str().unwrap().contains("not an ELF shared library"), "{j:#}");
    assert!(Path::new(&libc).exists());
}

#[test]
fn unknown_option_is_a_usage_error() {
    let (code, out, err) = doctor_raw(&["--frobnicate"], &[], &[]);
    assert_eq!(code, 64, "stdout {out}\nstderr {err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("unknown option --frobnicate"), "{err}");
    assert!(err.contains("Usage: upcxx-nvshmem-doctor [--json] [PATH]..."), "{err}");
    assert!(err.contains("64  usage error") && err.contains("66  PATH does not exist"), "{err}");
    // --help documents the same statuses, on stdout, with exit 0.
    let (code, out, _) = doctor_raw(&["--help"], &[], &[]);
    assert_eq!(code, 0);
    for s in ["0   supported", "1   degraded", "2   unsupported", "64  usage error", "66  PATH"] {
        assert!(out.contains(s), "--help lacks {s:?}: {out}");
    }
    // -h too, and the search order; --version, -V.
    let (code, short, _) = doctor_raw(&["-h"], &[], &[]);
    assert_eq!(code, 0);
    assert!(
        short.contains("66  PATH") && short.contains("1. NVSHMEM_HOME") && short.contains("5. last, the other NVSHMEM releases"),
        "{short}"
    );
    for v in ["-V", "--version"] {
        let (code, out, _) = doctor_raw(&[v], &[], &[]);
        assert_eq!((code, out.trim()), (0, concat!("upcxx-nvshmem-doctor ", env!("CARGO_PKG_VERSION"))));
    }
}

#[test]
fn two_paths_are_each_checked() {
    // One report each (tests/int_doctor_paths.rs has more): a library and a missing file, exit
    // the higher status (66), the missing one named on one line of stderr.
    let libc = libc_path();
    let (code, out, err) = doctor_raw(&["--json", libc.to_str().unwrap(), "/nonexistent/other.so"], &[], &[]);
    assert_eq!(code, 66, "stdout {out}\nstderr {err}");
    let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("no JSON ({e}): {out}"));
    assert_eq!(j.as_array().map(Vec::len), Some(1), "{j:#}");
    assert_eq!(j[0]["library"]["path"], libc.display().to_string());
    assert_eq!(err.trim_end(), "upcxx-nvshmem-doctor: cannot read /nonexistent/other.so: No such file or directory (ENOENT, os error 2)");
}

#[test]
fn missing_file_is_no_input() {
    let (code, out, err) = doctor_raw(&["--json", "/nonexistent/libnvshmem_host.so.3"], &[], &[]);
    assert_eq!(code, 66, "stdout {out}\nstderr {err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("cannot read /nonexistent/libnvshmem_host.so.3: No such file or directory"), "{err}");
    assert!(!err.contains("usage:"), "{err}");
}

#[test]
fn nvshmem_root_directory_is_accepted() {
    let Some(root) = common::nvshmem_roots().into_iter().next() else { return };
    let (code, j, _) = doctor(&[root.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["verdict"], "supported");
    let lib = Path::new(j["library"]["path"].as_str().unwrap());
    assert_eq!(std::fs::canonicalize(lib).unwrap(), std::fs::canonicalize(root.join("lib/libnvshmem_host.so.3")).unwrap());
    assert_eq!(j["library"]["found_by"], format!("argument (NVSHMEM root {})", root.display()));
}

#[test]
fn empty_directory_is_no_input() {
    let dir = scratch("empty");
    let (code, out, err) = doctor_raw(&["--json", dir.to_str().unwrap()], &[], &[]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 66, "stdout {out}\nstderr {err}");
    assert!(out.is_empty(), "{out}");
    let want = format!(
        "{} is a directory without an NVSHMEM host library; looked for lib/libnvshmem_host.so.3, lib/libnvshmem_host.so, \
         lib64/libnvshmem_host.so.3, lib64/libnvshmem_host.so under it",
        dir.display()
    );
    assert!(err.contains(&want), "{err}");
}

#[test]
fn nothing_found_is_unsupported_and_says_so() {
    // No NVSHMEM_HOME, an empty LD_LIBRARY_PATH, a PATH without python3 or ldconfig and an empty
    // install cache: only the system library directories are left, which hold no NVSHMEM on a
    // normal host.
    let empty = scratch("nopath");
    let env = [("LD_LIBRARY_PATH", ""), ("PATH", empty.to_str().unwrap()), ("UXN_CACHE", empty.to_str().unwrap())];
    let (code, out, err) = doctor_raw(&[], &env, &["NVSHMEM_HOME"]);
    let (jcode, jout, _) = doctor_raw(&["--json"], &env, &["NVSHMEM_HOME"]);
    let j: Value = serde_json::from_str(&jout).unwrap_or_else(|e| panic!("no JSON ({e}): {jout}"));
    std::fs::remove_dir_all(&empty).ok();
    if !j["library"]["path"].is_null() {
        eprintln!("SKIPPED: this host has a system NVSHMEM ({}): nothing-found cannot be tested", j["library"]["path"]);
        return;
    }
    assert_eq!(code, 2, "stdout {out}\nstderr {err}");
    assert_eq!(jcode, 2, "{j:#}");
    assert!(!out.contains("found by"), "{out}");
    assert!(out.contains("library:   none found\n"), "{out}");
    assert!(out.contains("verdict:   unsupported: no NVSHMEM host library found (NVSHMEM_HOME is not set); searched: "), "{out}");
    assert!(out.contains("/usr/lib"), "{out}");
    assert_eq!(j["verdict"], "unsupported");
    assert_eq!(j["library"]["found_by"], Value::Null);
    assert!(j["reason"].as_str().unwrap().starts_with("no NVSHMEM host library found (NVSHMEM_HOME is not set); searched: "), "{j:#}");
    assert!(!j["library"]["searched"].as_array().unwrap().is_empty(), "{j:#}");
    let cache_entry = format!("{} (install cache: nvshmem/<release>, nvshmem-cu13/<release>)", empty.display());
    assert_eq!(j["library"]["searched"].as_array().unwrap().last().unwrap(), cache_entry.as_str(), "{j:#}");
}

/// `cache/<sub>/<release>/nvidia/nvshmem/lib` as a link to a real NVSHMEM's `lib`.
fn cache_entry(cache: &Path, sub: &str, release: &str, real_lib: &Path) -> PathBuf {
    let root = cache.join(sub).join(release).join("nvidia/nvshmem");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(real_lib, root.join("lib")).unwrap();
    root.join("lib/libnvshmem_host.so.3")
}

#[test]
fn search_finds_the_install_cache_last() {
    // What the quickstart leaves: NVSHMEM in the install cache, nothing in the environment. The
    // doctor without PATH finds it there ($UXN_CACHE, else ~/.cache/upcxx-extra-nvshmem), the
    // newest release first, and only after everything a job would load.
    let Some(real) = common::nvshmem_roots().into_iter().next() else { return };
    let real_lib = real.join("lib");
    let cache = scratch("cache");
    let no_tools = scratch("cache-path");
    cache_entry(&cache, "nvshmem", "3.1.7", &real_lib);
    cache_entry(&cache, "nvshmem", "3.8.0", &real_lib);
    let newest = cache_entry(&cache, "nvshmem", "3.10.0", &real_lib); // 3.10 > 3.8: numbers, not text
    let newest_cu13 = cache_entry(&cache, "nvshmem-cu13", "3.10.0", &real_lib);
    cache_entry(&cache, "nvshmem", "9.9.9.partial", &real_lib); // an install in progress: skipped
    let env = |extra: &[(&'static str, String)]| {
        let mut v = vec![("LD_LIBRARY_PATH", String::new()), ("PATH", no_tools.display().to_string())];
        v.extend_from_slice(extra);
        v
    };
    let run = |env: &[(&'static str, String)], unset: &[&str]| {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (code, out, err) = doctor_raw(&["--json"], &env, unset);
        let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("no JSON ({e}): {out}\n{err}"));
        (code, j)
    };
    let c = cache.display().to_string();

    let (code, j) = run(&env(&[("UXN_CACHE", c.clone())]), &["NVSHMEM_HOME", "UXN_NVSHMEM_CUDA"]);
    if j["library"]["found_by"] == "system library directory" {
        eprintln!("SKIPPED: this host has a system NVSHMEM ({}), which a job loads first", j["library"]["path"]);
        std::fs::remove_dir_all(&cache).ok();
        return;
    }
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["verdict"], "supported");
    assert_eq!(j["library"]["path"], newest.display().to_string(), "{j:#}");
    assert_eq!(
        j["library"]["found_by"],
        "install cache of scripts/install-deps.sh; a job loads it only through NVSHMEM_HOME or LD_LIBRARY_PATH"
    );
    let searched: Vec<&str> = j["library"]["searched"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(searched.last().copied(), Some(format!("{c} (install cache: nvshmem/<release>, nvshmem-cu13/<release>)").as_str()));
    assert!(searched.iter().position(|s| *s == "/usr/lib").unwrap() < searched.len() - 1, "{searched:?}");

    // The same release in both wheels: the CUDA major version asked for wins.
    let (code, j) = run(&env(&[("UXN_CACHE", c.clone()), ("UXN_NVSHMEM_CUDA", "13".into())]), &["NVSHMEM_HOME"]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["library"]["path"], newest_cu13.display().to_string(), "{j:#}");

    // Without UXN_CACHE: ~/.cache/upcxx-extra-nvshmem.
    let home = scratch("cache-home");
    let in_home = cache_entry(&home.join(".cache/upcxx-extra-nvshmem"), "nvshmem", "3.4.5", &real_lib);
    let (code, j) = run(&env(&[("HOME", home.display().to_string())]), &["NVSHMEM_HOME", "UXN_CACHE"]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["library"]["path"], in_home.display().to_string(), "{j:#}");

    // What a job would load comes first: NVSHMEM_HOME, then LD_LIBRARY_PATH.
    let (_, j) = run(&env(&[("UXN_CACHE", c.clone()), ("NVSHMEM_HOME", real.display().to_string())]), &[]);
    assert_eq!(j["library"]["found_by"], "NVSHMEM_HOME", "{j:#}");
    let (_, j) = run(
        &[("UXN_CACHE", c.clone()), ("LD_LIBRARY_PATH", real_lib.display().to_string()), ("PATH", no_tools.display().to_string())],
        &["NVSHMEM_HOME"],
    );
    assert_eq!(j["library"]["found_by"], "LD_LIBRARY_PATH", "{j:#}");

    for d in [&cache, &no_tools, &home] {
        std::fs::remove_dir_all(d).ok();
    }
}

/// The in-job report after a manual attach, in this process (NVSHMEM is never loaded here). All
/// the assertions that touch the process-wide table are in this one test.
#[test]
fn in_job_report_after_attach_reports_the_manual_heap() {
    use std::ffi::{CStr, c_void};
    use upcxx_extra_nvshmem::abi::Status;
    use upcxx_extra_nvshmem::abi::*;

    assert!(upcxx_extra_nvshmem::internals::host_library::loaded().is_none(), "this test needs a process without NVSHMEM");
    let text = || {
        let mut need = 0usize;
        assert_eq!(unsafe { upcxx_extra_nvshmem_report_buffer(std::ptr::null_mut(), 0, &mut need) }, Status::BufferTooSmall);
        let mut buf = vec![0 as std::ffi::c_char; need];
        assert_eq!(unsafe { upcxx_extra_nvshmem_report_buffer(buf.as_mut_ptr(), need, &mut need) }, Status::Ok);
        unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
    };

    // Before attach: nothing loaded, nothing attached.
    let before = text();
    assert!(before.contains("library:   none loaded in this process\n"), "{before}");
    assert!(before.contains("verdict:   unsupported: no NVSHMEM host library is loaded in this process"), "{before}");

    let heap = vec![0u8; 8192];
    let base = heap.as_ptr() as *mut c_void;
    let info = common::heap_info(base, heap.len(), 1, 3);
    assert_eq!(unsafe { upcxx_extra_nvshmem_attach(&info) }, Status::Ok);
    // Translation works on the attached heap ...
    let mut off = 0usize;
    assert_eq!(unsafe { upcxx_extra_nvshmem_offset(heap[100..].as_ptr() as *const c_void, &mut off) }, Status::Ok);
    assert_eq!(off, 100);
    // ... and the report says so.
    let after = text();
    let b = format!("0x{:x}", base as usize);
    assert!(after.contains(&format!("runtime:   base {b} reserved 8192 mapped 8192 PE 1/3 device -1 source MANUAL")), "{after}");
    assert!(
        after.contains(&format!(
            "verdict:   supported: the heap was attached by hand (upcxx_extra_nvshmem_attach, source MANUAL): base {b}, size 8192, \
         PE 1 of 3; translation uses it; no NVSHMEM host library is loaded in this process, so discovery is not used"
        )),
        "{after}"
    );
    assert!(!after.contains("unsupported"), "{after}");
    let r = upcxx_extra_nvshmem::internals::report::in_process();
    let j: Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(j["verdict"], "supported");
    assert_eq!(j["runtime"]["source"], "MANUAL");
    assert_eq!(j["runtime"]["base"], b.as_str());
    assert_eq!(j["runtime"]["my_pe"], 1);
    assert_eq!(j["runtime"]["n_pes"], 3);
    assert_eq!(j["runtime"]["reserved_size"], 8192);
    let rt = r.runtime.as_ref().unwrap();
    assert_eq!((rt.source.as_deref(), rt.my_pe, rt.n_pes), (Some("MANUAL"), Some(1), Some(3)));

    // Detached: back to unsupported.
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    let detached = text();
    assert!(detached.contains("verdict:   unsupported: no NVSHMEM host library is loaded in this process"), "{detached}");
    assert!(!detached.contains("MANUAL"), "{detached}");
    drop(heap);
}

#[test]
fn search_finds_a_pip_installed_wheel() {
    // A real wheel on python3's path (the cached NVSHMEM wheel: a directory holding
    // nvidia/nvshmem and the wheel's dist-info), nothing in the environment, an empty install
    // cache: the pip step of the search finds it. (Before the fix the Python snippet lost its
    // indentation to Rust's `\` line continuation: an IndentationError, swallowed.)
    let Some(root) = common::nvshmem_roots().into_iter().next() else { return };
    if !Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: no python3 on PATH");
        return;
    }
    let wheel = root.parent().and_then(Path::parent).unwrap(); // .../<release>: holds nvidia/nvshmem
    let cache = scratch("pip-cache");
    let env = [("LD_LIBRARY_PATH", ""), ("UXN_CACHE", cache.to_str().unwrap()), ("PYTHONPATH", wheel.to_str().unwrap())];
    let (code, out, err) = doctor_raw(&["--json"], &env, &["NVSHMEM_HOME", "PYTHONHOME"]);
    std::fs::remove_dir_all(&cache).ok();
    let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("no JSON ({e}): {out}\n{err}"));
    let found_by = j["library"]["found_by"].as_str().unwrap_or_default();
    assert!(found_by.starts_with("pip package nvidia-nvshmem-cu1"), "{j:#}");
    let path = Path::new(j["library"]["path"].as_str().unwrap());
    assert_eq!(std::fs::canonicalize(path).unwrap(), std::fs::canonicalize(root.join("lib/libnvshmem_host.so.3")).unwrap(), "{j:#}");
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["verdict"], "supported");
    let searched: Vec<&str> = j["library"]["searched"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(searched.last().copied(), Some("pip: nvidia-nvshmem-cu12, nvidia-nvshmem-cu13 (python3 on PATH)"), "{searched:?}");
}

#[test]
fn quickstart_release_is_the_scripts() {
    // The doctor's quickstart release is the one scripts/quickstart.sh installs.
    let common = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/common.sh")).unwrap();
    let release = common.lines().find_map(|l| l.strip_prefix("UXN_NVSHMEM_DEFAULT=")).expect("UXN_NVSHMEM_DEFAULT in common.sh");
    let (_, out, _) = doctor_raw(&["--help"], &[], &[]);
    assert!(out.contains(&format!("2. the NVSHMEM {release} wheel in the install cache")), "{out}");
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin/upcxx-nvshmem-doctor.rs")).unwrap();
    assert!(src.contains(&format!("const QUICKSTART_NVSHMEM: &str = \"{release}\";")), "the doctor's QUICKSTART_NVSHMEM is not {release}");
}

#[test]
fn search_prefers_what_the_readme_build_loads() {
    // A cache like the tests leave it (3.1.7, 3.4.5, 3.8.0, and 3.10.0): without PATH the doctor
    // checks the quickstart's 3.4.5, not the newest; NVSHMEM_HOME comes before it, the loader's
    // path and the rest of the cache after it; each choice says why.
    let Some(real) = common::nvshmem_roots().into_iter().next() else { return };
    let real_lib = real.join("lib");
    let cache = scratch("quickstart-cache");
    let no_tools = scratch("quickstart-path");
    for r in ["3.1.7", "3.8.0", "3.10.0"] {
        cache_entry(&cache, "nvshmem", r, &real_lib);
    }
    let quickstart = cache_entry(&cache, "nvshmem", "3.4.5", &real_lib);
    let quickstart13 = cache_entry(&cache, "nvshmem-cu13", "3.4.5", &real_lib);
    let c = cache.display().to_string();
    let path = no_tools.display().to_string();
    let run = |env: &[(&str, &str)], unset: &[&str]| {
        let (code, out, err) = doctor_raw(&["--json"], env, unset);
        let j: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("no JSON ({e}): {out}\n{err}"));
        (code, j)
    };
    let base = [("UXN_CACHE", c.as_str()), ("PATH", path.as_str()), ("LD_LIBRARY_PATH", real_lib.to_str().unwrap())];

    // The quickstart's release, before LD_LIBRARY_PATH and the newer releases of the cache.
    let (code, j) = run(&base, &["NVSHMEM_HOME", "UXN_NVSHMEM_CUDA"]);
    assert_eq!(code, 0, "{j:#}");
    assert_eq!(j["library"]["found_by"], "quickstart", "{j:#}");
    assert_eq!(j["library"]["path"], quickstart.display().to_string(), "{j:#}");
    let why = j["library"]["why"].as_str().unwrap();
    assert!(why.contains("NVSHMEM 3.4.5 (nvidia-nvshmem-cu12) that scripts/quickstart.sh installed"), "{why}");
    let searched: Vec<&str> = j["library"]["searched"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(searched[0], "NVSHMEM_HOME: not set", "{searched:?}");
    assert!(searched[1].ends_with("(the quickstart's NVSHMEM 3.4.5, nvidia-nvshmem-cu12)"), "{searched:?}");
    // The text report says which and why, on lines of their own.
    let (_, text, _) = doctor_raw(&[], &base, &["NVSHMEM_HOME", "UXN_NVSHMEM_CUDA"]);
    assert!(text.contains(&format!("library:   {} (found by quickstart)\n", quickstart.display())), "{text}");
    assert!(text.contains("\nchosen:    the NVSHMEM 3.4.5"), "{text}");

    // The cu13 wheel with UXN_NVSHMEM_CUDA=13.
    let mut env13 = base.to_vec();
    env13.push(("UXN_NVSHMEM_CUDA", "13"));
    let (_, j) = run(&env13, &["NVSHMEM_HOME"]);
    assert_eq!(j["library"]["path"], quickstart13.display().to_string(), "{j:#}");

    // NVSHMEM_HOME first.
    let mut home = base.to_vec();
    home.push(("NVSHMEM_HOME", real.to_str().unwrap()));
    let (_, j) = run(&home, &[]);
    assert_eq!(j["library"]["found_by"], "NVSHMEM_HOME", "{j:#}");

    // Without the quickstart's release: the loader's path, then (with none) the tests' newest.
    std::fs::remove_dir_all(cache.join("nvshmem/3.4.5")).unwrap();
    std::fs::remove_dir_all(cache.join("nvshmem-cu13")).unwrap();
    let (_, j) = run(&base, &["NVSHMEM_HOME", "UXN_NVSHMEM_CUDA"]);
    assert_eq!(j["library"]["found_by"], "LD_LIBRARY_PATH", "{j:#}");
    let (code, j) =
        run(&[("UXN_CACHE", c.as_str()), ("PATH", path.as_str()), ("LD_LIBRARY_PATH", "")], &["NVSHMEM_HOME", "UXN_NVSHMEM_CUDA"]);
    if j["library"]["found_by"] == "system library directory" {
        eprintln!("SKIPPED: this host has a system NVSHMEM");
    } else {
        assert_eq!(code, 0, "{j:#}");
        assert!(j["library"]["path"].as_str().unwrap().contains("/nvshmem/3.10.0/"), "{j:#}");
        assert!(j["library"]["why"].as_str().unwrap().contains("the newest release the tests installed"), "{j:#}");
    }
    for d in [&cache, &no_tools] {
        std::fs::remove_dir_all(d).ok();
    }
}

#[test]
fn a_path_with_a_newline_cannot_forge_a_line() {
    // A directory named to forge a verdict, holding a file that is not a library: the text
    // report has one verdict line, "unsupported", with the newline escaped.
    let dir = scratch("forge");
    let evil = dir.join("x\nverdict:   supported: the heap is found through .symtab");
    std::fs::create_dir_all(&evil).unwrap();
    let file = evil.join("libnvshmem_host.so.3");
    std::fs::write(&file, b"not a library").unwrap();
    let (code, out, err) = doctor_raw(&[file.to_str().unwrap()], &[], &[]);
    assert_eq!(code, 2, "{out}{err}");
    let verdicts: Vec<&str> = out.lines().filter(|l| l.starts_with("verdict:")).collect();
    assert_eq!(verdicts.len(), 1, "{out}");
    assert!(verdicts[0].starts_with("verdict:   unsupported: "), "{out}");
    assert!(out.contains("x\\nverdict:   supported"), "the newline is shown escaped: {out}");
    // JSON keeps the path as it is (JSON escapes it itself).
    let (_, out, _) = doctor_raw(&["--json", file.to_str().unwrap()], &[], &[]);
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["library"]["path"], file.display().to_string());
    // The same through a message on stderr (exit 66): one line.
    let missing = evil.join("missing.so");
    let (code, _, err) = doctor_raw(&[missing.to_str().unwrap()], &[], &[]);
    assert_eq!(code, 66);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn io_errors_are_named_with_exit_66() {
    // Another I/O error than "no such file": ENOTDIR, named.
    let (code, out, err) = doctor_raw(&["/etc/passwd/libnvshmem_host.so.3"], &[], &[]);
    assert_eq!(code, 66, "{out}{err}");
    assert!(err.contains("cannot read /etc/passwd/libnvshmem_host.so.3: Not a directory (ENOTDIR, os error 20)"), "{err}");
    // EACCES: a root directory and a file this user cannot read are named as such, not as "a
    // directory without an NVSHMEM host library". Root reads everything: run as nobody then.
    let dir = scratch("eacces");
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("lib")).unwrap();
    std::fs::write(root.join("lib/libnvshmem_host.so.3"), b"x").unwrap();
    let bin = env!("CARGO_BIN_EXE_upcxx-nvshmem-doctor");
    let as_user = |args: &[&str]| {
        let mut c = if unsafe { libc::geteuid() } == 0 {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin]);
            c
        } else {
            Command::new(bin)
        };
        c.args(args).output()
    };
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(root.join("lib/libnvshmem_host.so.3"), std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    let file = root.join("lib/libnvshmem_host.so.3");
    match as_user(&[file.to_str().unwrap()]) {
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("setpriv") => eprintln!("SKIPPED: setpriv cannot drop privileges here"),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(66), "{err}");
            assert!(err.contains("Permission denied (EACCES, os error 13)"), "{err}");
            std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
            let o = as_user(&[root.to_str().unwrap()]).unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(66), "{err}");
            assert!(err.contains("Permission denied (EACCES, os error 13)"), "{err}");
            assert!(!err.contains("without an NVSHMEM host library"), "{err}");
        }
        Err(e) => eprintln!("SKIPPED: setpriv not available ({e})"),
    }
    std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755)).ok();
    std::fs::remove_dir_all(&dir).ok();
}
