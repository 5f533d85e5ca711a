//! The library's environment variables (`src/env.rs`) as a C caller meets them: a bad value is
//! never ignored or read as something else. A call that reads `UPCXX_EXTRA_NVSHMEM_SOURCE` or
//! `UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW` fails with `INVALID_ARGUMENT` and a last error
//! naming the variable and its value; `nvshmem_load` refuses an `NVSHMEM_HOME` it cannot pass to
//! the loader as it is; `copy_policy` reads `UPCXX_EXTRA_NVSHMEM_COPY` and
//! `UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES` for the C++ layer and refuses what the C++ layer always
//! refused; the logger, which cannot fail, warns once on stderr and stays off. Each
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
    for k in [
        "UPCXX_EXTRA_NVSHMEM_LOG",
        "UPCXX_EXTRA_NVSHMEM_SOURCE",
        "UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW",
        "UPCXX_EXTRA_NVSHMEM_COPY",
        "UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES",
        "NVSHMEM_HOME",
    ] {
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

const COPY: &str = "UPCXX_EXTRA_NVSHMEM_COPY";
const BATCH: &str = "UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES";

#[test]
fn copy_policy_reads_the_copy_knobs() {
    assert_eq!(unsafe { upcxx_extra_nvshmem_copy_policy(std::ptr::null_mut()) }, Status::NullArgument);
    assert_eq!(CopyDefault::BatchBytes as usize, 262144);
    // (COPY, BATCH_BYTES) -> "upcxx_only batch_bytes"
    for (c, b, want) in [
        (None, None, "false 262144"),
        (Some(""), None, "false 262144"),
        (Some("fast"), Some("4096"), "false 4096"),
        (Some("unbatched"), Some("4096"), "false 0"),
        (Some("upcxx"), None, "true 262144"),
        (None, Some("0"), "false 0"),
        (None, Some("18446744073709551615"), "false 18446744073709551615"),
    ] {
        let mut env = vec![("UXN_TEST_WANT", os(want))];
        env.extend(c.map(|v| (COPY, os(v))));
        env.extend(b.map(|v| (BATCH, os(v))));
        child("copy-good", &env);
    }
    // What the C++ layer's own parser refused (F17 of the C++ semantics tests), still refused.
    for v in ["bogus", " fast", "fast ", "FAST"] {
        child("copy-bad", &[("UXN_TEST_WANT", os(COPY)), (COPY, os(v))]);
    }
    for v in ["12x", " -1", "\t-5", "+7", " 12", "-1", "12 ", "", "18446744073709551616"] {
        child("copy-bad", &[("UXN_TEST_WANT", os(BATCH)), (BATCH, os(v))]);
        child("copy-bad", &[("UXN_TEST_WANT", os(BATCH)), (COPY, os("unbatched")), (BATCH, os(v))]);
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
        "copy-good" => {
            let mut p = CopyPolicy { upcxx_only: true, batch_bytes: 7 };
            assert_eq!(unsafe { upcxx_extra_nvshmem_copy_policy(&mut p) }, Status::Ok, "{}", last());
            assert_eq!(format!("{} {}", p.upcxx_only, p.batch_bytes), var("UXN_TEST_WANT").to_string_lossy());
        }
        "copy-bad" => {
            let name = var("UXN_TEST_WANT").to_string_lossy().into_owned();
            let mut p = CopyPolicy { upcxx_only: true, batch_bytes: 7 };
            assert_eq!(unsafe { upcxx_extra_nvshmem_copy_policy(&mut p) }, Status::InvalidArgument, "{}", last());
            let want = format!("upcxx_extra_nvshmem_copy_policy: {name} is set to {:?}, which is not ", var(&name));
            assert!(last().starts_with(&want), "{}", last());
            assert_eq!(p, CopyPolicy { upcxx_only: true, batch_bytes: 7 }, "a refused copy_policy wrote its output");
        }
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
