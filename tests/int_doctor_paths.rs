//! The doctor on the names and places it is given or finds (issue 42, item 5): a root whose name
//! starts with `-`, `NVSHMEM_HOME` pointing where there is no library, `LD_LIBRARY_PATH` read as
//! the dynamic loader reads it (`:` and `;`, an empty element is the current directory), a
//! name that is not UTF-8 kept byte for byte in JSON, what is not a file where the library
//! should be (named, never opened), several PATHs, and the doctor's own variables parsed
//! strictly. Each against small libraries built here with `cc` (no NVSHMEM release needed).

mod common;
mod doctor_util;

use doctor_util::*;
use serde_json::Value;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT_S: f64 = 10.0;
const KILL_AFTER: Duration = Duration::from_secs(60);

/// A well-formed fake NVSHMEM (supported) at `dir/libnvshmem_host.so.3`.
fn good_library(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    build_so(dir, "libnvshmem_host.so.3", &good_source())
}

/// The doctor in `cwd` with `args`; `env` set, `unset` removed.
fn run_in(cwd: &Path, args: &[&OsStr], env: &[(&str, &OsStr)], unset: &[&str]) -> Outcome {
    let mut c = doctor_command();
    c.current_dir(cwd).args(args);
    for k in unset {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    run_doctor(c, KILL_AFTER)
}

fn json(o: &Outcome) -> Value {
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("no JSON ({e}): {}", o.text()))
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

#[test]
fn a_root_whose_name_starts_with_a_dash() {
    // `-- -root`: the doctor itself takes it as a PATH, and so must the child that loads it.
    let dir = scratch("dash-root");
    good_library(&dir.join("-root/lib"));
    for args in [vec!["--json", "--", "-root"], vec!["--json", "--", "-root/lib/libnvshmem_host.so.3"]] {
        let args: Vec<&OsStr> = args.into_iter().map(os).collect();
        let o = run_in(&dir, &args, &[], &[]);
        o.expect(0, LIMIT_S, "-root");
        let j = json(&o);
        assert_eq!(j["verdict"], "supported", "{j:#}");
        assert_eq!(j["library"]["path"], "-root/lib/libnvshmem_host.so.3", "{j:#}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The search's environment with nothing in it: no NVSHMEM_HOME, an empty install cache, a PATH
/// without python3 or ldconfig, `LD_LIBRARY_PATH` as given.
fn search_env<'a>(empty: &'a Path, ld: &'a OsStr) -> Vec<(&'static str, &'a OsStr)> {
    vec![("UXN_CACHE", empty.as_os_str()), ("PATH", empty.as_os_str()), ("LD_LIBRARY_PATH", ld)]
}

/// Skips (true) when this host has a system NVSHMEM, found before what the test puts in place.
fn system_nvshmem(j: &Value) -> bool {
    let system = j["library"]["found_by"] == "system library directory";
    if system {
        eprintln!("SKIPPED: this host has a system NVSHMEM ({})", j["library"]["path"]);
    }
    system
}

#[test]
fn nvshmem_home_without_a_library_is_named_in_what_was_chosen() {
    let dir = scratch("home-empty");
    let (home, empty, lib) = (dir.join("home"), dir.join("empty"), dir.join("lib"));
    std::fs::create_dir_all(home.join("lib")).unwrap();
    std::fs::create_dir_all(&empty).unwrap();
    good_library(&lib);
    let mut env = search_env(&empty, lib.as_os_str());
    env.push(("NVSHMEM_HOME", home.as_os_str()));
    let o = run_in(&dir, &[os("--json")], &env, &[]);
    let j = json(&o);
    o.expect(0, LIMIT_S, "NVSHMEM_HOME without a library");
    assert_eq!(j["library"]["found_by"], "LD_LIBRARY_PATH", "{j:#}");
    let why = j["library"]["why"].as_str().unwrap();
    let told = format!("NVSHMEM_HOME is set to {}, which has no NVSHMEM host library in lib or lib64", home.display());
    assert!(why.starts_with(&told), "{why}");
    assert!(!why.contains("not set"), "{why}");
    let searched: Vec<&str> = j["library"]["searched"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(searched[0], format!("{} (NVSHMEM_HOME)", home.join("lib").display()), "{searched:?}");
    // The text report's `chosen:` line says the same.
    let o = run_in(&dir, &[], &env, &[]);
    assert!(o.stdout.contains(&format!("chosen:    {told}")), "{}", o.text());

    // Nothing anywhere: the reason says where NVSHMEM_HOME points.
    let env = {
        let mut e = search_env(&empty, os(""));
        e.push(("NVSHMEM_HOME", home.as_os_str()));
        e
    };
    let o = run_in(&dir, &[os("--json")], &env, &[]);
    let j = json(&o);
    if !system_nvshmem(&j) {
        o.expect(2, LIMIT_S, "nothing found");
        let reason = j["reason"].as_str().unwrap();
        assert!(reason.starts_with(&format!("no NVSHMEM host library found ({told}); searched: ")), "{reason}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ld_library_path_is_read_as_the_dynamic_loader_reads_it() {
    // An empty element (leading, trailing or doubled `:` or `;`) is the current directory; `;`
    // separates as `:` does (ld.so(8)); an element with $ORIGIN is not searched, and said so.
    let dir = scratch("ld-path");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    good_library(&dir);
    let other = dir.join("other");
    good_library(&other);
    let here = dir.join("libnvshmem_host.so.3");
    for ld in [":", "/nonexistent:", ":/nonexistent", "/nonexistent::/x", "/nonexistent;", ";"] {
        let o = run_in(&dir, &[os("--json")], &search_env(&empty, os(ld)), &["NVSHMEM_HOME"]);
        let j = json(&o);
        o.expect(0, LIMIT_S, ld);
        assert_eq!(j["library"]["found_by"], "LD_LIBRARY_PATH", "{ld:?}: {j:#}");
        assert_eq!(j["library"]["path"], here.display().to_string(), "{ld:?}: {j:#}");
        let searched = j["library"]["searched"].to_string();
        assert!(searched.contains("LD_LIBRARY_PATH: an empty element, the current directory"), "{ld:?}: {searched}");
    }
    // `;` between two directories; $ORIGIN named and skipped.
    let ld = format!("$ORIGIN/lib;/nonexistent;{}", other.display());
    let o = run_in(&empty, &[os("--json")], &search_env(&empty, os(&ld)), &["NVSHMEM_HOME"]);
    let j = json(&o);
    o.expect(0, LIMIT_S, &ld);
    assert_eq!(j["library"]["path"], other.join("libnvshmem_host.so.3").display().to_string(), "{j:#}");
    let searched: Vec<&str> = j["library"]["searched"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(searched.iter().any(|s| s.starts_with("$ORIGIN/lib (LD_LIBRARY_PATH: the loader expands")), "{searched:?}");
    // An empty LD_LIBRARY_PATH names nothing, the current directory included.
    let o = run_in(&dir, &[os("--json")], &search_env(&empty, os("")), &["NVSHMEM_HOME"]);
    let j = json(&o);
    if !system_nvshmem(&j) {
        o.expect(2, LIMIT_S, "LD_LIBRARY_PATH=\"\"");
        assert!(j["library"]["path"].is_null(), "{j:#}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_dynamic_loader_agrees_on_an_empty_element() {
    // What the test above assumes of ld.so: a program run with LD_LIBRARY_PATH=":" and the
    // library in its current directory loads it (a program linked against the library by its
    // soname, built here).
    let dir = scratch("ld-agrees");
    let so = good_library(&dir);
    let prog = dir.join("prog");
    let c = dir.join("prog.c");
    std::fs::write(&c, "int nvshmemx_init_status(void);\nint main(void) { return nvshmemx_init_status() == 0 ? 0 : 1; }\n").unwrap();
    let built = Command::new("cc").arg("-o").arg(&prog).arg(&c).arg(&so).output().expect("cc is needed for this test");
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let run = |ld: &str| Command::new(&prog).current_dir(&dir).env("LD_LIBRARY_PATH", ld).output().unwrap().status.success();
    assert!(run(":") && run(";") && run("/nonexistent:"), "ld.so loads from the current directory for an empty element");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_name_that_is_not_utf8_is_kept_byte_for_byte() {
    let dir = scratch("not-utf8");
    let mut raw = dir.as_os_str().as_bytes().to_vec();
    raw.extend_from_slice(b"/lib\xff\xfe");
    let lib_dir = PathBuf::from(OsString::from_vec(raw));
    let so = good_library(&lib_dir);
    let o = run_in(&dir, &[os("--json"), so.as_os_str()], &[], &[]);
    o.expect(0, LIMIT_S, "a name that is not UTF-8");
    let j = json(&o);
    let bytes: Vec<u8> = j["library"]["path_bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
    assert_eq!(bytes, so.as_os_str().as_bytes(), "{j:#}");
    assert_eq!(j["library"]["path"], so.to_string_lossy().as_ref(), "{j:#}");
    // The text report writes each byte that is not UTF-8 as \xNN.
    let o = run_in(&dir, &[so.as_os_str()], &[], &[]);
    o.expect(0, LIMIT_S, "text");
    assert!(o.stdout.contains("/lib\\xff\\xfe/libnvshmem_host.so.3 (found by argument)"), "{}", o.stdout);
    // Found by the search: LD_LIBRARY_PATH holding that directory is read (not dropped for not
    // being UTF-8), and the name is kept.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = run_in(&dir, &[os("--json")], &search_env(&empty, lib_dir.as_os_str()), &["NVSHMEM_HOME"]);
    o.expect(0, LIMIT_S, "LD_LIBRARY_PATH that is not UTF-8");
    let j = json(&o);
    assert_eq!(j["library"]["found_by"], "LD_LIBRARY_PATH", "{j:#}");
    let bytes: Vec<u8> = j["library"]["path_bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
    assert_eq!(bytes, so.as_os_str().as_bytes(), "{j:#}");
    std::fs::remove_dir_all(&dir).ok();
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

#[test]
fn what_is_not_a_file_where_the_library_goes_is_named() {
    // Under a root, the first of lib/libnvshmem_host.so.3, ... that exists decides: a FIFO, a
    // socket, a directory or a dangling symbolic link there is named (exit 66), never opened.
    let dir = scratch("not-a-file");
    let at = |name: &str| {
        let root = dir.join(name);
        std::fs::create_dir_all(root.join("lib")).unwrap();
        (root.clone(), root.join("lib/libnvshmem_host.so.3"))
    };
    let (fifo_root, f) = at("fifo");
    mkfifo(&f);
    let (sock_root, s) = at("socket");
    let _listener = std::os::unix::net::UnixListener::bind(&s).unwrap();
    let (dir_root, d) = at("dir");
    std::fs::create_dir(&d).unwrap();
    let (link_root, l) = at("dangling");
    std::os::unix::fs::symlink(dir.join("gone.so"), &l).unwrap();
    let cases = [
        (&fifo_root, format!("{} is a FIFO (named pipe), not a shared library", f.display())),
        (&sock_root, format!("{} is a socket, not a shared library", s.display())),
        (&dir_root, format!("{} is a directory, not a shared library", d.display())),
        (&link_root, format!("{} is a dangling symbolic link (to {}), not a shared library", l.display(), dir.join("gone.so").display())),
    ];
    for (root, want) in &cases {
        let o = doctor(&[root.to_str().unwrap()], &[], KILL_AFTER);
        o.expect(66, 2.0, want);
        assert!(o.stdout.is_empty(), "{}", o.stdout);
        assert!(o.stderr.contains(want.as_str()), "{}", o.stderr);
        assert!(!o.stderr.contains("without an NVSHMEM host library"), "{}", o.stderr);
    }
    // A dangling symbolic link given as PATH.
    let o = doctor(&[l.to_str().unwrap()], &[], KILL_AFTER);
    o.expect(66, 2.0, "a dangling link");
    assert!(o.stderr.contains("is a dangling symbolic link (to "), "{}", o.stderr);
    // In the search: named in what was searched.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let ld = fifo_root.join("lib");
    let o = run_in(&dir, &[os("--json")], &search_env(&empty, ld.as_os_str()), &["NVSHMEM_HOME"]);
    let j = json(&o);
    let searched = j["library"]["searched"].to_string();
    assert!(
        searched.contains(&format!("{}: libnvshmem_host.so.3 is a FIFO (named pipe), not a shared library", ld.display())),
        "{searched}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn several_paths_get_one_report_each() {
    let dir = scratch("several");
    let a = good_library(&dir.join("a"));
    let b = good_library(&dir.join("b"));
    let not_lib = dir.join("not.so");
    std::fs::write(&not_lib, b"not a library").unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    // Two good ones: exit 0, two reports; --json: an array of two.
    let o = doctor(&[&s(&a), &s(&b)], &[], KILL_AFTER);
    o.expect(0, LIMIT_S, "two libraries");
    assert_eq!(o.stdout.lines().filter(|l| l.starts_with("verdict:   supported")).count(), 2, "{}", o.stdout);
    let o = doctor(&["--json", &s(&a), &s(&b)], &[], KILL_AFTER);
    let j = json(&o);
    let paths: Vec<&str> = j.as_array().unwrap().iter().map(|r| r["library"]["path"].as_str().unwrap()).collect();
    assert_eq!(paths, [s(&a), s(&b)]);
    // The exit status is the highest: 2 with a file that is not a library; 66 with one missing,
    // which gets one line on stderr and no report.
    let o = doctor(&[&s(&a), &s(&not_lib)], &[], KILL_AFTER);
    o.expect(2, LIMIT_S, "a library and a file that is not one");
    let o = doctor(&["--json", &s(&a), "/nonexistent/x.so", &s(&not_lib)], &[], KILL_AFTER);
    o.expect(66, LIMIT_S, "with a missing one");
    assert_eq!(json(&o).as_array().unwrap().len(), 2);
    assert_eq!(o.stderr.trim_end().lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains("cannot read /nonexistent/x.so: No such file or directory"), "{}", o.stderr);
    // One PATH: one JSON object, as before.
    let o = doctor(&["--json", &s(&a)], &[], KILL_AFTER);
    assert!(json(&o).is_object());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_doctors_variables_are_parsed_strictly() {
    let dir = scratch("doctor-env");
    let lib = good_library(&dir);
    let p = lib.to_str().unwrap();
    for (var, value) in [
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", "20s"),
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", " 20"),
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", "20 "),
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", "+20"),
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", "-1"),
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", "0"),
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", "3601"),
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", "2.5"),
        ("UXN_NVSHMEM_CUDA", "14"),
        ("UXN_NVSHMEM_CUDA", " 13"),
        ("UXN_NVSHMEM_CUDA", "cu13"),
        ("UXN_NVSHMEM_CUDA", "13\nverdict:   supported"),
    ] {
        for args in [vec![p], vec!["--json", p], vec![]] {
            let o = doctor(&args, &[(var, value)], KILL_AFTER);
            let what = format!("{var}={value:?} {args:?}");
            o.expect(64, LIMIT_S, &what);
            assert!(o.stdout.is_empty(), "{what}: {}", o.stdout);
            assert_eq!(o.stderr.lines().count(), 1, "{what}: {}", o.stderr);
            assert!(
                o.stderr.starts_with(&format!("upcxx-nvshmem-doctor: {var} is set to {value:?}, which is not ")),
                "{what}: {}",
                o.stderr
            );
        }
    }
    // Good values, and empty (= unset).
    for (var, value) in [
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", "1"),
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", "3600"),
        ("UXN_DOCTOR_LOAD_TIMEOUT_S", ""),
        ("UXN_NVSHMEM_CUDA", "13"),
        ("UXN_NVSHMEM_CUDA", ""),
    ] {
        doctor(&[p], &[(var, value)], KILL_AFTER).expect(0, LIMIT_S, &format!("{var}={value:?}"));
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn help_speaks_of_the_installed_tool() {
    let o = doctor(&["--help"], &[], KILL_AFTER);
    o.expect(0, LIMIT_S, "--help");
    for gone in ["scripts/", "README", "quickstart.sh", "the tests' cache", "install-deps"] {
        assert!(!o.stdout.contains(gone), "--help names {gone:?}: {}", o.stdout);
    }
    for s in ["Usage: upcxx-nvshmem-doctor [--json] [PATH]...", "path_bytes", "UXN_DOCTOR_LOAD_TIMEOUT_S", "the highest of theirs"] {
        assert!(o.stdout.contains(s), "--help lacks {s:?}: {}", o.stdout);
    }
    // The child's option is not shown, and takes one PATH.
    assert!(!o.stdout.contains("load-in-child"), "{}", o.stdout);
    let o = doctor(&["--load-in-child", "--", "/a", "/b"], &[], KILL_AFTER);
    assert_eq!(o.code, Some(64), "{}", o.text());
}
