//! upcxx_extra_nvshmem_local_ptr on host memory (attach), in a process where NVSHMEM is never
//! loaded: its own test binary, since the table is process-wide.

mod common;
use std::ffi::{CStr, c_void};
use upcxx_extra_nvshmem::abi::Status;
use upcxx_extra_nvshmem::abi::*;

fn last() -> String {
    unsafe { CStr::from_ptr(upcxx_extra_nvshmem_last_error()) }.to_string_lossy().into_owned()
}

#[test]
fn local_ptr_says_where_a_global_address_is_mapped() {
    // A heap attached by hand on host memory, 2 PEs: PE 1 is this process (rank 0), PE 0 is
    // rank 1 elsewhere. No NVSHMEM here, so only the local PE's bytes are mapped in this process.
    let heap = vec![0u8; 4096];
    let base = heap.as_ptr() as *mut c_void;
    let info = common::heap_info(base, heap.len(), 1, 2);
    let (mut local, mut sym, mut pe) = (std::ptr::null_mut(), std::ptr::null_mut(), -1);
    let at = |p: *mut c_void, off: usize| unsafe { (p as *mut u8).add(off) } as *mut c_void;
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    assert_eq!(unsafe { upcxx_extra_nvshmem_local_ptr(0, at(base, 8), 8, &mut local, &mut sym, &mut pe) }, Status::TableNotSet);
    assert_eq!(unsafe { upcxx_extra_nvshmem_attach(&info) }, Status::Ok);
    let other = 0x7700_0000_0000usize as *mut c_void;
    let peers = [Peer { rank: 1, base: other }, Peer { rank: 0, base }];
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(2, peers.as_ptr()) }, Status::Ok);

    // My own bytes: mapped at their own address; the optional outputs are filled.
    assert_eq!(unsafe { upcxx_extra_nvshmem_local_ptr(0, at(base, 8), 4088, &mut local, &mut sym, &mut pe) }, Status::Ok);
    assert_eq!((local, sym, pe), (at(base, 8), at(base, 8), 1));
    // The other rank's bytes: translated, not mapped here (NULL, status OK).
    local = base;
    assert_eq!(unsafe { upcxx_extra_nvshmem_local_ptr(1, at(other, 100), 16, &mut local, std::ptr::null_mut(), &mut pe) }, Status::Ok);
    assert_eq!((local, pe), (std::ptr::null_mut(), 0));
    // Translation stays lock-free: the loaded objects (the loader's lock) are searched for
    // NVSHMEM at most once per attached heap, not on every call for another PE.
    let searches = upcxx_extra_nvshmem::internals::local_mapping::nvshmem_searches();
    for _ in 0..100 {
        assert_eq!(unsafe { upcxx_extra_nvshmem_local_ptr(1, at(other, 100), 16, &mut local, std::ptr::null_mut(), &mut pe) }, Status::Ok);
    }
    assert!(
        upcxx_extra_nvshmem::internals::local_mapping::nvshmem_searches() == searches,
        "searched {} times",
        upcxx_extra_nvshmem::internals::local_mapping::nvshmem_searches() - searches
    );
    // len 0 checks the address alone; the last byte of the heap is fine, one more is not.
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_local_ptr(0, at(base, 4095), 0, &mut local, std::ptr::null_mut(), std::ptr::null_mut()) },
        Status::Ok
    );
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_local_ptr(0, at(base, 4095), 1, &mut local, std::ptr::null_mut(), std::ptr::null_mut()) },
        Status::Ok
    );
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_local_ptr(0, at(base, 4095), 2, &mut local, std::ptr::null_mut(), std::ptr::null_mut()) },
        Status::OutOfHeap
    );
    assert!(last().contains("2 bytes") && last().contains("run past the end"), "{}", last());
    // A length that would overflow the address space, an address outside, bad rank, NULLs.
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_local_ptr(0, at(base, 8), usize::MAX, &mut local, std::ptr::null_mut(), std::ptr::null_mut()) },
        Status::OutOfHeap
    );
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_local_ptr(0, at(base, 4096), 1, &mut local, std::ptr::null_mut(), std::ptr::null_mut()) },
        Status::OutOfHeap
    );
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_local_ptr(2, at(base, 8), 1, &mut local, std::ptr::null_mut(), std::ptr::null_mut()) },
        Status::BadRank
    );
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_local_ptr(-1, at(base, 8), 1, &mut local, std::ptr::null_mut(), std::ptr::null_mut()) },
        Status::BadRank
    );
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_local_ptr(0, std::ptr::null(), 1, &mut local, std::ptr::null_mut(), std::ptr::null_mut()) },
        Status::NullArgument
    );
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_local_ptr(0, at(base, 8), 1, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut()) },
        Status::NullArgument
    );
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
}
