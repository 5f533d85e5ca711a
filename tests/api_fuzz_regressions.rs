//! Deterministic edge-case call sequences from the C ABI fuzzer (`tests/fuzz/fuzz_targets/c_abi.rs`),
//! driven through the exported functions exactly as C calls them, with the exact statuses the
//! fuzzer's shadow model expects. NVSHMEM is never loaded in this process (discovery answers
//! NOT_LOADED).
//!
//! The library's table is one per process, so the tests take a lock and start detached.

mod common;
use std::ffi::{CStr, c_int, c_void};
use std::ptr::{null, null_mut};
use std::sync::{Mutex, MutexGuard};
use upcxx_extra_nvshmem::abi::Status;
use upcxx_extra_nvshmem::abi::*;

static SERIAL: Mutex<()> = Mutex::new(());

/// Serialises the tests (one process-wide table) and starts each detached.
fn fresh() -> MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    g
}

fn last() -> String {
    unsafe { CStr::from_ptr(upcxx_extra_nvshmem_last_error()) }.to_string_lossy().into_owned()
}

fn p(a: usize) -> *mut c_void {
    a as *mut c_void
}

fn info(base: usize, size: usize, my_pe: c_int, n_pes: c_int) -> HeapInfo {
    HeapInfo { mapped_size: 0, device: 5, ..common::heap_info(p(base), size, my_pe, n_pes) }
}

fn attach(i: HeapInfo) -> Status {
    unsafe { upcxx_extra_nvshmem_attach(&i) }
}

fn peers(entries: &[(c_int, usize)]) -> Vec<Peer> {
    entries.iter().map(|&(rank, base)| Peer { rank, base: p(base) }).collect()
}

fn set_peers(entries: &[(c_int, usize)]) -> Status {
    let v = peers(entries);
    unsafe { upcxx_extra_nvshmem_set_peers(v.len() as c_int, v.as_ptr()) }
}

const G0: GlobalPtr = GlobalPtr { rank: 77, device: 77, raw: 0x77 as *mut c_void, pe: 77 };

/// `(status, (rank, device, raw, pe))`; the output is left untouched (G0) on failure.
fn to_global(sym: usize, pe: c_int) -> (Status, (c_int, c_int, usize, c_int)) {
    let mut g = G0;
    let st = unsafe { upcxx_extra_nvshmem_to_global_ptr(p(sym), pe, &mut g) };
    if st != Status::Ok {
        assert_eq!((g.rank, g.device, g.raw as usize, g.pe), (77, 77, 0x77, 77), "failed call wrote its output");
    }
    (st, (g.rank, g.device, g.raw as usize, g.pe))
}

/// `(status, (sym, pe))`; the outputs are left untouched (0x77, 77) on failure.
fn from_global(rank: c_int, raw: usize) -> (Status, (usize, c_int)) {
    let (mut sym, mut pe) = (p(0x77), 77);
    let st = unsafe { upcxx_extra_nvshmem_from_global_ptr(rank, p(raw), &mut sym, &mut pe) };
    if st != Status::Ok {
        assert_eq!((sym as usize, pe), (0x77, 77), "failed call wrote its output");
    }
    (st, (sym as usize, pe))
}

fn offset(addr: usize) -> (Status, usize) {
    let mut off = 0x77usize;
    let st = unsafe { upcxx_extra_nvshmem_offset(p(addr), &mut off) };
    (st, off)
}

fn table_bytes() -> (Status, usize) {
    let mut b = 0x77usize;
    let st = unsafe { upcxx_extra_nvshmem_table_bytes(&mut b) };
    (st, b)
}

