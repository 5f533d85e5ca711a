//! The C ABI on host memory (attach), in a process where NVSHMEM is never loaded.

mod common;
use std::ffi::{CStr, c_void};
use upcxx_extra_nvshmem::abi::Source;
use upcxx_extra_nvshmem::abi::Status;
use upcxx_extra_nvshmem::abi::*;

fn last() -> String {
    unsafe { CStr::from_ptr(upcxx_extra_nvshmem_last_error()) }.to_string_lossy().into_owned()
}

/// The library's heap and table are one per process: the tests of this file take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn statuses_messages_and_misuse() {
    let _g = serial();
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    // Every status has its own description; unknown values are answered, not crashed on.
    let mut seen = std::collections::HashSet::new();
    for s in Status::ALL {
        let d = unsafe { CStr::from_ptr(upcxx_extra_nvshmem_strerror(s as i32)) }.to_str().unwrap().to_string();
        assert!(seen.insert(d.clone()), "duplicate description {d}");
    }
    assert_eq!(unsafe { CStr::from_ptr(upcxx_extra_nvshmem_strerror(-5)) }.to_str().unwrap(), "unknown status");
    assert_eq!(Status::Ok as i32, 0);

    // No NVSHMEM in this process.
    let mut info: HeapInfo = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { upcxx_extra_nvshmem_heap_query(&mut info) }, Status::NotLoaded);
    assert!(last().contains("no libnvshmem_host.so is loaded"), "{}", last());
    let mut loc: Location = unsafe { std::mem::zeroed() };
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
        (HeapInfo { base: std::ptr::null_mut(), ..good }, Status::InvalidArgument, "base is NULL"),
        (HeapInfo { size: 0, ..good }, Status::InvalidArgument, "size is 0"),
        (HeapInfo { size: usize::MAX, ..good }, Status::InvalidArgument, "overflows"),
        (HeapInfo { mapped_size: 8192, ..good }, Status::InvalidArgument, "mapped_size"),
        (HeapInfo { n_pes: 0, ..good }, Status::InvalidArgument, "n_pes is 0"),
        (HeapInfo { my_pe: 2, ..good }, Status::BadPe, "my_pe 2 is not in [0, 2)"),
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

    let mut g = GlobalPtr { rank: 0, device: 0, raw: std::ptr::null_mut(), pe: 0 };
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_global_ptr(inside, 0, &mut g) }, Status::TableNotSet);
    let other = 0x7700_0000_0000usize as *mut c_void;
    let peers = [Peer { rank: 1, base: other }, Peer { rank: 0, base }];
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

/// `to_offset(sym, len, pe)`: `(status, (rank, offset))`, the outputs untouched on failure.
fn to_offset(sym: *const c_void, len: usize, pe: i32) -> (Status, (i32, usize)) {
    let (mut rank, mut off) = (77, 0x77usize);
    let st = unsafe { upcxx_extra_nvshmem_to_offset(sym, len, pe, &mut rank, &mut off) };
    if st != Status::Ok {
        assert_eq!((rank, off), (77, 0x77), "a failed to_offset wrote its outputs");
    }
    (st, (rank, off))
}

