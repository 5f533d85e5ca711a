//! The heap: the local symmetric heap as the library knows it, discovered (`heap_query`) or
//! described by hand (`attach`); forgetting it (`detach`); the bytes of each PE's heap that
//! translation may address (`set_extent`).

use super::marshal::nonnull;
use crate::error::Status;
use crate::heap::Source;
use crate::table::process_heap;
use crate::table::{Heap, TABLE};
use std::ffi::{c_int, c_void};
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
