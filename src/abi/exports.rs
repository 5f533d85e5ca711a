//! The C ABI's functions and types: marshalling only (policy lives in
//! [`crate::table::process_heap`], [`crate::table`], [`crate::nvshmem`]). Every function is
//! written `#[unsafe(no_mangle)] #[export] pub extern "C" fn upcxx_extra_nvshmem_...`: the
//! `#[export]` macro runs its body inside the panic boundary ([`crate::panic::guarded`]). A
//! body evaluates to the function's return type, or for a status to a `Result<()>` (`?` works; the error is recorded, named after the function). The crate
//! denies `unsafe_code` and only `#[export]` allows the `no_mangle`, so a plain export does not
//! compile; the macro also records each export in the library, which `tests/build_exports.rs`
//! checks. Never `#[allow(unsafe_code)]` in this file: the macro adds it.
//!
//! The hot paths (`to_global_ptr`, `from_global_ptr`, `to_offset`): the body makes one attempt
//! and returns `Status::Ok`, or tail-calls its slow path, a private `#[export(name = ...)]`
//! function (a full boundary, errors named after the export) that retries and says why.
//!
//! The types have Rust names; cbindgen writes their C names (`cbindgen.toml`).

use super::Span;
use crate::error::{Error, Result, Status};
use crate::heap::Source;
use crate::nvshmem::discovery::{self, StateRef};
use crate::table::peers::PeerSpec;
use crate::table::process_heap;
use crate::table::translation::Global;
use crate::table::{Heap, TABLE};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::ptr::addr_of;
use upcxx_extra_nvshmem_macros::export;

/// A description of the local symmetric heap.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HeapInfo {
    /// First byte of the heap on this PE.
    pub base: *mut c_void,
    /// Reserved size in bytes (NVSHMEM's `heap_size`; 128 GiB, 256 GiB from 3.5, under CUDA VMM).
    pub size: usize,
    /// Bytes mapped from `base` now (the heap grows on demand); 0 when unknown.
    pub mapped_size: usize,
    /// This process's PE.
    pub my_pe: c_int,
    /// Number of PEs.
    pub n_pes: c_int,
    /// CUDA device ordinal holding the heap, -1 when unknown.
    pub device: c_int,
    /// NVSHMEM version (major, minor, patch); -1 when unknown or MANUAL.
    pub version_major: c_int,
    pub version_minor: c_int,
    pub version_patch: c_int,
    /// Which resolution step served (output only; `attach` ignores it and reports MANUAL).
    pub source: Source,
}

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

/// Where a resolution step finds NVSHMEM's state (`upcxx_extra_nvshmem_locate`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Location {
    /// The step that found it.
    pub source: Source,
    /// The NVSHMEM host library file (static storage, valid for the life of the process).
    pub library: *const c_char,
    /// Address of the state: host memory for DLSYM/SYMTAB, device memory for CUMODULE.
    pub address: *mut c_void,
    /// Size of the symbol holding the state (0 when unknown).
    pub symbol_size: usize,
    /// The state's version field (0x10000 + its size).
    pub version_field: u32,
    /// True when `address` is a device address (CUMODULE).
    pub is_device_address: bool,
}

#[inline(always)]
fn nonnull<T>(p: *const T, what: &'static str) -> Result<()> {
    if p.is_null() { Err(null_argument(what)) } else { Ok(()) }
}

#[cold]
#[inline(never)]
fn null_argument(what: &str) -> Error {
    Error::new(Status::NullArgument, format!("{what} is NULL"))
}

fn heap_to_info(h: &Heap) -> HeapInfo {
    HeapInfo {
        base: h.base as *mut c_void,
        size: h.size,
        mapped_size: h.mapped_size,
        my_pe: h.my_pe,
        n_pes: h.n_pes,
        device: h.device,
        version_major: h.version.0,
        version_minor: h.version.1,
        version_patch: h.version.2,
        source: h.source,
    }
}