#[test]
fn extent_limits_every_translation_and_to_offset_checks_once() {
    let _g = serial();
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    let heap = vec![0u8; 4096];
    let base = heap.as_ptr() as *mut c_void;
    let at = |off: usize| unsafe { (base as *const u8).add(off) } as *const c_void;
    let other = 0x7700_0000_0000usize;
    let peers = [Peer { rank: 1, base: other as *mut c_void }, Peer { rank: 0, base }];

    // No heap: both say so (no discovery).
    assert_eq!(upcxx_extra_nvshmem_set_extent(0), Status::TableNotSet);
    assert!(last().starts_with("upcxx_extra_nvshmem_set_extent: no heap is known"), "{}", last());
    assert_eq!(to_offset(at(0), 0, 0).0, Status::TableNotSet);
    assert!(last().contains("no heap is known"), "{}", last());

    // A heap of 2 PEs (mine is PE 1), no table yet: to_offset needs the rank, so TABLE_NOT_SET.
    assert_eq!(unsafe { upcxx_extra_nvshmem_attach(&common::heap_info(base, 4096, 1, 2)) }, Status::Ok);
    assert_eq!(to_offset(at(8), 0, 0).0, Status::TableNotSet);
    assert!(last().contains("the peer table is not set"), "{}", last());
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(2, peers.as_ptr()) }, Status::Ok);

    // to_offset: the rank of the PE, the offset; NULLs; the range check (len 0: the address).
    assert_eq!(to_offset(at(100), 8, 0), (Status::Ok, (1, 100)));
    assert_eq!(to_offset(at(100), 8, 1), (Status::Ok, (0, 100)));
    assert_eq!(to_offset(at(4095), 0, 0), (Status::Ok, (1, 4095)));
    assert_eq!(to_offset(at(4095), 1, 0), (Status::Ok, (1, 4095)));
    assert_eq!(to_offset(at(0), 4096, 0), (Status::Ok, (1, 0)));
    assert_eq!(to_offset(at(4095), 2, 0).0, Status::OutOfHeap);
    assert!(last().contains("the 2 bytes at") && last().contains("run past the end of the symmetric heap"), "{}", last());
    assert_eq!(to_offset(at(8), usize::MAX, 0).0, Status::OutOfHeap, "a length that overflows");
    assert_eq!(to_offset(at(4096), 0, 0).0, Status::OutOfHeap);
    assert!(last().contains(&format!("address 0x{:x} is outside the symmetric heap", at(4096) as usize)), "{}", last());
    assert_eq!(to_offset(at(4096), 0, 5).0, Status::OutOfHeap, "out of heap is reported before a bad PE");
    assert_eq!(to_offset(at(8), 0, 2).0, Status::BadPe);
    assert!(last().contains("PE 2 is not in [0, 2)"), "{}", last());
    assert_eq!(to_offset(at(8), 0, -1).0, Status::BadPe);
    let (mut rank, mut off) = (0, 0usize);
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_offset(std::ptr::null(), 0, 0, &mut rank, &mut off) }, Status::NullArgument);
    assert!(last().contains("sym_addr is NULL"), "{}", last());
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_offset(at(8), 0, 0, std::ptr::null_mut(), &mut off) }, Status::NullArgument);
    assert!(last().contains("rank is NULL"), "{}", last());
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_offset(at(8), 0, 0, &mut rank, std::ptr::null_mut()) }, Status::NullArgument);
    assert!(last().contains("offset is NULL"), "{}", last());

    // set_extent: at most the heap's size.
    assert_eq!(upcxx_extra_nvshmem_set_extent(4097), Status::InvalidArgument);
    assert!(last().contains("4097") && last().contains("4096"), "{}", last());
    assert_eq!(upcxx_extra_nvshmem_set_extent(1024), Status::Ok);

    // Every translation stops at the extent, in both directions, and says so.
    let range = format!("of PE 1's heap [0x{:x}, 0x{:x})", base as usize, base as usize + 4096);
    assert_eq!(to_offset(at(1020), 4, 0), (Status::Ok, (1, 1020)));
    assert_eq!(to_offset(at(1020), 5, 0).0, Status::OutOfHeap);
    let want = format!("the 5 bytes at 0x{:x} run past the 1024 bytes made addressable (set_extent) {range}", at(1020) as usize);
    assert!(last().ends_with(&want), "{} lacks {want}", last());
    assert_eq!(to_offset(at(1024), 0, 0).0, Status::OutOfHeap);
    assert!(last().contains("runs past the 1024 bytes made addressable (set_extent)"), "{}", last());
    assert_eq!(to_offset(at(1000), 4000, 0).0, Status::OutOfHeap, "past the heap too: the heap's end is named");
    assert!(last().contains("run past the end of the symmetric heap"), "{}", last());

    let mut g = GlobalPtr { rank: 0, device: 0, raw: std::ptr::null_mut(), pe: 0 };
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_global_ptr(at(1023), 0, &mut g) }, Status::Ok);
    assert_eq!((g.rank, g.raw as usize), (1, other + 1023));
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_global_ptr(at(1024), 0, &mut g) }, Status::OutOfHeap);
    assert!(
        last().contains(&format!("address 0x{:x} runs past the 1024 bytes made addressable (set_extent) {range}", at(1024) as usize)),
        "{}",
        last()
    );

    let (mut sym, mut pe) = (std::ptr::null_mut(), -1);
    assert_eq!(unsafe { upcxx_extra_nvshmem_from_global_ptr(1, (other + 1023) as *const c_void, &mut sym, &mut pe) }, Status::Ok);
    assert_eq!((sym as *const c_void, pe), (at(1023), 0));
    assert_eq!(unsafe { upcxx_extra_nvshmem_from_global_ptr(1, (other + 1024) as *const c_void, &mut sym, &mut pe) }, Status::OutOfHeap);
    let theirs = format!("runs past the 1024 bytes made addressable (set_extent) of PE 0's heap [0x{other:x}, 0x{:x})", other + 4096);
    assert!(last().contains(&format!("address 0x{:x} on rank 1 {theirs}", other + 1024)), "{}", last());

    assert_eq!(unsafe { upcxx_extra_nvshmem_offset(at(1023), &mut off) }, Status::Ok);
    assert_eq!(unsafe { upcxx_extra_nvshmem_offset(at(1024), &mut off) }, Status::OutOfHeap);
    assert!(last().contains("made addressable (set_extent)"), "{}", last());

    let mut local = std::ptr::null_mut();
    let null = std::ptr::null_mut();
    assert_eq!(unsafe { upcxx_extra_nvshmem_local_ptr(0, at(1000), 24, &mut local, null, std::ptr::null_mut()) }, Status::Ok);
    assert_eq!(local as *const c_void, at(1000));
    assert_eq!(unsafe { upcxx_extra_nvshmem_local_ptr(0, at(1000), 25, &mut local, null, std::ptr::null_mut()) }, Status::OutOfHeap);
    assert!(last().contains("the 25 bytes at") && last().contains("made addressable (set_extent)"), "{}", last());
    assert_eq!(
        unsafe { upcxx_extra_nvshmem_local_ptr(1, (other + 1024) as *const c_void, 0, &mut local, null, std::ptr::null_mut()) },
        Status::OutOfHeap
    );

    // Kept by set_peers; 0 lifts it; the heap's own size is the same as none.
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(2, peers.as_ptr()) }, Status::Ok);
    assert_eq!(to_offset(at(1024), 0, 0).0, Status::OutOfHeap, "set_peers keeps the extent");
    assert_eq!(upcxx_extra_nvshmem_set_extent(0), Status::Ok);
    assert_eq!(to_offset(at(4095), 1, 0), (Status::Ok, (1, 4095)));
    assert_eq!(upcxx_extra_nvshmem_set_extent(4096), Status::Ok);
    assert_eq!(to_offset(at(4095), 1, 0), (Status::Ok, (1, 4095)));
    assert_eq!(to_offset(at(4095), 2, 0).0, Status::OutOfHeap);
    assert!(last().contains("run past the end of the symmetric heap"), "{}", last());

    // Cleared by attach (a new heap) and by detach.
    assert_eq!(upcxx_extra_nvshmem_set_extent(16), Status::Ok);
    assert_eq!(unsafe { upcxx_extra_nvshmem_attach(&common::heap_info(base, 4096, 1, 2)) }, Status::Ok);
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(2, peers.as_ptr()) }, Status::Ok);
    assert_eq!(to_offset(at(2000), 0, 1), (Status::Ok, (0, 2000)), "attach cleared the extent");
    assert_eq!(upcxx_extra_nvshmem_set_extent(16), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_set_extent(16), Status::TableNotSet);
    assert_eq!(unsafe { upcxx_extra_nvshmem_attach(&common::heap_info(base, 4096, 1, 2)) }, Status::Ok);
    assert_eq!(unsafe { upcxx_extra_nvshmem_offset(at(2000), &mut off) }, Status::Ok, "detach cleared the extent");
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
}