/// A heap whose last byte is usize::MAX - 1 (its end address is usize::MAX): accepted; one byte
/// further overflows and is refused. Every edge translates exactly, nothing wraps.
#[test]
fn heap_ending_at_usize_max() {
    let _g = fresh();
    let size = 0x1000usize;
    let top = usize::MAX - size; // base + size == usize::MAX
    assert_eq!(attach(info(top + 1, size, 0, 2)), Status::InvalidArgument, "one past usize::MAX");
    assert!(last().contains("overflows the address space"), "{}", last());
    assert_eq!(attach(info(usize::MAX, 1, 0, 2)), Status::InvalidArgument);
    assert_eq!(attach(info(1, usize::MAX, 0, 2)), Status::InvalidArgument);
    assert_eq!(attach(info(top, size, 0, 2)), Status::Ok);

    // offset: base-1, base, last byte, end.
    assert_eq!(offset(top - 1).0, Status::OutOfHeap);
    assert_eq!(offset(top), (Status::Ok, 0));
    assert_eq!(offset(usize::MAX - 1), (Status::Ok, size - 1));
    assert_eq!(offset(usize::MAX).0, Status::OutOfHeap);
    assert!(last().contains("0xffffffffffffffff"), "{}", last());

    // Peer 1's heap as high as it fits is fine; one byte higher overflows.
    assert_eq!(set_peers(&[(1, top), (0, top + 1)]), Status::InvalidArgument);
    assert_eq!(set_peers(&[(1, top), (0, usize::MAX)]), Status::InvalidArgument);
    assert_eq!(to_global(top, 1).0, Status::TableNotSet, "refused tables leave none");
    let low = 0x10_0000usize;
    assert_eq!(set_peers(&[(1, top), (0, low)]), Status::Ok);
    assert_eq!(table_bytes(), (Status::Ok, 2 * 16));

    assert_eq!(to_global(top - 1, 1).0, Status::OutOfHeap);
    assert_eq!(to_global(top, 1), (Status::Ok, (0, -1, low, 1)));
    assert_eq!(to_global(usize::MAX - 1, 1), (Status::Ok, (0, -1, low + size - 1, 1)));
    assert_eq!(to_global(usize::MAX - 1, 0), (Status::Ok, (1, 5, usize::MAX - 1, 0)));
    assert_eq!(to_global(usize::MAX, 0).0, Status::OutOfHeap);

    assert_eq!(from_global(0, low - 1).0, Status::OutOfHeap);
    assert_eq!(from_global(0, low), (Status::Ok, (top, 1)));
    assert_eq!(from_global(0, low + size - 1), (Status::Ok, (usize::MAX - 1, 1)));
    assert_eq!(from_global(0, low + size).0, Status::OutOfHeap);
    assert_eq!(from_global(1, usize::MAX - 1), (Status::Ok, (usize::MAX - 1, 0)));
    assert_eq!(from_global(1, usize::MAX).0, Status::OutOfHeap);
    assert!(last().contains("0xffffffffffffffff") && last().contains("rank 1 (PE 0)"), "{}", last());
    // Raw address 1 on rank 1 (offset wraps below the base): out of heap, not a wrapped hit.
    assert_eq!(from_global(1, 1).0, Status::OutOfHeap);
}

