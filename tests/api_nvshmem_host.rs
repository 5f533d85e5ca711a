//! The C calls that bind NVSHMEM's host library for the C++ layer's `nvshmem_init()`
//! (`upcxx_extra_nvshmem_nvshmem_*`) and the PE/rank agreement (`upcxx_extra_nvshmem_check_pe_map`):
//! their statuses and messages. Against the real host libraries of the pip wheels on a machine
//! without a GPU, each release in a child process of its own (a library once loaded stays
//! loaded): found through `NVSHMEM_HOME`, or already in the process; NVSHMEM's initialisation
//! itself cannot succeed without a GPU, so its failures are what is checked.

mod common;

use std::ffi::{CStr, CString, c_int};
use std::process::Command;
use upcxx_extra_nvshmem::abi::Status;
use upcxx_extra_nvshmem::abi::*;

const CHILD_LIB: &str = "UXN_TEST_HOST_CHILD_LIB";
const CHILD_HOW: &str = "UXN_TEST_HOST_CHILD_HOW";

fn last() -> String {
    unsafe { CStr::from_ptr(upcxx_extra_nvshmem_last_error()) }.to_string_lossy().into_owned()
}

fn info() -> (Status, NvshmemInfo) {
    let mut i =
        NvshmemInfo { library: std::ptr::null(), version_major: 0, version_minor: 0, version_patch: 0, init_status: 9, my_pe: 9, n_pes: 9 };
    let s = unsafe { upcxx_extra_nvshmem_nvshmem_load(&mut i) };
    (s, i)
}

fn check_map(pe_of_rank: &[c_int], n_pes_of_rank: Option<&[c_int]>) -> (Status, c_int, String) {
    let mut failed = 99;
    let counts = n_pes_of_rank.map_or(std::ptr::null(), |c| c.as_ptr());
    let s = unsafe { upcxx_extra_nvshmem_check_pe_map(pe_of_rank.len() as c_int, pe_of_rank.as_ptr(), counts, &mut failed) };
    (s, failed, if s == Status::Ok { String::new() } else { last() })
}

#[test]
fn the_pe_map_check() {
    assert_eq!(check_map(&[0], None), (Status::Ok, -1, String::new()));
    assert_eq!(check_map(&[1, 2, 0], Some(&[3, 3, 3])), (Status::Ok, -1, String::new()));
    let (s, r, m) = check_map(&[0, 1, 1, 0], None);
    assert_eq!((s, r), (Status::BadPe, 2));
    assert_eq!(
        m,
        "upcxx_extra_nvshmem_check_pe_map: rank 2 reports PE 1, taken by another rank (1): NVSHMEM's PEs and the ranks must \
         be the same processes, each rank a different PE"
    );
    let (s, r, m) = check_map(&[0, -1], None);
    assert_eq!((s, r), (Status::BadPe, 1));
    assert!(m.contains("rank 1 reports PE -1, out of range [0, 2)"), "{m}");
    let (s, r, m) = check_map(&[0, 1], Some(&[2, 3]));
    assert_eq!((s, r), (Status::InvalidArgument, 1));
    assert!(m.contains("NVSHMEM has 3 PEs on rank 1 but there are 2 ranks"), "{m}");
    // The first failing rank decides, whichever check fails.
    assert_eq!(check_map(&[7, 1], Some(&[2, 3])).1, 0);
    // Within one rank, its PE count before its PE.
    assert_eq!(check_map(&[0, 0], Some(&[2, 3])).0, Status::InvalidArgument);
    // Arguments.
    let mut failed = 5;
    assert_eq!(unsafe { upcxx_extra_nvshmem_check_pe_map(1, std::ptr::null(), std::ptr::null(), &mut failed) }, Status::NullArgument);
    assert_eq!(failed, -1);
    assert!(last().contains("pe_of_rank is NULL"), "{}", last());
    let pes = [0];
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_check_pe_map(0, pes.as_ptr(), std::ptr::null(), std::ptr::null_mut()) },
        Status::InvalidArgument
    );
    assert!(last().contains("n_ranks is 0"), "{}", last());
    assert_eq!(unsafe { upcxx_extra_nvshmem_check_pe_map(1, pes.as_ptr(), std::ptr::null(), std::ptr::null_mut()) }, Status::Ok);
}