/// Peer entries placed at the very end of a readable page, followed by a PROT_NONE page.
struct GuardedPeers {
    map: *mut c_void,
    len: usize,
    ptr: *const Peer,
}

impl GuardedPeers {
    fn new(peers: &[Peer]) -> Self {
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = 2 * page;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        let map = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        assert_ne!(map, libc::MAP_FAILED);
        assert_eq!(unsafe { libc::mprotect(map.cast::<u8>().add(page).cast(), page, libc::PROT_NONE) }, 0);
        let ptr = unsafe { map.cast::<u8>().add(page - std::mem::size_of_val(peers)) }.cast::<Peer>();
        unsafe { std::ptr::copy_nonoverlapping(peers.as_ptr(), ptr, peers.len()) };
        GuardedPeers { map, len, ptr }
    }
}

impl Drop for GuardedPeers {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.map, self.len) };
    }
}

/// `copy_batch` refuses what no launch could take before it touches CUDA; in this process there
/// is no GPU context (no driver, or one with no current context for device 99), so a well-formed
/// batch is CUDA_ERROR naming the device. Launches themselves run on the CUDA stand-in
/// (tests/cxx over tests/standin) and on GPUs.
#[test]
fn copy_batch_checks_its_arguments() {
    let _g = serial();
    let (mut a, mut b) = ([1u8; 8], [0u8; 8]);
    let one = CopyDesc { src: a.as_mut_ptr() as *const c_void, dst: b.as_mut_ptr() as *mut c_void, bytes: 8 };
    let null = std::ptr::null_mut();
    assert_eq!(unsafe { upcxx_extra_nvshmem_copy_batch(0, null, std::ptr::null(), 1) }, Status::NullArgument);
    assert!(last().contains("copies is NULL"), "{}", last());
    assert_eq!(unsafe { upcxx_extra_nvshmem_copy_batch(0, null, &one, 0) }, Status::InvalidArgument);
    let max = CopyBatch::Max as usize;
    let many = vec![one; max + 1];
    assert_eq!(unsafe { upcxx_extra_nvshmem_copy_batch(0, null, many.as_ptr(), max + 1) }, Status::InvalidArgument);
    assert!(last().contains(&format!("count is {}", max + 1)) && last().contains(&format!("1 to {max}")), "{}", last());
    let holes = [one, CopyDesc { src: std::ptr::null(), dst: b.as_mut_ptr() as *mut c_void, bytes: 4 }];
    assert_eq!(unsafe { upcxx_extra_nvshmem_copy_batch(0, null, holes.as_ptr(), 2) }, Status::NullArgument);
    assert!(last().contains("copies[1] has a NULL end and 4 bytes"), "{}", last());
    // A NULL end of 0 bytes is no copy: accepted, so the call reaches CUDA, which is absent here.
    let empty = [CopyDesc { src: std::ptr::null(), dst: std::ptr::null_mut(), bytes: 0 }];
    assert_eq!(unsafe { upcxx_extra_nvshmem_copy_batch(99, null, empty.as_ptr(), 1) }, Status::CudaError);
    assert!(last().contains("device 99"), "{}", last());
    assert_eq!(b, [0u8; 8], "nothing was copied");
}