/// n_pes = 1: the only valid PE/rank is 0; -1, 1, i32::MIN and i32::MAX are refused.
#[test]
fn single_pe() {
    let _g = fresh();
    let heap = vec![0u8; 256];
    let base = heap.as_ptr() as usize;
    assert_eq!(attach(info(base, 256, 1, 1)), Status::BadPe);
    assert!(last().contains("my_pe 1 is not in [0, 1)"), "{}", last());
    assert_eq!(attach(info(base, 256, -1, 1)), Status::BadPe);
    assert_eq!(attach(info(base, 256, 0, 0)), Status::InvalidArgument);
    assert_eq!(attach(info(base, 256, 0, i32::MIN)), Status::InvalidArgument);
    let mut over = info(base, 256, 0, 1);
    over.mapped_size = 257;
    assert_eq!(attach(over), Status::InvalidArgument);
    assert!(last().contains("mapped_size"), "{}", last());
    over.mapped_size = 256;
    assert_eq!(attach(over), Status::Ok);

    // set_peers: NULL, n_pes 0 / negative / mismatched, a non-permutation, then identity.
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(1, null()) }, Status::NullArgument);
    let one = peers(&[(0, base)]);
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(0, one.as_ptr()) }, Status::InvalidArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(-1, one.as_ptr()) }, Status::InvalidArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers(i32::MIN, one.as_ptr()) }, Status::InvalidArgument);
    assert_eq!(set_peers(&[(0, base), (1, base)]), Status::InvalidArgument, "2 entries for 1 PE");
    assert_eq!(set_peers(&[(1, base)]), Status::BadRank);
    assert_eq!(set_peers(&[(-1, base)]), Status::BadRank);
    assert_eq!(set_peers(&[(0, base + 1)]), Status::InvalidArgument, "my entry must carry my base");
    assert_eq!(set_peers(&[(0, base)]), Status::Ok);
    assert_eq!(table_bytes(), (Status::Ok, 0), "uniform identity table is O(1)");

    for pe in [-1, 1, 2, i32::MIN, i32::MAX] {
        assert_eq!(to_global(base, pe).0, Status::BadPe, "pe {pe}");
        assert!(last().contains(&format!("PE {pe} is not in [0, 1)")), "{}", last());
        assert_eq!(from_global(pe, base).0, Status::BadRank, "rank {pe}");
    }
    assert_eq!(to_global(base + 255, 0), (Status::Ok, (0, 5, base + 255, 0)));
    assert_eq!(to_global(base + 256, 0).0, Status::OutOfHeap, "out of heap is reported before a bad PE");
    assert_eq!(to_global(base + 256, 1).0, Status::OutOfHeap);
    assert_eq!(from_global(0, base), (Status::Ok, (base, 0)));
    assert_eq!(from_global(0, base - 1).0, Status::OutOfHeap);
    assert_eq!(from_global(1, base - 1).0, Status::BadRank, "a bad rank is reported before out of heap");
    drop(heap);
}