/// Interns a string for the life of the process (a handful of library paths at most).
fn intern(s: &str) -> *const c_char {
    static STRINGS: parking_lot::Mutex<Vec<&'static CStr>> = parking_lot::Mutex::new(Vec::new());
    let mut v = STRINGS.lock();
    if let Some(c) = v.iter().find(|c| c.to_bytes() == s.as_bytes()) {
        return c.as_ptr();
    }
    let c: &'static CStr = Box::leak(CString::new(s.replace('\0', "")).unwrap_or_default().into_boxed_c_str());
    v.push(c);
    c.as_ptr()
}

/// Describes the local symmetric heap: the attached one (source MANUAL) or, otherwise, NVSHMEM's,
/// found, read live and validated now (and published for translation).
///
/// Statuses: OK; NULL_ARGUMENT; NOT_LOADED; NOT_INITIALIZED; UNSUPPORTED_LAYOUT;
/// VALIDATION_FAILED; STEP_UNAVAILABLE (the selected step cannot run here); CUDA_ERROR (step 3);
/// INVALID_ARGUMENT (`UPCXX_EXTRA_NVSHMEM_SOURCE` or `UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW` has
/// a value it does not take: the last error names the variable and the value).
/// Process-wide state; thread safety: any thread (a writer: serialised with the other writers).
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_heap_query(out: *mut HeapInfo) -> Status {
    nonnull(out, "out")?;
    let heap = process_heap::query()?;
    // SAFETY: out is non-NULL and points to caller storage.
    unsafe { out.write(heap_to_info(&heap)) };
    Ok(())
}

/// Describes the heap by hand, skipping discovery (custom builds, tests). Replaces any heap and
/// peer table (call `set_peers` again). The fields of `*info`:
///
/// | field | required | meaning |
/// |---|---|---|
/// | `base` | yes, non-NULL | first byte of this PE's heap |
/// | `size` | yes, > 0, `base + size` must not overflow | the bytes translation accepts: every bound check (`offset`, `to_global_ptr`, `from_global_ptr`, `local_ptr`) uses `size` |
/// | `mapped_size` | no; 0 = unknown | the bytes backed now (at most `size`); reported by `heap_query`, used by the C++ layer for the UPC++ segment, never by the C bound checks |
/// | `my_pe` | yes, in `[0, n_pes)` | this process's PE |
/// | `n_pes` | yes, >= 1 | the number of PEs |
/// | `device` | no; -1 = unknown | CUDA device ordinal holding the heap (the C++ layer needs it) |
/// | `version_*` | no; -1 = unknown | reported back by `heap_query` as given |
/// | `source` | ignored | `heap_query` reports MANUAL |
///
/// Statuses: OK; NULL_ARGUMENT; INVALID_ARGUMENT (base NULL, size 0 or overflowing, mapped_size >
/// size, n_pes < 1); BAD_PE (my_pe out of range). Process-wide state; thread safety: any thread,
/// serialised with the other writers (translation on other threads sees the old or the new heap).
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_attach(info: *const HeapInfo) -> Status {
    nonnull(info, "info")?;
    // SAFETY: field-wise reads; `source` (an enum a caller may have left invalid) is not read.
    let heap = unsafe {
        Heap {
            base: addr_of!((*info).base).read() as usize,
            size: addr_of!((*info).size).read(),
            mapped_size: addr_of!((*info).mapped_size).read(),
            my_pe: addr_of!((*info).my_pe).read(),
            n_pes: addr_of!((*info).n_pes).read(),
            device: addr_of!((*info).device).read(),
            version: (
                addr_of!((*info).version_major).read(),
                addr_of!((*info).version_minor).read(),
                addr_of!((*info).version_patch).read(),
            ),
            source: Source::Manual,
        }
    };
    process_heap::attach(heap)
}

