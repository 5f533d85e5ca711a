//! Translation: between NVSHMEM's (symmetric address, PE) and UPC++'s (rank, address), heap
//! offsets, where a rank's bytes are mapped in this process (`local_ptr`) and whether a host
//! pointer is heap memory (`check_host_*`, `heap_span`); the peer table they read (`set_peers`,
//! `set_peers_from_nvshmem`) and the table as they see it (`table_view`). The hot paths and
//! their slow paths.

use super::Span;
use super::marshal::nonnull;
use crate::error::{Error, Status};
use crate::table::TABLE;
use crate::table::peers::PeerSpec;
use crate::table::process_heap;
use crate::table::translation::Global;
use std::ffi::{c_int, c_void};
use upcxx_extra_nvshmem_macros::export;

/// One PE's entry for `upcxx_extra_nvshmem_set_peers`, indexed by PE.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// The UPC++ rank of this PE (the ranks must be a permutation of 0..n_pes-1).
    pub rank: c_int,
    /// This PE's heap base (in its own address space).
    pub base: *mut c_void,
}

/// The table as translation uses it (`upcxx_extra_nvshmem_table_view`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TableView {
    /// First byte of the local heap.
    pub base: *mut c_void,
    /// The heap's reserved size in bytes.
    pub size: usize,
    /// The bytes of each PE's heap every translation is bounded by: the extent given to
    /// `set_extent`, else `size`.
    pub extent: usize,
    /// This process's PE.
    pub my_pe: c_int,
    /// Number of PEs.
    pub n_pes: c_int,
    /// CUDA device ordinal holding the heap, -1 when unknown.
    pub device: c_int,
    /// Whether a peer table is set (`set_peers`, `set_peers_from_nvshmem`).
    pub peers_set: bool,
}

/// A global pointer in UPC++ terms: the rank and the address on that rank.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GlobalPtr {
    /// UPC++ rank that owns the bytes.
    pub rank: c_int,
    /// CUDA device ordinal holding the bytes: known for the local PE, -1 for other PEs.
    pub device: c_int,
    /// The address on that rank.
    pub raw: *mut c_void,
    /// The NVSHMEM PE (the `pe` argument).
    pub pe: c_int,
}

impl From<Global> for GlobalPtr {
    fn from(g: Global) -> Self {
        GlobalPtr { rank: g.rank, device: g.device, raw: g.raw as *mut c_void, pe: g.pe }
    }
}

/// The UPC++ rank of PE `pe` and the offset of `sym_addr` in the local heap, with the `len`
/// bytes at `sym_addr` checked against the local heap and the extent (`set_extent`) in one
/// check (`len` 0 checks the address alone): what a PGAS layer needs to name the bytes on `pe`.
///
/// Statuses: OK; NULL_ARGUMENT (`sym_addr`, `rank` or `offset` NULL); TABLE_NOT_SET (no heap, or
/// no peer table; never runs discovery); OUT_OF_HEAP (the address, or the range's end, outside
/// the local heap or past the extent); BAD_PE. The outputs are written only on OK. Thread safety:
/// any thread, lock-free, as `to_global_ptr`.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_to_offset(
    sym_addr: *const c_void,
    len: usize,
    pe: c_int,
    rank: *mut c_int,
    offset: *mut usize,
) -> Status {
    if !sym_addr.is_null() && !rank.is_null() && !offset.is_null() {
        if let Some((r, off)) = TABLE.try_to_offset(sym_addr as usize, len, pe) {
            // SAFETY: non-NULL caller storage.
            unsafe {
                rank.write(r);
                offset.write(off);
            }
            return Status::Ok;
        }
    }
    to_offset_slow(sym_addr, len, pe, rank, offset)
}

#[cold]
#[inline(never)]
#[export(name = "upcxx_extra_nvshmem_to_offset")]
extern "C" fn to_offset_slow(sym_addr: *const c_void, len: usize, pe: c_int, rank: *mut c_int, offset: *mut usize) -> Status {
    nonnull(sym_addr, "sym_addr")?;
    nonnull(rank, "rank")?;
    nonnull(offset, "offset")?;
    let (r, off) = TABLE.to_offset(sym_addr as usize, len, pe)?;
    // SAFETY: non-NULL caller storage.
    unsafe {
        rank.write(r);
        offset.write(off);
    }
    Ok(())
}