/// Duplicate / negative / out-of-range ranks and bad bases are refused with the exact status,
/// and a refused table leaves the previous one in force; attaching the same heap again drops
/// the table; a refused attach changes nothing; detach forgets everything.
#[test]
fn duplicate_ranks_keep_previous_table() {
    let _g = fresh();
    let (base, size) = (0x4000_0000usize, 0x1_0000usize);
    let b = |pe: usize| 0x10_0000_0000 + pe * 0x100_0000;
    assert_eq!(attach(info(base, size, 2, 4)), Status::Ok);
    // PE -> rank 3, 0, 2, 1; my PE 2 at my base.
    let good = [(3, b(0)), (0, b(1)), (2, base), (1, b(3))];
    assert_eq!(set_peers(&good), Status::Ok);
    assert_eq!(table_bytes(), (Status::Ok, 4 * 16));

    for (bad, want, needle) in [
        ([(3, b(0)), (3, b(1)), (2, base), (1, b(3))], Status::BadRank, "rank 3 is given to both PE 0 and PE 1"),
        ([(3, b(0)), (0, b(1)), (2, base), (2, b(3))], Status::BadRank, "rank 2 is given to both PE 2 and PE 3"),
        ([(3, b(0)), (-1, b(1)), (2, base), (1, b(3))], Status::BadRank, "PE 1 maps to rank -1"),
        ([(3, b(0)), (0, b(1)), (2, base), (4, b(3))], Status::BadRank, "PE 3 maps to rank 4"),
        ([(i32::MIN, b(0)), (0, b(1)), (2, base), (1, b(3))], Status::BadRank, "rank -2147483648"),
        ([(i32::MAX, b(0)), (0, b(1)), (2, base), (1, b(3))], Status::BadRank, "rank 2147483647"),
        ([(3, b(0)), (0, 0), (2, base), (1, b(3))], Status::InvalidArgument, "PE 1 has heap base 0x0"),
        ([(3, b(0)), (0, usize::MAX - size + 1), (2, base), (1, b(3))], Status::InvalidArgument, "cannot hold"),
        ([(3, b(0)), (0, b(1)), (2, base + 1), (1, b(3))], Status::InvalidArgument, "the entry for my PE 2"),
        // The first failing PE decides: PE 0's bad rank before PE 1's NULL base.
        ([(9, b(0)), (0, 0), (2, base), (1, b(3))], Status::BadRank, "PE 0 maps to rank 9"),
        // Within one PE its base before its repeated rank (the fuzzer's find: PE 3 repeats rank 0
        // and has a NULL base).
        ([(1, b(0)), (0, b(1)), (2, base), (0, 0)], Status::InvalidArgument, "PE 3 has heap base 0x0"),
    ] {
        assert_eq!(set_peers(&bad), want, "{bad:x?}");
        assert!(last().contains(needle), "{} lacks {needle}", last());
        // The previous table still answers.
        assert_eq!(to_global(base + 0x10, 0), (Status::Ok, (3, -1, b(0) + 0x10, 0)));
        assert_eq!(from_global(1, b(3) + size - 1), (Status::Ok, (base + size - 1, 3)));
        assert_eq!(table_bytes(), (Status::Ok, 4 * 16));
    }
    for pe in 0..4 {
        for off in [0, 1, size - 1] {
            let (st, (rank, dev, raw, gpe)) = to_global(base + off, pe);
            assert_eq!(st, Status::Ok);
            assert_eq!((dev, gpe), (if pe == 2 { 5 } else { -1 }, pe));
            assert_eq!(from_global(rank, raw), (Status::Ok, (base + off, pe)), "round trip");
        }
    }
    assert_eq!(from_global(3, b(1)).0, Status::OutOfHeap, "rank 3 is PE 0, not PE 1");

    // A refused attach changes nothing.
    assert_eq!(attach(info(0, size, 0, 4)), Status::InvalidArgument);
    assert_eq!(attach(info(base, 0, 0, 4)), Status::InvalidArgument);
    assert_eq!(attach(info(base, size, 4, 4)), Status::BadPe);
    assert_eq!(to_global(base, 0), (Status::Ok, (3, -1, b(0), 0)));

    // The same heap attached again: the table is gone until set_peers.
    assert_eq!(attach(info(base, size, 2, 4)), Status::Ok);
    assert_eq!(to_global(base, 0).0, Status::TableNotSet);
    assert_eq!(from_global(3, b(0)).0, Status::TableNotSet);
    assert_eq!(table_bytes().0, Status::TableNotSet);
    assert_eq!(offset(base + 1), (Status::Ok, 1), "offset needs no table");

    // Detach forgets heap and table: the translation calls say so; set_peers and heap_query
    // fall back to discovery.
    assert_eq!(set_peers(&good), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    assert_eq!(to_global(base, 0).0, Status::TableNotSet);
    assert_eq!(offset(base).0, Status::TableNotSet);
    assert_eq!(set_peers(&good), Status::NotLoaded);
    let mut hi: HeapInfo = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { upcxx_extra_nvshmem_heap_query(&mut hi) }, Status::NotLoaded);
}