/// Forgets the heap and the peer table (attached or discovered). Twice is harmless.
///
/// Statuses: OK. Process-wide state; thread safety: any thread (a writer; translation on other
/// threads sees the old table or none, never a mix).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_detach() -> Status {
    TABLE.detach();
    Status::Ok
}

/// Limits every translation (`to_global_ptr`, `from_global_ptr`, `local_ptr`, `offset`,
/// `to_offset`) to the first `bytes` of each PE's heap: the part a PGAS layer has made
/// addressable (the C++ layer sets the extent its UPC++ segment covers). An address, or a range's
/// end, past it is OUT_OF_HEAP, and the message names the extent. `0` removes the limit (the
/// default: the heap's own size). Kept by `set_peers` and `set_peers_from_nvshmem` (and by a
/// `heap_query` that finds the same heap); cleared by `detach` and by `attach`, which replace
/// the heap.
///
/// Statuses: OK; TABLE_NOT_SET (no heap is known; never runs discovery); INVALID_ARGUMENT
/// (`bytes` larger than the heap's reserved size). Process-wide state; thread safety: any thread
/// (a writer; translation on other threads sees the old or the new extent, lock-free).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_set_extent(bytes: usize) -> Status {
    TABLE.set_extent(bytes)
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

/// A static description of a status (any integer is accepted: "unknown status" for others).
/// Never NULL. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_strerror(status: c_int) -> *const c_char {
    u32::try_from(status).ok().and_then(Status::from_u32).map_or(c"unknown status".as_ptr(), |s| s.description().as_ptr())
}

/// The detail of the last failure on this thread (names the function, address, heap range, PE).
/// Valid until the next failing call on this thread; "" when nothing has failed. Never NULL.
/// Thread safety: any thread (thread-local).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_last_error() -> *const c_char {
    crate::error::last_error_ptr()
}

/// Selects which resolution step discovery uses (an `upcxx_extra_nvshmem_source_t`: NONE = all
/// in order, DLSYM, SYMTAB or CUMODULE). Overrides `UPCXX_EXTRA_NVSHMEM_SOURCE`.
///
/// Statuses: OK; INVALID_ARGUMENT (not a step: MANUAL, or an unknown value). Process-wide state;
/// thread safety: any thread (affects later discoveries on every thread).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_select_source(source: c_int) -> Status {
    discovery::select(discovery::selection(source)?);
    Ok(())
}

/// Runs one resolution step (`source`, or NONE for the first that works) and says where it
/// finds NVSHMEM's state. Needs no initialised NVSHMEM for DLSYM and SYMTAB.
///
/// Statuses: OK; NULL_ARGUMENT; INVALID_ARGUMENT (not a step); NOT_LOADED; STEP_UNAVAILABLE;
/// NOT_INITIALIZED and CUDA_ERROR (CUMODULE). Reads only; thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_locate(source: c_int, out: *mut Location) -> Status {
    nonnull(out, "out")?;
    let loc = discovery::locate(discovery::selection(source)?)?;
    let (symbol_size, device) = match loc.state {
        StateRef::Host { symbol_size, .. } => (symbol_size.unwrap_or(0), false),
        StateRef::Device { symbol_size, .. } => (symbol_size, true),
    };
    // SAFETY: non-NULL caller storage.
    unsafe {
        out.write(Location {
            source: loc.source,
            library: intern(&loc.library.to_string_lossy()),
            address: loc.state.address() as *mut c_void,
            symbol_size,
            version_field: loc.version_field,
            is_device_address: device,
        })
    };
    Ok(())
}

/// Bytes of heap memory the current peer table holds (0 for uniform bases with PE == rank).
///
/// Statuses: OK; NULL_ARGUMENT; TABLE_NOT_SET (never runs discovery). Thread safety: any thread,
/// lock-free.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_table_bytes(out: *mut usize) -> Status {
    nonnull(out, "out")?;
    let bytes = TABLE
        .table_bytes()
        .ok_or_else(|| Error::new(Status::TableNotSet, "no peer table is set: call upcxx_extra_nvshmem_set_peers first"))?;
    // SAFETY: non-NULL caller storage.
    unsafe { out.write(bytes) };
    Ok(())
}