fn view() -> (Status, TableView) {
    let mut v = TableView { base: 0x77 as *mut c_void, size: 77, extent: 77, my_pe: 77, n_pes: 77, device: 77, peers_set: true };
    let st = unsafe { upcxx_extra_nvshmem_table_view(&mut v) };
    if st != Status::Ok {
        assert_eq!((v.base as usize, v.size, v.my_pe), (0x77, 77, 77), "a failed table_view wrote its output");
    }
    (st, v)
}

fn from_offset(rank: i32, off: usize, len: usize) -> (Status, (usize, i32)) {
    let (mut sym, mut pe) = (0x77 as *mut c_void, 77);
    let st = unsafe { upcxx_extra_nvshmem_from_offset(rank, off, len, &mut sym, &mut pe) };
    if st != Status::Ok {
        assert_eq!((sym as usize, pe), (0x77, 77), "a failed from_offset wrote its outputs");
    }
    (st, (sym as usize, pe))
}

fn local_offset(sym: *const c_void, len: usize) -> (Status, usize) {
    let mut off = 0x77usize;
    let st = unsafe { upcxx_extra_nvshmem_local_offset(sym, len, &mut off) };
    if st != Status::Ok {
        assert_eq!(off, 0x77, "a failed local_offset wrote its output");
    }
    (st, off)
}