/// The offset of `addr` from the local heap base.
///
/// Like every translation call it reads the published heap and never runs discovery: before
/// `heap_query` or `attach` it returns TABLE_NOT_SET ("no heap is known"), as `to_global_ptr` does.
/// Statuses: OK; NULL_ARGUMENT; TABLE_NOT_SET; OUT_OF_HEAP. Thread safety: any thread, lock-free.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_offset(addr: *const c_void, offset: *mut usize) -> Status {
    nonnull(addr, "addr")?;
    nonnull(offset, "offset")?;
    let off = TABLE.offset(addr as usize)?;
    // SAFETY: non-NULL caller storage.
    unsafe { offset.write(off) };
    Ok(())
}

/// The offset of the `len` bytes at `sym_addr` in the local heap, checked against the local heap
/// and the extent (`set_extent`) in one check (`len` 0 checks the address alone): `to_offset`
/// toward this process's own PE, without a peer table.
///
/// Statuses: OK; NULL_ARGUMENT (`sym_addr` or `offset` NULL); TABLE_NOT_SET (no heap; never runs
/// discovery); OUT_OF_HEAP (the address, or the range's end, outside the local heap or past the
/// extent). `offset` is written only on OK. Thread safety: any thread, lock-free.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_local_offset(sym_addr: *const c_void, len: usize, offset: *mut usize) -> Status {
    if !sym_addr.is_null() && !offset.is_null() {
        if let Some(off) = TABLE.try_local_offset(sym_addr as usize, len) {
            // SAFETY: non-NULL caller storage.
            unsafe { offset.write(off) };
            return Status::Ok;
        }
    }
    local_offset_slow(sym_addr, len, offset)
}

#[cold]
#[inline(never)]
#[export(name = "upcxx_extra_nvshmem_local_offset")]
extern "C" fn local_offset_slow(sym_addr: *const c_void, len: usize, offset: *mut usize) -> Status {
    nonnull(sym_addr, "sym_addr")?;
    nonnull(offset, "offset")?;
    let off = TABLE.local_offset(sym_addr as usize, len)?;
    // SAFETY: non-NULL caller storage.
    unsafe { offset.write(off) };
    Ok(())
}

/// The symmetric address (in the local heap) and PE of the `len` bytes at heap offset `offset`
/// of UPC++ rank `rank` (`len` 0 checks the offset alone), checked against the extent
/// (`set_extent`): `from_global_ptr` for a caller that knows the offset, not the address, on that
/// rank (a PGAS layer's offset into the segment it made over the heap).
///
/// Statuses: OK; NULL_ARGUMENT (`sym_addr` or `pe` NULL); TABLE_NOT_SET (no heap, or no peer
/// table; never runs discovery); BAD_RANK; OUT_OF_HEAP (the offset, or the range's end, past the
/// heap or the extent). The outputs are written only on OK. Thread safety: any thread, lock-free.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_from_offset(
    rank: c_int,
    offset: usize,
    len: usize,
    sym_addr: *mut *mut c_void,
    pe: *mut c_int,
) -> Status {
    if !sym_addr.is_null() && !pe.is_null() {
        if let Some((sym, p)) = TABLE.try_from_offset(rank, offset, len) {
            // SAFETY: non-NULL caller storage.
            unsafe {
                sym_addr.write(sym as *mut c_void);
                pe.write(p);
            }
            return Status::Ok;
        }
    }
    from_offset_slow(rank, offset, len, sym_addr, pe)
}

#[cold]
#[inline(never)]
#[export(name = "upcxx_extra_nvshmem_from_offset")]
extern "C" fn from_offset_slow(rank: c_int, offset: usize, len: usize, sym_addr: *mut *mut c_void, pe: *mut c_int) -> Status {
    nonnull(sym_addr, "sym_addr")?;
    nonnull(pe, "pe")?;
    let (sym, p) = TABLE.from_offset(rank, offset, len)?;
    // SAFETY: non-NULL caller storage.
    unsafe {
        sym_addr.write(sym as *mut c_void);
        pe.write(p);
    }
    Ok(())
}