/// Writes the doctor's report for this process (library, steps, layout check, and, when NVSHMEM
/// is initialised, base, sizes, PE, device, the step that served, validation; a heap attached
/// by hand as such) to `file`.
///
/// Statuses: OK; NULL_ARGUMENT; INVALID_ARGUMENT (the write failed). Thread safety: any thread
/// (it may run discovery, a writer).
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_report(file: *mut libc::FILE) -> Status {
    nonnull(file, "file")?;
    let text = CString::new(crate::doctor::report::in_process().to_text().replace('\0', "")).unwrap_or_default();
    // SAFETY: caller's open FILE*.
    if unsafe { libc::fputs(text.as_ptr(), file) } < 0 {
        crate::fail!(InvalidArgument, "writing the report to the FILE* failed");
    }
    Ok(())
}

/// Like `upcxx_extra_nvshmem_report`, into `buf` (`len` bytes, NUL-terminated). `*needed`
/// (optional) receives the size including the NUL.
///
/// Statuses: OK; NULL_ARGUMENT (`buf` NULL with `len` > 0); BUFFER_TOO_SMALL (nothing written but
/// `*needed`). Thread safety: as `upcxx_extra_nvshmem_report`.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_report_buffer(buf: *mut c_char, len: usize, needed: *mut usize) -> Status {
    let text = crate::doctor::report::in_process().to_text().replace('\0', "");
    let need = text.len() + 1;
    if !needed.is_null() {
        // SAFETY: non-NULL caller storage.
        unsafe { needed.write(need) };
    }
    if buf.is_null() && len > 0 {
        crate::fail!(NullArgument, "buf is NULL but len is {len}");
    }
    if len < need {
        crate::fail!(BufferTooSmall, "the report needs {need} bytes, the buffer has {len}");
    }
    // SAFETY: buf has len >= need bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, buf, text.len());
        buf.add(text.len()).write(0);
    }
    Ok(())
}

/// This library's version, e.g. "0.1.0" (the header's `UPCXX_EXTRA_NVSHMEM_VERSION_STRING` is the
/// version it was generated with). Never NULL. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_version() -> *const c_char {
    static V: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => c"",
    };
    V.as_ptr()
}

// ---- NVSHMEM's host library, for the C++ layer's nvshmem_init() ------------------------------

/// NVSHMEM's host library as `upcxx_extra_nvshmem_nvshmem_load` finds it, read live.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NvshmemInfo {
    /// The host library's file (static storage, valid for the life of the process).
    pub library: *const c_char,
    /// NVSHMEM's release (major, minor, patch), from `nvshmem_info_get_name`: the version
    /// `heap_query` reports too.
    pub version_major: c_int,
    pub version_minor: c_int,
    pub version_patch: c_int,
    /// `nvshmemx_init_status()`: 0 not initialised, 1 bootstrapped, 2 and up initialised.
    pub init_status: c_int,
    /// This process's PE (`nvshmem_my_pe`) once NVSHMEM is bootstrapped; -1 before.
    pub my_pe: c_int,
    /// The number of PEs (`nvshmem_n_pes`) once NVSHMEM is bootstrapped; -1 before.
    pub n_pes: c_int,
}

/// An NVSHMEM unique id (`nvshmemx_uniqueid_t`, version 1: 128 bytes) as opaque bytes: made on
/// one process by `upcxx_extra_nvshmem_nvshmem_get_uniqueid`, sent to the others as it is.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UniqueId {
    pub bytes: [u8; 128],
}

const _: () = assert!(std::mem::size_of::<UniqueId>() == crate::nvshmem::init::UNIQUEID_BYTES);

