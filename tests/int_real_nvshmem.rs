//! Discovery against the real NVSHMEM host libraries of the pip wheels (3.1.7, 3.4.5, 3.8.0 in
//! CI), on a machine without a GPU: each release is `dlopen`ed in a child process of its own
//! (two releases share a soname), and the child checks what a process sees before `nvshmem_init`.

mod common;

use std::ffi::{CStr, CString, c_void};
use std::process::Command;
use upcxx_extra_nvshmem::abi::Status;
use upcxx_extra_nvshmem::abi::*;

const CHILD_ENV: &str = "UXN_TEST_CHILD_NVSHMEM_LIB";

#[test]
fn every_release_is_found_before_init() {
    let roots = common::nvshmem_roots();
    for root in &roots {
        let lib = root.join("lib/libnvshmem_host.so.3");
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["child_process_checks", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &lib)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        println!("--- {} ({})\n{text}", common::release_of(root), lib.display());
        assert!(out.status.success(), "child for {} failed:\n{text}", lib.display());
        assert!(text.contains("CHILD-OK"), "child for {} did not finish:\n{text}", lib.display());
    }
}

/// Runs only as the child of the test above.
#[test]
#[ignore = "run by every_release_is_found_before_init in a child process"]
fn child_process_checks() {
    let Ok(path) = std::env::var(CHILD_ENV) else { return };
    let mut info: HeapInfo = unsafe { std::mem::zeroed() };
    // Before NVSHMEM is loaded at all.
    assert_eq!(unsafe { upcxx_extra_nvshmem_heap_query(&mut info) }, Status::NotLoaded);

    let c = CString::new(path.clone()).unwrap();
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!h.is_null(), "dlopen {path} failed");

    // Step 2 finds the state; its size is the one the file records; the version field is 0
    // until nvshmem_init (the state is in .bss) and the check accepts exactly 0x10000 + st_size.
    let mut loc: Location = unsafe { std::mem::zeroed() };
    let s = unsafe { upcxx_extra_nvshmem_locate(2, &mut loc) };
    let err = unsafe { CStr::from_ptr(upcxx_extra_nvshmem_last_error()) }.to_string_lossy().into_owned();
    assert_eq!(s, Status::Ok, "{err}");
    let elf = upcxx_extra_nvshmem::internals::elf::lookup(std::path::Path::new(&path), &["nvshmemi_device_state"]).unwrap();
    let sym = elf.symbols[0].expect("nvshmemi_device_state in .symtab");
    assert!(sym.local, "nvshmemi_device_state is a LOCAL symbol");
    assert_eq!(loc.symbol_size as u64, sym.size);
    assert!(loc.symbol_size >= upcxx_extra_nvshmem::internals::state_layout::PREFIX_LEN);
    assert_eq!(loc.version_field, 0, "the state is zero before nvshmem_init");
    assert!(!loc.is_device_address);
    let library = unsafe { CStr::from_ptr(loc.library) }.to_string_lossy().into_owned();
    assert_eq!(std::fs::canonicalize(&library).unwrap(), std::fs::canonicalize(&path).unwrap());
    // The version check that query time applies, on this release's own symbol size.
    let expected = 0x10000 + loc.symbol_size as u32;
    assert_eq!(upcxx_extra_nvshmem::internals::state_layout::check_version(expected, Some(loc.symbol_size)), Ok(loc.symbol_size));
    assert!(upcxx_extra_nvshmem::internals::state_layout::check_version(expected + 8, Some(loc.symbol_size)).is_err());
    println!(
        "symtab: address {:p} st_size {} version field 0x{:x} (expects 0x{expected:x} after init)",
        loc.address, loc.symbol_size, loc.version_field
    );

    // Step 1: not exported (LOCAL). Step 3: needs a GPU and an initialised NVSHMEM.
    assert_eq!(unsafe { upcxx_extra_nvshmem_locate(1, &mut loc) }, Status::StepUnavailable);
    let s3 = unsafe { upcxx_extra_nvshmem_locate(3, &mut loc) };
    assert!(matches!(s3, Status::StepUnavailable | Status::NotInitialized), "cumodule before init gave {s3:?}");

    // Queries before init: the not-initialised status, never a crash (nvshmem_ptr would crash here).
    assert_eq!(unsafe { upcxx_extra_nvshmem_heap_query(&mut info) }, Status::NotInitialized);
    let msg = unsafe { CStr::from_ptr(upcxx_extra_nvshmem_last_error()) }.to_string_lossy().into_owned();
    assert!(msg.contains("not initialised") && msg.contains("libnvshmem_host.so"), "{msg}");
    let mut off = 0usize;
    let x = 0u8;
    // Translation calls never run discovery: "no heap is known", as to_global_ptr says.
    assert_eq!(unsafe { upcxx_extra_nvshmem_offset(&x as *const u8 as *const c_void, &mut off) }, Status::TableNotSet);
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers_from_nvshmem(std::ptr::null()) }, Status::NotInitialized);
    let mut g: GlobalPtr = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_global_ptr(&x as *const u8 as *const c_void, 0, &mut g) }, Status::TableNotSet);

    // The in-process report sees the same library and says the layout check passes.
    let r = upcxx_extra_nvshmem::internals::report::in_process();
    assert_eq!(r.verdict.name(), "supported", "{}", r.to_text());
    assert_eq!(r.layout.as_ref().unwrap().check, "pass");
    assert_eq!(r.runtime.as_ref().unwrap().validation, "NOT_INITIALIZED");
    println!("{}", r.to_text());
    println!("CHILD-OK {path}");
}