/// OK when `ptr` is not NVSHMEM heap memory as this process addresses it: neither in the local
/// heap nor in another PE's heap as NVSHMEM maps it here (`nvshmem_ptr`, P2P peers). For a layer
/// that takes a raw pointer as the caller's own host memory (as `upcxx::copy` does a `T*`) and
/// must refuse heap memory passed that way. Without a heap every pointer is OK. One read and one
/// compare for a pointer outside the span of those heaps.
///
/// Statuses: OK; INVALID_ARGUMENT (`ptr` is heap memory; the last error names the PE, the
/// mapping and the heap offset). Thread safety: any thread, lock-free (NVSHMEM's `nvshmem_ptr`
/// is asked only for a pointer inside the span).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_check_host_ptr(ptr: *const c_void) -> Status {
    if !TABLE.in_mapped_span(ptr as usize) {
        return Status::Ok;
    }
    check_host_ptr_slow(ptr)
}

#[cold]
#[inline(never)]
#[export(name = "upcxx_extra_nvshmem_check_host_ptr")]
extern "C" fn check_host_ptr_slow(ptr: *const c_void) -> Status {
    crate::table::local_mapping::check_host_ptr(ptr as usize)
}

/// `check_host_ptr` for the whole range `[ptr, ptr + len)`: OK when no byte of it is NVSHMEM
/// heap memory as this process addresses it (the local heap, or another PE's heap as NVSHMEM maps
/// it here). `len` 0 checks `ptr` alone, as `check_host_ptr` does. For a layer that takes a raw
/// pointer and a length as the caller's own host memory (as `upcxx::copy` does `n` elements at a
/// `T*`): a range that starts below a heap and runs into it is heap memory too. A range that runs
/// past the end of the address space is clipped there. One read and two compares for a range
/// outside the span of those heaps.
///
/// Statuses: OK; INVALID_ARGUMENT (a byte of the range is heap memory; the last error names the
/// range, the first such byte, the PE, the mapping and the heap offset). Thread safety: any
/// thread, lock-free (NVSHMEM's `nvshmem_ptr` is asked only for a range that meets the span).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_check_host_range(ptr: *const c_void, len: usize) -> Status {
    if !TABLE.overlaps_mapped_span(ptr as usize, len) {
        return Status::Ok;
    }
    check_host_range_slow(ptr, len)
}

#[cold]
#[inline(never)]
#[export(name = "upcxx_extra_nvshmem_check_host_range")]
extern "C" fn check_host_range_slow(ptr: *const c_void, len: usize) -> Status {
    crate::table::local_mapping::check_host_range(ptr as usize, len)
}

/// Where the library publishes which addresses of this process hold NVSHMEM heap memory, for a
/// caller that must tell a host pointer from heap memory without a call (the C++ layer's
/// `heap.copy` on every raw pointer): the slot, read with an acquire load (C11
/// `atomic_load_explicit((_Atomic(const upcxx_extra_nvshmem_span_t *) *)slot,
/// memory_order_acquire)`, GCC/Clang `__atomic_load_n(slot, __ATOMIC_ACQUIRE)`), points to a
/// span `[lo, lo + size)` that never changes: the local heap and every peer's heap as NVSHMEM
/// maps it here, with the gaps between them; `{0, 0}` without a heap. A pointer outside it is
/// not heap memory; one inside may be (ask `check_host_ptr`, which also says whose). The slot is
/// repointed at each change of the table (attach, detach, discovery, `set_peers`); every span it
/// pointed to stays valid for the life of the process.
///
/// `*slot` receives the slot's address, which is the same for the life of the process.
///
/// Statuses: OK; NULL_ARGUMENT. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_heap_span(slot: *mut *const *const Span) -> Status {
    nonnull(slot, "slot")?;
    // SAFETY: non-NULL caller storage.
    unsafe { slot.write(TABLE.span_slot()) };
    Ok(())
}