fn nvshmem_info(host: &crate::nvshmem::init::Host) -> NvshmemInfo {
    let st = host.state();
    NvshmemInfo {
        library: intern(&host.lib.path.to_string_lossy()),
        version_major: host.version.0,
        version_minor: host.version.1,
        version_patch: host.version.2,
        init_status: st.init_status,
        my_pe: st.my_pe,
        n_pes: st.n_pes,
    }
}

/// Finds NVSHMEM's host library, loading it when it is not in the process yet: the one already
/// in the process (the program links it, or loaded it), else `libnvshmem_host.so.3` from the
/// loader's search path, else `$NVSHMEM_HOME/lib/libnvshmem_host.so.3` (loaded `RTLD_NOW |
/// RTLD_GLOBAL`, never unloaded). Checks that it has every function initialisation needs and is
/// NVSHMEM 3.x. `*out` (optional, may be NULL) receives its file, release, init status, PE and
/// PE count, read now. Every `upcxx_extra_nvshmem_nvshmem_*` function finds the library this way.
///
/// Statuses: OK; NOT_LOADED (no library found or loadable: the last error lists what was tried;
/// a function missing; not NVSHMEM 3.x); INVALID_ARGUMENT (`NVSHMEM_HOME`, needed because the
/// library was not found by its name, is not UTF-8). Process-wide state (a library loaded stays loaded);
/// thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_nvshmem_load(out: *mut NvshmemInfo) -> Status {
    let host = crate::nvshmem::init::host()?;
    if !out.is_null() {
        // SAFETY: non-NULL caller storage.
        unsafe { out.write(nvshmem_info(&host)) };
    }
    Ok(())
}

/// A unique id for NVSHMEM's unique-id bootstrap (`nvshmemx_get_uniqueid`), made on the one
/// process that then sends it to every process of the job (NVSHMEM opens a listening socket).
///
/// Statuses: OK; NULL_ARGUMENT; NOT_LOADED (as `nvshmem_load`); NOT_INITIALIZED (NVSHMEM refused:
/// the message has NVSHMEM's status). `*out` is written only on OK. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_nvshmem_get_uniqueid(out: *mut UniqueId) -> Status {
    nonnull(out, "out")?;
    let bytes = crate::nvshmem::init::host()?.get_uniqueid()?;
    // SAFETY: non-NULL caller storage.
    unsafe { out.write(UniqueId { bytes }) };
    Ok(())
}

/// Initialises NVSHMEM's host library with the unique-id bootstrap as PE `rank` of `n_ranks`
/// (`nvshmemx_set_attr_uniqueid_args`, `nvshmemx_hostlib_init_attr`) on the CUDA context current
/// on the calling thread, then checks that NVSHMEM is initialised as that PE of that many.
/// Collective: every one of the `n_ranks` processes calls it with the same id (NVSHMEM's
/// bootstrap waits for them). A program with NVSHMEM kernels initialises through NVSHMEM's device
/// library instead (the C++ layer does so when the program registered it), then calls
/// `upcxx_extra_nvshmem_nvshmem_check_init`.
///
/// Statuses: OK; NULL_ARGUMENT; INVALID_ARGUMENT (`n_ranks` < 1, `rank` not in `[0, n_ranks)`);
/// NOT_LOADED (as `nvshmem_load`); NOT_INITIALIZED (NVSHMEM returned an error, or is not
/// initialised as that PE afterwards: the message has NVSHMEM's status, release and file).
/// Process-wide state; thread safety: one thread of the process, the only one initialising or
/// finalising NVSHMEM; the one function here that waits on other processes.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_nvshmem_init(id: *const UniqueId, rank: c_int, n_ranks: c_int) -> Status {
    nonnull(id, "id")?;
    let host = crate::nvshmem::init::host()?;
    // SAFETY: non-NULL caller storage of a unique id (read by value: any alignment).
    let id = unsafe { std::ptr::read_unaligned(id) };
    host.init(&id.bytes, rank, n_ranks)
}