/// NULL for each pointer argument, out-of-enum integers, and the report buffer's edges.
#[test]
fn null_arguments_and_out_of_range_ints() {
    let _g = fresh();
    let (base, size) = (0x7000_0000usize, 0x100usize);
    assert_eq!(unsafe { upcxx_extra_nvshmem_attach(null()) }, Status::NullArgument);
    assert!(last().starts_with("upcxx_extra_nvshmem_attach: "), "{}", last());
    assert_eq!(attach(info(base, size, 0, 2)), Status::Ok);
    assert_eq!(set_peers(&[(1, base), (0, base + 0x1000)]), Status::Ok);

    let mut g = G0;
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_global_ptr(null(), 0, &mut g) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_to_global_ptr(p(base), 0, null_mut()) }, Status::NullArgument);
    assert!(last().starts_with("upcxx_extra_nvshmem_to_global_ptr: "), "{}", last());
    let (mut sym, mut pe) = (null_mut(), 0);
    assert_eq!(unsafe { upcxx_extra_nvshmem_from_global_ptr(0, null(), &mut sym, &mut pe) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_from_global_ptr(0, p(base), null_mut(), &mut pe) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_from_global_ptr(0, p(base), &mut sym, null_mut()) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_offset(null(), &mut 0) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_offset(p(base), null_mut()) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_heap_query(null_mut()) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_table_bytes(null_mut()) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_locate(0, null_mut()) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_report(null_mut()) }, Status::NullArgument);
    assert_eq!((g.rank, g.raw as usize), (77, 0x77), "failed calls wrote nothing");
    assert_eq!((sym, pe), (null_mut(), 0));

    // Out-of-enum integers.
    let mut loc: Location = unsafe { std::mem::zeroed() };
    for s in [-1, 4, 5, i32::MIN, i32::MAX] {
        assert_eq!(upcxx_extra_nvshmem_select_source(s), Status::InvalidArgument, "select_source({s})");
        assert_eq!(unsafe { upcxx_extra_nvshmem_locate(s, &mut loc) }, Status::InvalidArgument, "locate({s})");
    }
    // Ends with 0 (every step, the default) selected.
    for s in (0..=3).rev() {
        assert_eq!(unsafe { upcxx_extra_nvshmem_locate(s, &mut loc) }, Status::NotLoaded, "locate({s})");
        assert_eq!(upcxx_extra_nvshmem_select_source(s), Status::Ok, "select_source({s})");
    }
    for s in [-1, 18, 19, i32::MIN, i32::MAX] {
        assert_eq!(unsafe { CStr::from_ptr(upcxx_extra_nvshmem_strerror(s)) }.to_str().unwrap(), "unknown status");
    }
    for st in Status::ALL {
        assert_eq!(unsafe { CStr::from_ptr(upcxx_extra_nvshmem_strerror(st as c_int)) }, st.description());
    }
    assert_eq!(unsafe { upcxx_extra_nvshmem_set_peers_from_nvshmem(null()) }, Status::NotLoaded);

    // report_buffer: the needed size is written on every path; NULL with len 0 is "too small".
    let mut need = 0usize;
    assert_eq!(unsafe { upcxx_extra_nvshmem_report_buffer(null_mut(), 0, &mut need) }, Status::BufferTooSmall);
    assert!(need > 1);
    let mut need2 = 0usize;
    assert_eq!(unsafe { upcxx_extra_nvshmem_report_buffer(null_mut(), 5, &mut need2) }, Status::NullArgument);
    assert_eq!(need2, need);
    assert_eq!(unsafe { upcxx_extra_nvshmem_report_buffer(null_mut(), 0, null_mut()) }, Status::BufferTooSmall);
    let mut buf = vec![0x5a as std::ffi::c_char; need + 8];
    assert_eq!(unsafe { upcxx_extra_nvshmem_report_buffer(buf.as_mut_ptr(), need - 1, null_mut()) }, Status::BufferTooSmall);
    assert!(buf.iter().all(|c| *c == 0x5a), "a refused call wrote the buffer");
    assert_eq!(unsafe { upcxx_extra_nvshmem_report_buffer(buf.as_mut_ptr(), need, null_mut()) }, Status::Ok);
    assert_eq!(buf[need - 1], 0);
    assert!(!buf[..need - 1].contains(&0));
    assert!(buf[need..].iter().all(|c| *c == 0x5a), "wrote past the text");

    // A success leaves the last error as it was.
    let before = last();
    assert_eq!(to_global(base + 1, 1), (Status::Ok, (0, -1, base + 0x1001, 1)));
    assert_eq!(last(), before);
}

fn to_offset(sym: usize, len: usize, pe: c_int) -> (Status, (c_int, usize)) {
    let (mut rank, mut off) = (77, 0x77usize);
    let st = unsafe { upcxx_extra_nvshmem_to_offset(p(sym), len, pe, &mut rank, &mut off) };
    if st != Status::Ok {
        assert_eq!((rank, off), (77, 0x77), "failed call wrote its outputs");
    }
    (st, (rank, off))
}