/// What a PGAS layer asks instead of keeping its own copy of the table: the view, offsets both
/// ways, and whether a raw pointer is heap memory.
#[test]
fn the_table_answers_its_state_and_offsets_and_refuses_heap_pointers() {
    let _g = serial();
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    let heap = vec![0u8; 4096];
    let base = heap.as_ptr() as *mut c_void;
    let at = |off: usize| unsafe { (base as *const u8).add(off) } as *const c_void;
    let host = [0u8; 16];

    // No heap: nothing to view or translate, and no pointer is heap memory.
    assert_eq!(view().0, Status::TableNotSet);
    assert!(last().starts_with("upcxx_extra_nvshmem_table_view: no heap is known"), "{}", last());
    assert_eq!(unsafe { upcxx_extra_nvshmem_table_view(std::ptr::null_mut()) }, Status::NullArgument);
    assert_eq!(local_offset(at(0), 0).0, Status::TableNotSet);
    assert_eq!(from_offset(0, 0, 0).0, Status::TableNotSet);
    assert_eq!(upcxx_extra_nvshmem_check_host_ptr(at(0)), Status::Ok);

    // A heap without a peer table: the view, local offsets and the pointer check work.
    assert_eq!(unsafe { upcxx_extra_nvshmem_attach(&common::heap_info(base, heap.len(), 1, 2)) }, Status::Ok);
    let (st, v) = view();
    assert_eq!(st, Status::Ok);
    assert_eq!((v.base, v.size, v.extent, v.my_pe, v.n_pes, v.device, v.peers_set), (base, 4096, 4096, 1, 2, -1, false));
    assert_eq!(local_offset(at(4090), 6), (Status::Ok, 4090));
    assert_eq!(local_offset(at(4090), 7).0, Status::OutOfHeap);
    assert!(last().contains("the 7 bytes at") && last().contains("run past the end of the symmetric heap"), "{}", last());
    assert_eq!(local_offset(std::ptr::null(), 0).0, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_local_offset(at(0), 0, std::ptr::null_mut()) }, Status::NullArgument);
    assert_eq!(from_offset(0, 0, 0).0, Status::TableNotSet);
    assert!(last().contains("the peer table is not set"), "{}", last());
    for off in [0, 1, 4095] {
        assert_eq!(upcxx_extra_nvshmem_check_host_ptr(at(off)), Status::InvalidArgument);
        assert!(
            last().starts_with(&format!(
                "upcxx_extra_nvshmem_check_host_ptr: address 0x{:x} is in the local NVSHMEM heap [0x{:x}, 0x{:x}) of PE 1 (heap offset {off})",
                at(off) as usize,
                base as usize,
                base as usize + 4096
            )),
            "{}",
            last()
        );
    }
    assert_eq!(upcxx_extra_nvshmem_check_host_ptr(at(4096)), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_check_host_ptr(unsafe { (base as *const u8).sub(1) }.cast()), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_check_host_ptr(host.as_ptr().cast()), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_check_host_ptr(std::ptr::null()), Status::Ok);
    // The whole range is checked: one that starts below the heap and runs into it is heap memory
    // (check_host_ptr, which sees its first byte only, takes it), one that ends at the heap's base
    // or starts at its end is not; len 0 is the address alone.
    let below = |k: usize| unsafe { (base as *const u8).sub(k) } as *const c_void;
    assert_eq!(upcxx_extra_nvshmem_check_host_ptr(below(64)), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_check_host_range(below(64), 128), Status::InvalidArgument);
    assert!(
        last().starts_with(&format!(
            "upcxx_extra_nvshmem_check_host_range: the range [0x{:x}, +128) (its byte at 0x{:x}) is in the local NVSHMEM heap",
            below(64) as usize,
            base as usize
        )) && last().contains("of PE 1 (heap offset 0)"),
        "{}",
        last()
    );
    assert_eq!(upcxx_extra_nvshmem_check_host_range(below(64), 64), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_check_host_range(below(64), 65), Status::InvalidArgument);
    assert_eq!(upcxx_extra_nvshmem_check_host_range(at(4095), 1), Status::InvalidArgument);
    assert!(last().contains(&format!("address 0x{:x} is in the local NVSHMEM heap", at(4095) as usize)), "{}", last());
    assert_eq!(upcxx_extra_nvshmem_check_host_range(at(4096), 1 << 20), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_check_host_range(below(1), 0), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_check_host_range(at(0), 0), Status::InvalidArgument);
    assert_eq!(upcxx_extra_nvshmem_check_host_range(std::ptr::null(), usize::MAX), Status::InvalidArgument, "all of memory");
    assert_eq!(upcxx_extra_nvshmem_check_host_range(at(4096), usize::MAX), Status::Ok, "clipped at the top");
    assert_eq!(upcxx_extra_nvshmem_check_host_range(host.as_ptr().cast(), host.len()), Status::Ok);

    // Shuffled ranks, another base on PE 0: from_offset is from_global_ptr without the base.
    let other = 0x7700_0000_0000usize;
    let peers = [Peer { rank: 1, base: other as *mut c_void }, Peer { rank: 0, base }];
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(2, peers.as_ptr()) }, Status::Ok);
    assert!(view().1.peers_set);
    assert_eq!(from_offset(1, 100, 8), (Status::Ok, (at(100) as usize, 0)));
    assert_eq!(from_offset(0, 4095, 1), (Status::Ok, (at(4095) as usize, 1)));
    let (mut sym, mut pe) = (std::ptr::null_mut(), -1);
    assert_eq!(unsafe { upcxx_extra_nvshmem_from_global_ptr(1, (other + 100) as *const c_void, &mut sym, &mut pe) }, Status::Ok);
    assert_eq!((sym as usize, pe), (at(100) as usize, 0), "from_offset and from_global_ptr agree");
    assert_eq!(from_offset(2, 0, 0).0, Status::BadRank);
    assert!(last().contains("rank 2 is not in [0, 2)"), "{}", last());
    assert_eq!(from_offset(-1, 0, 0).0, Status::BadRank);
    assert_eq!(from_offset(1, 4096, 0).0, Status::OutOfHeap);
    assert!(last().contains(&format!("0x{:x} on rank 1 (heap offset 4096)", other + 4096)) && last().contains("of PE 0"), "{}", last());
    assert_eq!(from_offset(1, 4000, 97).0, Status::OutOfHeap);
    assert_eq!(from_offset(1, usize::MAX, 2).0, Status::OutOfHeap);
    assert_eq!(unsafe { upcxx_extra_nvshmem_from_offset(1, 0, 0, std::ptr::null_mut(), &mut pe) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_from_offset(1, 0, 0, &mut sym, std::ptr::null_mut()) }, Status::NullArgument);

    // The extent bounds all three and shows in the view; a heap attached by hand has no NVSHMEM
    // mapping, so only its own range is heap memory.
    assert_eq!(upcxx_extra_nvshmem_set_extent(1024), Status::Ok);
    assert_eq!(view().1.extent, 1024);
    assert_eq!(local_offset(at(1000), 24), (Status::Ok, 1000));
    assert_eq!(local_offset(at(1000), 25).0, Status::OutOfHeap);
    assert!(last().contains("run past the 1024 bytes made addressable (set_extent)"), "{}", last());
    assert_eq!(from_offset(0, 1023, 1).0, Status::Ok);
    assert_eq!(from_offset(0, 1023, 2).0, Status::OutOfHeap);
    assert!(last().contains("run past the 1024 bytes made addressable (set_extent) of PE 1's heap"), "{}", last());
    assert_eq!(upcxx_extra_nvshmem_check_host_ptr(at(2000)), Status::InvalidArgument, "past the extent is still heap memory");
    assert_eq!(upcxx_extra_nvshmem_check_host_ptr((other + 8) as *const c_void), Status::Ok);

    // The published span: the heap attached by hand, read as a caller reads it inline.
    let mut slot: *const *const Span = std::ptr::null();
    assert_eq!(unsafe { upcxx_extra_nvshmem_heap_span(&mut slot) }, Status::Ok);
    assert_eq!(unsafe { upcxx_extra_nvshmem_heap_span(std::ptr::null_mut()) }, Status::NullArgument);
    let span = || unsafe { *(*slot.cast::<std::sync::atomic::AtomicPtr<Span>>()).load(std::sync::atomic::Ordering::Acquire) };
    assert_eq!((span().lo, span().size), (base as usize, 4096));

    // Detached: nothing is known again.
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    assert_eq!((span().lo, span().size), (0, 0));
    let mut again: *const *const Span = std::ptr::null();
    assert_eq!(unsafe { upcxx_extra_nvshmem_heap_span(&mut again) }, Status::Ok);
    assert_eq!(again, slot, "the slot never moves");
    assert_eq!(view().0, Status::TableNotSet);
    assert_eq!(upcxx_extra_nvshmem_check_host_ptr(at(0)), Status::Ok);
    assert_eq!(local_offset(at(0), 0).0, Status::TableNotSet);
}