/// Checks that NVSHMEM is initialised as PE `rank` of `n_ranks` (e.g. after initialising it
/// through NVSHMEM's device library).
///
/// Statuses: OK; NOT_LOADED (as `nvshmem_load`); NOT_INITIALIZED (not initialised, or as another
/// PE or PE count: the message says which). Reads only; thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_nvshmem_check_init(rank: c_int, n_ranks: c_int) -> Status {
    crate::nvshmem::init::host()?.expect_initialized(rank, n_ranks)
}

/// Finalises NVSHMEM's host library (`nvshmemx_hostlib_finalize`) when NVSHMEM is initialised;
/// nothing when it is not (twice is harmless), nor when it is only bootstrapped, as a failed
/// `nvshmem_init` can leave it (NVSHMEM's finalisation would abort the process there). For NVSHMEM initialised through
/// `upcxx_extra_nvshmem_nvshmem_init`; NVSHMEM initialised through its device library is finalised
/// by the device library. Destroy the heap's users first (`detach`).
///
/// Statuses: OK; NOT_LOADED (as `nvshmem_load`). Process-wide state; thread safety: as
/// `nvshmem_init` (collective as NVSHMEM's finalisation is).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_nvshmem_finalize() -> Status {
    crate::nvshmem::init::host()?.finalize();
    Ok(())
}

/// The PE/rank agreement: `pe_of_rank[r]` is the NVSHMEM PE of UPC++ rank `r` (`n_ranks`
/// entries), `n_pes_of_rank[r]` the PE count NVSHMEM reports on rank `r` (optional, may be NULL:
/// every rank's is taken as `n_ranks`). NVSHMEM's PEs and the ranks must be the same processes:
/// every PE count `n_ranks`, every PE in `[0, n_ranks)`, each rank a different PE. The first
/// failing rank decides; `*failed_rank` (optional) receives it (-1 on OK), and the message names
/// it. The same check as `set_peers`' permutation check (one check, rank -> PE here).
///
/// Statuses: OK; NULL_ARGUMENT (`pe_of_rank`); INVALID_ARGUMENT (`n_ranks` < 1, a PE count that is
/// not `n_ranks`); BAD_PE (a PE out of range, or reported by two ranks). No state; thread safety:
/// any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_check_pe_map(
    n_ranks: c_int,
    pe_of_rank: *const c_int,
    n_pes_of_rank: *const c_int,
    failed_rank: *mut c_int,
) -> Status {
    let set_failed = |r: c_int| {
        if !failed_rank.is_null() {
            // SAFETY: non-NULL caller storage.
            unsafe { failed_rank.write(r) };
        }
    };
    set_failed(-1);
    nonnull(pe_of_rank, "pe_of_rank")?;
    if n_ranks < 1 {
        crate::fail!(InvalidArgument, "n_ranks is {n_ranks}");
    }
    let n = n_ranks as usize;
    // SAFETY: the caller passes n_ranks entries (each array).
    let pes = unsafe { std::slice::from_raw_parts(pe_of_rank, n) };
    let counts = (!n_pes_of_rank.is_null()).then(|| unsafe { std::slice::from_raw_parts(n_pes_of_rank, n) });
    crate::table::peers::check_pe_map(pes, counts).map_err(|(rank, e)| {
        set_failed(rank as c_int);
        e
    })
}

/// One copy of a batch (`upcxx_extra_nvshmem_copy_batch`): `bytes` from `src` to `dst`, both
/// device memory this process maps (its own, or a peer's heap through NVSHMEM's P2P mapping).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CopyDesc {
    /// First byte read.
    pub src: *const c_void,
    /// First byte written.
    pub dst: *mut c_void,
    /// Bytes copied (0: nothing).
    pub bytes: usize,
}