/// The extent at its edges, on a heap ending at usize::MAX: 1 byte, size - 1, size, size + 1;
/// every direction stops at the extent's last byte, `to_offset`'s range check cannot wrap, and
/// the extent survives set_peers (also a refused one) but not attach or detach.
#[test]
fn extent_edges_on_a_heap_ending_at_usize_max() {
    let _g = fresh();
    let size = 0x1000usize;
    let top = usize::MAX - size;
    let low = 0x10_0000usize;
    assert_eq!(upcxx_extra_nvshmem_set_extent(1), Status::TableNotSet);
    assert_eq!(attach(info(top, size, 0, 2)), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_set_extent(size + 1), Status::InvalidArgument);
    assert_eq!(upcxx_extra_nvshmem_set_extent(usize::MAX), Status::InvalidArgument);
    assert_eq!(upcxx_extra_nvshmem_set_extent(size - 1), Status::Ok, "before set_peers");
    assert_eq!(set_peers(&[(1, top), (0, low)]), Status::Ok);

    let e = size - 1; // the extent: the heap's last byte is no longer addressable
    assert_eq!(to_offset(top + e - 1, 0, 1), (Status::Ok, (0, e - 1)));
    assert_eq!(to_offset(top + e - 1, 1, 1), (Status::Ok, (0, e - 1)));
    assert_eq!(to_offset(top + e - 1, 2, 1).0, Status::OutOfHeap);
    assert_eq!(to_offset(top + e, 0, 1).0, Status::OutOfHeap);
    assert_eq!(to_offset(usize::MAX, 0, 1).0, Status::OutOfHeap);
    assert_eq!(to_offset(top, usize::MAX, 1).0, Status::OutOfHeap);
    assert_eq!(to_offset(top, e, 0), (Status::Ok, (1, 0)));
    assert_eq!(to_offset(top, e + 1, 0).0, Status::OutOfHeap);
    assert!(last().contains(&format!("made addressable (set_extent) of PE 0's heap [0x{top:x}, 0xffffffffffffffff)")), "{}", last());
    assert_eq!(to_offset(top - 1, 0, 0).0, Status::OutOfHeap);

    assert_eq!(to_global(top + e - 1, 1), (Status::Ok, (0, -1, low + e - 1, 1)));
    assert_eq!(to_global(top + e, 1).0, Status::OutOfHeap);
    assert_eq!(from_global(0, low + e - 1), (Status::Ok, (top + e - 1, 1)));
    assert_eq!(from_global(0, low + e).0, Status::OutOfHeap);
    assert_eq!(from_global(1, top + e).0, Status::OutOfHeap);
    assert_eq!(offset(top + e - 1), (Status::Ok, e - 1));
    assert_eq!(offset(top + e).0, Status::OutOfHeap);

    // A refused table keeps the old table and the extent; an accepted one keeps the extent.
    assert_eq!(set_peers(&[(1, top), (1, low)]), Status::BadRank);
    assert_eq!(to_global(top + e, 1).0, Status::OutOfHeap);
    assert_eq!(set_peers(&[(0, top), (1, low)]), Status::Ok);
    assert_eq!(to_global(top + e, 1).0, Status::OutOfHeap);
    // One byte.
    assert_eq!(upcxx_extra_nvshmem_set_extent(1), Status::Ok);
    assert_eq!(to_offset(top, 1, 1), (Status::Ok, (1, 0)));
    assert_eq!(to_offset(top, 2, 1).0, Status::OutOfHeap);
    assert_eq!(to_global(top + 1, 1).0, Status::OutOfHeap);
    // attach (even of the same heap) and detach clear it.
    assert_eq!(attach(info(top, size, 0, 2)), Status::Ok);
    assert_eq!(set_peers(&[(1, top), (0, low)]), Status::Ok);
    assert_eq!(to_global(usize::MAX - 1, 1), (Status::Ok, (0, -1, low + size - 1, 1)));
    assert_eq!(upcxx_extra_nvshmem_set_extent(1), Status::Ok);
    assert_eq!(upcxx_extra_nvshmem_detach(), Status::Ok);
    assert_eq!(attach(info(top, size, 0, 2)), Status::Ok);
    assert_eq!(offset(usize::MAX - 1), (Status::Ok, size - 1));
}