/// The local heap and the table as they are now, from one read: base, reserved size, the bound
/// of every translation (the extent given to `set_extent`, else the heap's size), PE, PE count,
/// device, and whether a peer table is set. Unlike `heap_query` it never runs discovery and
/// never re-reads NVSHMEM: it describes what translation uses.
///
/// Statuses: OK; NULL_ARGUMENT; TABLE_NOT_SET (no heap is known). `out` is written only on OK.
/// Thread safety: any thread, lock-free.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_table_view(out: *mut TableView) -> Status {
    nonnull(out, "out")?;
    let v = TABLE.view().ok_or_else(|| {
        Error::new(Status::TableNotSet, "no heap is known: call upcxx_extra_nvshmem_heap_query or upcxx_extra_nvshmem_attach first")
    })?;
    // SAFETY: non-NULL caller storage.
    unsafe {
        out.write(TableView {
            base: v.base as *mut c_void,
            size: v.size,
            extent: v.limit,
            my_pe: v.my_pe,
            n_pes: v.n_pes,
            device: v.device,
            peers_set: v.peers,
        })
    };
    Ok(())
}

/// Fills the table: `peers[pe]` is PE `pe`'s UPC++ rank and heap base. `n_pes` must equal the
/// heap's PE count and `peers[my_pe].base` the local heap base. Runs discovery when no heap is
/// known yet.
///
/// Statuses: OK; NULL_ARGUMENT; INVALID_ARGUMENT (`n_pes` <= 0 or not the heap's, my entry's
/// base not my heap's, a base that cannot hold the heap); BAD_RANK (ranks not a permutation of
/// 0..n_pes-1); the statuses of `heap_query` when discovery runs. Process-wide state; thread
/// safety: any thread (a writer; translation on other threads sees the old or the new table).
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_set_peers(n_pes: c_int, peers: *const Peer) -> Status {
    nonnull(peers, "peers")?;
    if n_pes <= 0 {
        crate::fail!(InvalidArgument, "n_pes is {n_pes}");
    }
    // The entries are read only once n_pes is known to be the heap's (a wrong count must be
    // refused before reading past the caller's array).
    process_heap::set_peers(n_pes as usize, |n| {
        // SAFETY: the caller passes n_pes (== n) entries.
        let given = unsafe { std::slice::from_raw_parts(peers, n) };
        given.iter().map(|p| PeerSpec { rank: p.rank, base: p.base as usize }).collect()
    })
}

/// Fills the table from NVSHMEM itself: every PE's base from `peer_heap_base_remote` (a device
/// array), and `pe_to_rank[pe]` as PE -> rank map (NULL = identity; else `n_pes` entries).
///
/// Statuses: OK; BAD_RANK (the map is not a permutation); CUDA_ERROR (reading the device array);
/// UNSUPPORTED_LAYOUT (no such array); the statuses of `heap_query`'s discovery, which always
/// runs (a heap attached by hand has no NVSHMEM table: use `set_peers`). Process-wide state;
/// thread safety: any thread (a writer).
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_set_peers_from_nvshmem(pe_to_rank: *const c_int) -> Status {
    process_heap::set_peers_from_nvshmem(|n| {
        if pe_to_rank.is_null() {
            None
        } else {
            // SAFETY: the caller passes n_pes entries.
            Some(unsafe { std::slice::from_raw_parts(pe_to_rank, n) }.to_vec())
        }
    })
}

/// The global pointer to PE `pe`'s copy of the symmetric object at `sym_addr` (a local heap address).
///
/// Statuses: OK; NULL_ARGUMENT; TABLE_NOT_SET (no heap, or no peer table; never runs discovery);
/// OUT_OF_HEAP (`sym_addr` outside the local heap); BAD_PE. Thread safety: any thread, lock-free
/// (one snapshot read: the answer comes from one table even while another thread replaces it).
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_to_global_ptr(sym_addr: *const c_void, pe: c_int, out: *mut GlobalPtr) -> Status {
    // One attempt; on a refusal or a race with a writer the slow path retries or says why.
    if !out.is_null() && !sym_addr.is_null() {
        if let Some(g) = TABLE.try_to_global(sym_addr as usize, pe) {
            // SAFETY: non-NULL caller storage.
            unsafe { out.write(g.into()) };
            return Status::Ok;
        }
    }
    to_global_ptr_slow(sym_addr, pe, out)
}