/// The same check as the peer table's: a PE -> rank map the table refuses is a rank -> PE map the
/// agreement refuses, at the same index.
#[test]
fn one_permutation_check() {
    use upcxx_extra_nvshmem::internals::peers::{NotPermutation, Permutation};
    let first_bad = |map: &[i32]| {
        let mut p = Permutation::new(map.len());
        map.iter().enumerate().find_map(|(i, &v)| p.add(i, v).err())
    };
    assert_eq!(first_bad(&[2, 0, 1]), None);
    assert_eq!(first_bad(&[2, 0, 2]), Some(NotPermutation::Repeated { index: 2, value: 2, first: 0 }));
    assert_eq!(first_bad(&[0, 3, 1]), Some(NotPermutation::OutOfRange { index: 1, value: 3 }));
    let mut p = Permutation::new(3);
    for (i, v) in [2, 0, 1].into_iter().enumerate() {
        p.add(i, v).unwrap();
    }
    assert_eq!(p.into_inverse(), vec![1, 2, 0]);
}

#[test]
fn every_release_before_init() {
    for root in common::nvshmem_roots() {
        let lib = root.join("lib/libnvshmem_host.so.3");
        // NVSHMEM's unique-id bootstrap runs on a CPU from 3.4 (3.1.7's wheel cannot load its
        // bootstrap plug-in under the name it asks for, and aborts).
        let release = common::release_of(&root);
        let init = !release.starts_with("3.1.");
        for how in ["none", "home", "loaded", "init"] {
            if how == "init" && !init {
                println!("SKIPPED {} (init): NVSHMEM {release}'s unique-id bootstrap aborts without its plug-in", lib.display());
                continue;
            }
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.args(["host_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
                .env(CHILD_LIB, &lib)
                .env(CHILD_HOW, how)
                .env("UXN_TEST_RELEASE", common::release_of(&root))
                .env_remove("NVSHMEM_HOME")
                .env_remove("LD_LIBRARY_PATH")
                .env_remove("LD_PRELOAD");
            if how == "home" || how == "init" {
                cmd.env("NVSHMEM_HOME", &root);
            }
            let out = cmd.output().unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            println!("--- {} ({how})\n{text}", lib.display());
            assert!(out.status.success(), "child for {} ({how}) failed:\n{text}", lib.display());
            assert!(text.contains("HOST-CHILD-OK"), "child for {} ({how}) did not finish:\n{text}", lib.display());
        }
    }
}

/// Runs only as the child of the test above: `none` (no NVSHMEM anywhere), `home` (found through
/// NVSHMEM_HOME), `loaded` (the program loaded it), `init` (a unique id, and an initialisation
/// that fails without a GPU).
#[test]
#[ignore = "run by every_release_before_init in a child process"]
fn host_child() {
    let (Ok(path), Ok(how)) = (std::env::var(CHILD_LIB), std::env::var(CHILD_HOW)) else { return };
    let id = UniqueId { bytes: [0; 128] };
    // NULL arguments before anything else.
    assert_eq!(unsafe { upcxx_extra_nvshmem_nvshmem_get_uniqueid(std::ptr::null_mut()) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_nvshmem_init(std::ptr::null(), 0, 1) }, Status::NullArgument);

    if how == "none" {
        let (s, _) = info();
        assert_eq!(s, Status::NotLoaded);
        let m = last();
        assert!(
            m.starts_with(
                "upcxx_extra_nvshmem_nvshmem_load: NVSHMEM's host library is not in this process and could not be loaded \
                 (libnvshmem_host.so.3: cannot open shared object file"
            ) && m.ends_with("or name its directory in LD_LIBRARY_PATH or NVSHMEM_HOME"),
            "{m}"
        );
        assert!(unsafe { upcxx_extra_nvshmem_nvshmem_load(std::ptr::null_mut()) } == Status::NotLoaded);
        let mut out = id;
        assert_eq!(unsafe { upcxx_extra_nvshmem_nvshmem_get_uniqueid(&mut out) }, Status::NotLoaded);
        assert!(last().starts_with("upcxx_extra_nvshmem_nvshmem_get_uniqueid: NVSHMEM's host library is not in this process"));
        assert_eq!(unsafe { upcxx_extra_nvshmem_nvshmem_init(&id, 0, 1) }, Status::NotLoaded);
        assert_eq!(upcxx_extra_nvshmem_nvshmem_check_init(0, 1), Status::NotLoaded);
        assert_eq!(upcxx_extra_nvshmem_nvshmem_finalize(), Status::NotLoaded);
        // Nothing was loaded by the attempts.
        assert!(unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"nvshmemx_init_status".as_ptr()) }.is_null());
        println!("HOST-CHILD-OK none");
        return;
    }
    if how == "loaded" {
        let c = CString::new(path.clone()).unwrap();
        assert!(!unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) }.is_null(), "dlopen {path}");
    }
    // Found, described: the release the wheel is, not initialised, no PE yet.
    let (s, i) = info();
    assert_eq!(s, Status::Ok, "{}", last());
    let library = unsafe { CStr::from_ptr(i.library) }.to_string_lossy().into_owned();
    assert_eq!(std::fs::canonicalize(&library).unwrap(), std::fs::canonicalize(&path).unwrap());
    let release = std::env::var("UXN_TEST_RELEASE").unwrap();
    if release.split('.').count() == 3 {
        assert_eq!(format!("{}.{}.{}", i.version_major, i.version_minor, i.version_patch), release);
    }
    assert_eq!((i.version_major, i.init_status, i.my_pe, i.n_pes), (3, 0, -1, -1));
    assert_eq!(unsafe { upcxx_extra_nvshmem_nvshmem_load(std::ptr::null_mut()) }, Status::Ok);

    // Not initialised: the check says so, with the release and the file.
    assert_eq!(upcxx_extra_nvshmem_nvshmem_check_init(0, 1), Status::NotInitialized);
    let m = last();
    assert!(
        m.contains("is not initialised as PE 0 of 1: nvshmemx_init_status() is 0, PE -1 of -1") && m.contains("libnvshmem_host.so.3"),
        "{m}"
    );
    // Finalising what is not initialised does nothing.
    assert_eq!(upcxx_extra_nvshmem_nvshmem_finalize(), Status::Ok);
    // A rank outside the job is refused before NVSHMEM is called.
    for (rank, n) in [(1, 1), (-1, 2), (0, 0)] {
        assert_eq!(unsafe { upcxx_extra_nvshmem_nvshmem_init(&id, rank, n) }, Status::InvalidArgument, "rank {rank} of {n}");
        assert!(last().contains(&format!("rank {rank} of {n}")), "{}", last());
    }
    assert_eq!(info().1.init_status, 0, "nothing initialised");
    if how == "init" {
        // A unique id (a socket of NVSHMEM's bootstrap: a machine without a network interface
        // refuses it, which is a status too), then NVSHMEM's initialisation, which cannot
        // succeed without a GPU: NVSHMEM's error, or a state that is not initialised.
        let mut made = UniqueId { bytes: [0; 128] };
        let s = unsafe { upcxx_extra_nvshmem_nvshmem_get_uniqueid(&mut made) };
        println!("get_uniqueid: {s:?}");
        if s == Status::NotInitialized {
            assert!(last().contains("nvshmemx_get_uniqueid (NVSHMEM 3.") && last().contains("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"));
        } else {
            assert_eq!(s, Status::Ok);
            assert_ne!(made.bytes, [0; 128], "the id has NVSHMEM's bytes");
            assert_eq!(unsafe { upcxx_extra_nvshmem_nvshmem_init(&made, 0, 1) }, Status::NotInitialized);
            let m = last();
            println!("init: {m}");
            assert!(
                m.starts_with("upcxx_extra_nvshmem_nvshmem_init: nvshmemx_hostlib_init_attr ") && m.contains("NVSHMEM_DEBUG=WARN"),
                "{m}"
            );
            assert!(m.contains(" returned ") || m.contains("is not initialised as PE 0 of 1"), "{m}");
            assert_eq!(upcxx_extra_nvshmem_nvshmem_check_init(0, 1), Status::NotInitialized);
            // Bootstrapped at most: finalize leaves it (NVSHMEM's finalisation would abort here).
            let (_, i) = info();
            assert!(i.init_status < 2, "init status {}", i.init_status);
            assert_eq!(upcxx_extra_nvshmem_nvshmem_finalize(), Status::Ok);
        }
    }
    println!("HOST-CHILD-OK {how} {path}");
}
