//! Where a UPC++ global address is mapped in this process.
//!
//! NVSHMEM maps the heap of every PE it reaches by P2P (NVLink, PCIe) into each process, and
//! `nvshmem_ptr(sym, pe)` returns that mapping. [`local_ptr`] answers, for (rank, raw address,
//! length): the translation to (symmetric address, PE) through the table, the range check, and
//! the address this process can load and store (or copy to with `cudaMemcpyAsync`) the bytes at;
//! `None` when they are not mapped here (another node, no P2P, a heap attached by hand).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::TABLE;
use crate::abi::status::Result;
use crate::nvshmem::host_library;

type PtrFn = unsafe extern "C" fn(*const c_void, c_int) -> *mut c_void;
type StatusFn = unsafe extern "C" fn() -> c_int;

/// `nvshmem_ptr` and `nvshmemx_init_status` of the loaded NVSHMEM, once found (0: not yet).
static PTR: AtomicUsize = AtomicUsize::new(0);
static INIT_STATUS: AtomicUsize = AtomicUsize::new(0);
/// The loaded objects were searched and held no NVSHMEM: not searched again (the search takes
/// the loader's lock) until a heap is attached or discovered anew ([`forget_absence`]).
static ABSENT: AtomicBool = AtomicBool::new(false);
/// How many times the loaded objects were searched for NVSHMEM (for the tests).
static SEARCHES: AtomicUsize = AtomicUsize::new(0);

/// A new heap is published: NVSHMEM may have been loaded since the last search.
pub(crate) fn forget_absence() {
    ABSENT.store(false, Ordering::Release);
}

/// How many times [`local_ptr`] searched the loaded objects for NVSHMEM in this process.
pub fn nvshmem_searches() -> usize {
    SEARCHES.load(Ordering::Relaxed)
}

#[allow(unsafe_code)]
fn public_api() -> Option<(StatusFn, PtrFn)> {
    let (s, p) = (INIT_STATUS.load(Ordering::Acquire), PTR.load(Ordering::Acquire));
    if s != 0 && p != 0 {
        // SAFETY: stored below from the same function types.
        return Some(unsafe { (std::mem::transmute::<usize, StatusFn>(s), std::mem::transmute::<usize, PtrFn>(p)) });
    }
    if ABSENT.load(Ordering::Acquire) {
        return None;
    }
    SEARCHES.fetch_add(1, Ordering::Relaxed);
    let Some(lib) = host_library::find_loaded() else {
        ABSENT.store(true, Ordering::Release);
        return None;
    };
    let (s, p) = (lib.api.init_status?, lib.api.ptr?);
    // The library stays loaded (NVSHMEM is never unloaded while its heap is in use).
    INIT_STATUS.store(s as usize, Ordering::Release);
    PTR.store(p as usize, Ordering::Release);
    Some((s, p))
}

/// The bytes `[raw, raw + len)` on UPC++ rank `rank`: their symmetric address and PE, and the
/// address they are mapped at in this process (None: not mapped here). `len` 0 checks `raw`
/// alone.
#[allow(unsafe_code)]
pub fn local_ptr(rank: i32, raw: usize, len: usize) -> Result<(usize, i32, Option<usize>)> {
    // The translation, the range check (heap and extent) and my PE, from one read of the table.
    let (sym, pe, my_pe) = TABLE.from_global_range(rank, raw, len)?;
    if pe == my_pe {
        return Ok((sym, pe, Some(sym)));
    }
    let Some((init_status, ptr)) = public_api() else {
        return Ok((sym, pe, None)); // a heap attached by hand: no NVSHMEM mapping is known
    };
    // SAFETY: public NVSHMEM host functions; nvshmem_ptr only looks the address up.
    if unsafe { init_status() } == 0 {
        crate::fail!(NotInitialized, "NVSHMEM is not initialised (or already finalised): no mapping of PE {pe} to ask for");
    }
    let last = sym + len.max(1) - 1;
    let (p0, p1) = unsafe { (ptr(sym as *const c_void, pe) as usize, ptr(last as *const c_void, pe) as usize) };
    // Mapped only when both ends are, contiguously (NVSHMEM maps a peer's heap as one range).
    let mapped = (p0 != 0 && p1 != 0 && p1.wrapping_sub(p0) == last - sym).then_some(p0);
    Ok((sym, pe, mapped))
}