#[cold]
#[inline(never)]
#[export(name = "upcxx_extra_nvshmem_to_global_ptr")]
extern "C" fn to_global_ptr_slow(sym_addr: *const c_void, pe: c_int, out: *mut GlobalPtr) -> Status {
    nonnull(sym_addr, "sym_addr")?;
    nonnull(out, "out")?;
    let g = TABLE.to_global(sym_addr as usize, pe)?;
    // SAFETY: non-NULL caller storage.
    unsafe { out.write(g.into()) };
    Ok(())
}

/// Where the `len` bytes at `raw` on UPC++ rank `rank` are mapped in THIS process: `*local` is
/// an address this process (and its GPU) can read and write them through, e.g. with
/// `cudaMemcpyAsync`; NULL when they are not mapped here (a PE on another node, no P2P between
/// the GPUs, a heap attached by hand). The range must lie in that rank's heap; `len` 0 checks
/// `raw` alone. `sym_addr` and `pe` (both optional, may be NULL) receive the symmetric address
/// and the PE. The local PE's bytes are mapped at their own address.
///
/// Statuses: OK; NULL_ARGUMENT (`raw` or `local` NULL); TABLE_NOT_SET; BAD_RANK; OUT_OF_HEAP (the
/// address, or the range's end, outside the rank's heap); NOT_INITIALIZED (NVSHMEM finalised).
/// Thread safety: any thread, lock-free (NVSHMEM's `nvshmem_ptr` is called for other PEs).
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_local_ptr(
    rank: c_int,
    raw: *const c_void,
    len: usize,
    local: *mut *mut c_void,
    sym_addr: *mut *mut c_void,
    pe: *mut c_int,
) -> Status {
    nonnull(raw, "raw")?;
    nonnull(local, "local")?;
    let (sym, p, mapped) = crate::table::local_mapping::local_ptr(rank, raw as usize, len)?;
    // SAFETY: non-NULL caller storage; the optional outputs are checked.
    unsafe {
        local.write(mapped.unwrap_or(0) as *mut c_void);
        if !sym_addr.is_null() {
            sym_addr.write(sym as *mut c_void);
        }
        if !pe.is_null() {
            pe.write(p);
        }
    }
    Ok(())
}

/// The symmetric address (in the local heap) and PE of the address `raw` on rank `rank`.
///
/// Statuses: OK; NULL_ARGUMENT; TABLE_NOT_SET (never runs discovery); BAD_RANK; OUT_OF_HEAP (`raw`
/// outside the heap of the rank's PE). Thread safety: any thread, lock-free, as `to_global_ptr`.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_from_global_ptr(
    rank: c_int,
    raw: *const c_void,
    sym_addr: *mut *mut c_void,
    pe: *mut c_int,
) -> Status {
    // One attempt; on a refusal or a race with a writer the slow path retries or says why.
    if !raw.is_null() && !sym_addr.is_null() && !pe.is_null() {
        if let Some((sym, p)) = TABLE.try_from_global(rank, raw as usize) {
            // SAFETY: non-NULL caller storage.
            unsafe {
                sym_addr.write(sym as *mut c_void);
                pe.write(p);
            }
            return Status::Ok;
        }
    }
    from_global_ptr_slow(rank, raw, sym_addr, pe)
}

#[cold]
#[inline(never)]
#[export(name = "upcxx_extra_nvshmem_from_global_ptr")]
extern "C" fn from_global_ptr_slow(rank: c_int, raw: *const c_void, sym_addr: *mut *mut c_void, pe: *mut c_int) -> Status {
    nonnull(raw, "raw")?;
    nonnull(sym_addr, "sym_addr")?;
    nonnull(pe, "pe")?;
    let (sym, p) = TABLE.from_global(rank, raw as usize)?;
    // SAFETY: non-NULL caller storage.
    unsafe {
        sym_addr.write(sym as *mut c_void);
        pe.write(p);
    }
    Ok(())
}