/// The limits of `upcxx_extra_nvshmem_copy_batch` (C: `UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyBatch {
    /// The most copies one call moves.
    Max = 128,
}
const _: () = assert!(CopyBatch::Max as usize == crate::cuda::BATCH_MAX);
const BATCH_MAX: usize = CopyBatch::Max as usize;

/// Enqueues `count` copies (1 to `UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX`) on CUDA stream `stream` of
/// device `device` as one kernel launch: ordered after the work queued on `stream` so far, before
/// what is queued after; the copies of one batch run concurrently (their ranges must not overlap
/// each other's destinations). The library's kernel is JIT-compiled for the GPU by the driver at
/// the first call in each context (CUDA 12.0 or later). `stream` is a `cudaStream_t` of `device`
/// (NULL: its legacy default stream). The C++ layer's `nvshmem_heap::copy` batches its small copies
/// through this; a C program may call it too.
///
/// Statuses: OK (enqueued; CUDA reports the copies' outcome on the stream, as for a
/// `cudaMemcpyAsync`); NULL_ARGUMENT (`copies`, or an end of a copy with `bytes` > 0);
/// INVALID_ARGUMENT (`count` 0 or above the maximum); CUDA_ERROR (no driver, the device's
/// context, or loading or launching the kernel failed: nothing was enqueued). The last error
/// names the device and the failing driver call. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_copy_batch(
    device: c_int,
    stream: *mut c_void,
    copies: *const CopyDesc,
    count: usize,
) -> Status {
    nonnull(copies, "copies")?;
    if count == 0 || count > BATCH_MAX {
        crate::fail!(InvalidArgument, "count is {count} (a batch holds 1 to {BATCH_MAX} copies)");
    }
    // SAFETY: the caller passes `count` descriptors.
    let given = unsafe { std::slice::from_raw_parts(copies, count) };
    let mut batch = [crate::cuda::BatchCopy::default(); crate::cuda::BATCH_MAX];
    for (i, (c, b)) in given.iter().zip(batch.iter_mut()).enumerate() {
        if c.bytes > 0 && (c.src.is_null() || c.dst.is_null()) {
            crate::fail!(NullArgument, "copies[{i}] has a NULL end and {} bytes", c.bytes);
        }
        *b = crate::cuda::BatchCopy { src: c.src as usize, dst: c.dst as usize, bytes: c.bytes };
    }
    crate::cuda::copy_batch(device, stream as usize, &mut batch, count)
        .map_err(|m| Error::new(Status::CudaError, format!("device {device}: {m}")))
}

/// Makes CUDA stream `stream` of device `device` wait, on the GPU, until the 32-bit word at `addr`
/// is at least `value` in wrapping order (`(int32_t)(*addr - value) >= 0`): the work queued on
/// `stream` after this call runs once a host thread has written such a value (or another stream
/// has). `addr` is host memory mapped for the device (`cudaHostAlloc(..., cudaHostAllocMapped)`;
/// its device address) or device memory. Nothing waits on the host. The C++ layer's
/// `heap.copy_on_stream` makes a stream wait this way for a copy that `upcxx::copy` moves (its
/// completion, run at UPC++ progress, writes the word); a C program may call it too. A word
/// nobody writes leaves the stream waiting for ever: write it on every path.
///
/// Statuses: OK (enqueued); NULL_ARGUMENT (`addr`); CUDA_ERROR (no driver, the device's context,
/// or `cuStreamWaitValue32` failed: nothing was enqueued; the last error names the device and
/// the call). Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_stream_wait_value32(device: c_int, stream: *mut c_void, addr: *const c_void, value: u32) -> Status {
    nonnull(addr, "addr")?;
    crate::cuda::stream_wait_value32(device, stream as usize, addr as usize, value)
        .map_err(|m| Error::new(Status::CudaError, format!("device {device}: {m}")))
}
