//! The library's environment variables (`src/env.rs`) as a C caller meets them: a bad value is
//! never ignored or read as something else. A call that reads `UPCXX_EXTRA_NVSHMEM_SOURCE` or
//! `UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW` fails with `INVALID_ARGUMENT` and a last error
//! naming the variable and its value; `nvshmem_load` refuses an `NVSHMEM_HOME` it cannot pass to
//! the loader as it is; the logger, which cannot fail, warns once on stderr and stays off. Each
//! case runs in a child process of its own (this test binary again), with its environment set
//! before the library is loaded.

use std::ffi::{CStr, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::process::Command;
use upcxx_extra_nvshmem::abi::Status;
use upcxx_extra_nvshmem::abi::*;

const CASE: &str = "UXN_TEST_ENV_CASE";

fn last() -> String {
    unsafe { CStr::from_ptr(upcxx_extra_nvshmem_last_error()) }.to_string_lossy().into_owned()
}

fn heap_query() -> Status {
    let mut info = std::mem::MaybeUninit::<HeapInfo>::zeroed();
    unsafe { upcxx_extra_nvshmem_heap_query(info.as_mut_ptr()) }
}

/// Runs `case` in a child with `env` set (and no NVSHMEM on the loader's path); its stderr.
fn child(case: &str, env: &[(&str, &OsStr)]) -> String {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["env_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"]).env(CASE, case);
    for k in ["UPCXX_EXTRA_NVSHMEM_LOG", "UPCXX_EXTRA_NVSHMEM_SOURCE", "UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW", "NVSHMEM_HOME"] {
        c.env_remove(k);
    }
    c.env_remove("LD_LIBRARY_PATH").env_remove("LD_PRELOAD");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("ENV-CHILD-OK"), "{case} {env:?} failed:\n{stdout}\n{stderr}");
    stderr.into_owned()
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

#[test]
fn source_bad_values_fail_the_query_naming_them() {
    for v in ["bogus", " dlsym", "symtab ", "manual", "4", "+1", "-1"] {
        child("source-bad", &[("UPCXX_EXTRA_NVSHMEM_SOURCE", os(v))]);
    }
    for v in ["symtab", "AUTO", "2", ""] {
        child("source-good", &[("UPCXX_EXTRA_NVSHMEM_SOURCE", os(v))]);
    }
}

#[test]
fn skew_bad_values_fail_the_query_naming_them() {
    for v in ["-4096", "+4096", " 4096", "4096 ", "4k", "0x1000", "9223372036854775808"] {
        child("skew-bad", &[("UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW", os(v))]);
    }
    for v in ["4096", "0", ""] {
        child("skew-good", &[("UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW", os(v))]);
    }
}

#[test]
fn nvshmem_home_that_the_loader_cannot_be_given_is_refused() {
    let home = OsString::from_vec(b"/nonexistent/nvshmem-\xff".to_vec());
    child("home-not-utf8", &[("NVSHMEM_HOME", &home)]);
}

#[test]
fn log_bad_values_warn_once_and_log_nothing() {
    for v in ["verbose", " debug", "debug ", "1"] {
        let err = child("log", &[("UPCXX_EXTRA_NVSHMEM_LOG", os(v))]);
        let want = format!(
            "UPCXX_EXTRA_NVSHMEM_LOG is set to {v:?}, which is not one of error, warn, info, debug, trace, off: unset it or set \
             one of those; logging stays off"
        );
        assert_eq!(err.matches(&want).count(), 1, "{v:?}: {err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("[upcxx-extra-nvshmem")).count(), 1, "{v:?}: nothing else logged: {err}");
    }
    // A level: no warning, and the library's diagnostics (the failed query's) are logged.
    let err = child("log", &[("UPCXX_EXTRA_NVSHMEM_LOG", os("trace"))]);
    assert!(!err.contains("is set to"), "{err}");
}

/// Runs only as the child of the tests above.
#[test]
#[ignore = "run by the tests above in a child process"]
fn env_child() {
    let Ok(case) = std::env::var(CASE) else { return };
    let var = |k: &str| std::env::var_os(k).unwrap_or_default();
    match case.as_str() {
        "source-bad" => {
            let v = var("UPCXX_EXTRA_NVSHMEM_SOURCE");
            assert_eq!(heap_query(), Status::InvalidArgument, "{}", last());
            let want = format!("UPCXX_EXTRA_NVSHMEM_SOURCE is set to {v:?}, which is not one of auto, dlsym, symtab, cumodule");
            assert!(last().contains(&want), "{}", last());
            assert!(last().contains("or call upcxx_extra_nvshmem_select_source"), "{}", last());
            // Every query, until select_source overrides it.
            assert_eq!(heap_query(), Status::InvalidArgument);
            assert_eq!(upcxx_extra_nvshmem_select_source(0), Status::Ok);
            assert_eq!(heap_query(), Status::NotLoaded, "{}", last());
        }
        "source-good" => assert_eq!(heap_query(), Status::NotLoaded, "{}", last()),
        "skew-bad" => {
            let v = var("UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW");
            assert_eq!(heap_query(), Status::InvalidArgument, "{}", last());
            let want = format!("UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW is set to {v:?}, which is not a number of bytes");
            assert!(last().contains(&want), "{}", last());
        }
        "skew-good" => assert_eq!(heap_query(), Status::NotLoaded, "{}", last()),
        "home-not-utf8" => {
            let mut info = std::mem::MaybeUninit::<NvshmemInfo>::zeroed();
            assert_eq!(unsafe { upcxx_extra_nvshmem_nvshmem_load(info.as_mut_ptr()) }, Status::InvalidArgument, "{}", last());
            let m = last();
            assert!(m.contains("NVSHMEM_HOME is set to \"/nonexistent/nvshmem-\\xFF\", which is not valid UTF-8"), "{m}");
            assert!(m.contains("libnvshmem_host.so.3: cannot open shared object file"), "the loader's path was tried first: {m}");
            assert!(var("NVSHMEM_HOME").as_bytes().ends_with(b"\xff"));
        }
        "log" => {
            // Something for the logger to write at debug level, when it is on.
            assert_eq!(heap_query(), Status::NotLoaded);
        }
        other => panic!("unknown case {other}"),
    }
    println!("ENV-CHILD-OK {case}");
}
