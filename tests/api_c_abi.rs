//! The C ABI on host memory (attach), in a process where NVSHMEM is never loaded.

mod common;
use std::ffi::{CStr, c_void};
use upcxx_extra_nvshmem::discovery::Source;
use upcxx_extra_nvshmem::ffi::*;
use upcxx_extra_nvshmem::status::Status;

fn last() -> String {
    unsafe { CStr::from_ptr(upcxx_extra_nvshmem_last_error()) }.to_string_lossy().into_owned()
}

#[test]
fn statuses_messages_and_misuse() {
    // Every status has its own description; unknown values are answered, not crashed on.
    let mut seen = std::collections::HashSet::new();
    for s in Status::ALL {
        let d = unsafe { CStr::from_ptr(upcxx_extra_nvshmem_strerror(s as i32)) }.to_str().unwrap().to_string();
        assert!(seen.insert(d.clone()), "duplicate description {d}");
    }
    assert_eq!(unsafe { CStr::from_ptr(upcxx_extra_nvshmem_strerror(-5)) }.to_str().unwrap(), "unknown status");
    assert_eq!(Status::Ok as i32, 0);

    // No NVSHMEM in this process.
    let mut info: UpcxxExtraNvshmemHeapInfo = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { upcxx_extra_nvshmem_heap_query(&mut info) }, Status::NotLoaded);
    assert!(last().contains("no libnvshmem_host.so is loaded"), "{}", last());
    let mut loc: UpcxxExtraNvshmemLocation = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { upcxx_extra_nvshmem_locate(2, &mut loc) }, Status::NotLoaded);
    assert_eq!(unsafe { upcxx_extra_nvshmem_locate(4, &mut loc) }, Status::InvalidArgument);
    assert_eq!(upcxx_extra_nvshmem_select_source(99), Status::InvalidArgument);
    assert!(last().contains("99 is not a source"));
    assert_eq!(upcxx_extra_nvshmem_select_source(Source::Manual as i32), Status::InvalidArgument);
    assert_eq!(upcxx_extra_nvshmem_select_source(0), Status::Ok);

    // attach on host memory: translation works, the descriptions of bad input are precise.
    let heap = vec![0u8; 4096];
    let base = heap.as_ptr() as *mut c_void;
    let good = common::heap_info(base, heap.len(), 1, 2);
    for (bad, want, needle) in [
        (UpcxxExtraNvshmemHeapInfo { base: std::ptr::null_mut(), ..good }, Status::InvalidArgument, "base is NULL"),
        (UpcxxExtraNvshmemHeapInfo { size: 0, ..good }, Status::InvalidArgument, "size is 0"),
        (UpcxxExtraNvshmemHeapInfo { size: usize::MAX, ..good }, Status::InvalidArgument, "overflows"),
        (UpcxxExtraNvshmemHeapInfo { mapped_size: 8192, ..good }, Status::InvalidArgument, "mapped_size"),
        (UpcxxExtraNvshmemHeapInfo { n_pes: 0, ..good }, Status::InvalidArgument, "n_pes is 0"),
        (UpcxxExtraNvshmemHeapInfo { my_pe: 2, ..good }, Status::BadPe, "my_pe 2 is not in [0, 2)"),
    ] {
        assert_eq!(unsafe { upcxx_extra_nvshmem_attach(&bad) }, want);
        assert!(last().contains(needle), "{} lacks {needle}", last());
    }
    assert_eq!(unsafe { upcxx_extra_nvshmem_attach(std::ptr::null()) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_attach(&good) }, Status::Ok);
    assert_eq!(unsafe { upcxx_extra_nvshmem_heap_query(&mut info) }, Status::Ok);
    assert_eq!((info.base, info.source), (base, Source::Manual));

    let mut off = 0usize;
    let inside = unsafe { (base as *const u8).add(100) } as *const c_void;
    assert_eq!(unsafe { upcxx_extra_nvshmem_offset(inside, &mut off) }, Status::Ok);
    assert_eq!(off, 100);
    let outside = unsafe { (base as *const u8).add(4096) } as *const c_void;
    assert_eq!(unsafe { upcxx_extra_nvshmem_offset(outside, &mut off) }, Status::OutOfHeap);
    assert!(last().contains(&format!("0x{:x}", outside as usize)) && last().contains("of PE 1"), "{}", last());

    let mut g = UpcxxExtraNvshmemGptr { rank: 0, device: 0, raw: std::ptr::null_mut(), pe: 0 };
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_global_ptr(inside, 0, &mut g) }, Status::TableNotSet);
    let other = 0x7700_0000_0000usize as *mut c_void;
    let peers = [UpcxxExtraNvshmemPeer { rank: 1, base: other }, UpcxxExtraNvshmemPeer { rank: 0, base }];
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(2, peers.as_ptr()) }, Status::Ok);
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_global_ptr(inside, 0, &mut g) }, Status::Ok);
    assert_eq!((g.rank, g.pe, g.raw as usize), (1, 0, other as usize + 100));
    let (mut sym, mut pe) = (std::ptr::null_mut(), -1);
    assert_eq!(unsafe { upcxx_extra_nvshmem_from_global_ptr(1, g.raw, &mut sym, &mut pe) }, Status::Ok);
    assert_eq!((sym as *const c_void, pe), (inside, 0));
    let mut bytes = 0usize;
    assert_eq!(unsafe { upcxx_extra_nvshmem_table_bytes(&mut bytes) }, Status::Ok);
    assert_eq!(bytes, 2 * 16);

    // A wrong n_pes is refused before the entries are read: the two entries end where an
    // unreadable page begins, so reading a third one would crash the test.
    let guarded = GuardedPeers::new(&peers);
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(3, guarded.ptr) }, Status::InvalidArgument);
    assert!(last().contains("n_pes is 3 but the heap has 2 PEs"), "{}", last());
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(2, guarded.ptr) }, Status::Ok);

    // The report is never empty and a short buffer says how much it needs.
    let mut need = 0usize;
    let mut one = [0i8; 1];
    assert_eq!(unsafe { upcxx_extra_nvshmem_report_buffer(one.as_mut_ptr(), 1, &mut need) }, Status::BufferTooSmall);
    assert!(need > 100);
    let mut buf = vec![0i8; need];
    assert_eq!(unsafe { upcxx_extra_nvshmem_report_buffer(buf.as_mut_ptr(), need, &mut need) }, Status::Ok);
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
    // A heap attached by hand is reported honestly: translation uses it.
    assert!(text.contains("verdict:   supported: the heap was attached by hand") && text.contains("source MANUAL"), "{text}");

    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_global_ptr(inside, 0, &mut g) }, Status::TableNotSet);
    assert_eq!(unsafe { upcxx_extra_nvshmem_table_bytes(&mut bytes) }, Status::TableNotSet);
    // No heap (and no NVSHMEM): refused by discovery, before a single entry is read.
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(1000, guarded.ptr) }, Status::NotLoaded);
}

/// Peer entries placed at the very end of a readable page, followed by a PROT_NONE page.
struct GuardedPeers {
    map: *mut c_void,
    len: usize,
    ptr: *const UpcxxExtraNvshmemPeer,
}

impl GuardedPeers {
    fn new(peers: &[UpcxxExtraNvshmemPeer]) -> Self {
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = 2 * page;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        let map = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        assert_ne!(map, libc::MAP_FAILED);
        assert_eq!(unsafe { libc::mprotect(map.cast::<u8>().add(page).cast(), page, libc::PROT_NONE) }, 0);
        let ptr = unsafe { map.cast::<u8>().add(page - std::mem::size_of_val(peers)) }.cast::<UpcxxExtraNvshmemPeer>();
        unsafe { std::ptr::copy_nonoverlapping(peers.as_ptr(), ptr, peers.len()) };
        GuardedPeers { map, len, ptr }
    }
}

impl Drop for GuardedPeers {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.map, self.len) };
    }
}
