//! Where a UPC++ global address is mapped in this process.
//!
//! NVSHMEM maps the heap of every PE it reaches by P2P (NVLink, PCIe) into each process, and
//! `nvshmem_ptr(sym, pe)` returns that mapping. [`local_ptr`] answers, for (rank, raw address,
//! length): the translation to (symmetric address, PE) through the table, the range check, and
//! the address this process can load and store (or copy to with `cudaMemcpyAsync`) the bytes at;
//! `None` when they are not mapped here (another node, no P2P, a heap attached by hand).

use super::TABLE;
use crate::error::Result;
use crate::heap::Heap;
use crate::nvshmem::host_library;

/// A new heap is published: NVSHMEM may have been loaded since the last search.
pub(crate) fn forget_absence() {
    host_library::forget_absence();
}

/// How many times [`local_ptr`] searched the loaded objects for NVSHMEM in this process.
pub fn nvshmem_searches() -> usize {
    host_library::known_searches()
}

/// The bytes `[raw, raw + len)` on UPC++ rank `rank`: their symmetric address and PE, and the
/// address they are mapped at in this process (None: not mapped here). `len` 0 checks `raw`
/// alone.
pub fn local_ptr(rank: i32, raw: usize, len: usize) -> Result<(usize, i32, Option<usize>)> {
    // The translation, the range check (heap and extent) and my PE, from one read of the table.
    let (sym, pe, my_pe) = TABLE.from_global_range(rank, raw, len)?;
    if pe == my_pe {
        return Ok((sym, pe, Some(sym)));
    }
    let Some(lib) = ptr_library() else {
        return Ok((sym, pe, None)); // a heap attached by hand: no NVSHMEM mapping is known
    };
    if lib.init_status() == Some(0) {
        crate::fail!(NotInitialized, "NVSHMEM is not initialised (or already finalised): no mapping of PE {pe} to ask for");
    }
    let last = sym + len.max(1) - 1;
    let q = |a: usize| lib.nvshmem_ptr(a, pe).unwrap_or(0);
    let (p0, p1) = (q(sym), q(last));
    // Mapped only when both ends are, contiguously (NVSHMEM maps a peer's heap as one range).
    let mapped = (p0 != 0 && p1 != 0 && p1.wrapping_sub(p0) == last - sym).then_some(p0);
    Ok((sym, pe, mapped))
}

/// The NVSHMEM host library when it has `nvshmem_ptr` and `nvshmemx_init_status`: what answers
/// where a peer's heap is mapped here. None for a heap attached by hand without NVSHMEM.
fn ptr_library() -> Option<&'static host_library::LoadedLibrary> {
    host_library::known().filter(|l| l.api.init_status.is_some() && l.api.ptr.is_some())
}

/// Where NVSHMEM maps each other PE's heap in this process, `(pe, address)`, for the PEs it maps
/// (`nvshmem_ptr` of the symmetric address `base`); nothing when NVSHMEM is not initialised.
fn peer_mappings(base: usize, n_pes: i32, my_pe: i32) -> impl Iterator<Item = (i32, usize)> {
    let initialised = ptr_library().filter(|l| l.init_status() != Some(0));
    initialised.into_iter().flat_map(move |lib| {
        (0..n_pes).filter(move |&pe| pe != my_pe).filter_map(move |pe| lib.nvshmem_ptr(base, pe).filter(|&at| at != 0).map(|at| (pe, at)))
    })
}

/// `[lo, lo + span)`: the addresses of this process holding `heap` and every peer's heap as
/// NVSHMEM maps it here (`nvshmem_ptr(base, pe)`; NVSHMEM's heap is symmetric, so each mapping
/// is `heap.size` bytes). None when NVSHMEM maps no peer's heap here (no P2P, another node, no
/// NVSHMEM): the local heap alone then.
pub(crate) fn mapped_span(heap: &Heap) -> Option<(usize, usize)> {
    let (mut lo, mut hi, mut any) = (heap.base, heap.base.saturating_add(heap.size), false);
    for (_, at) in peer_mappings(heap.base, heap.n_pes, heap.my_pe) {
        (lo, hi, any) = (lo.min(at), hi.max(at.saturating_add(heap.size)), true);
    }
    any.then_some((lo, hi - lo))
}

/// Refuses a pointer that a caller passes as its own host memory when it is NVSHMEM heap memory:
/// in the local heap, or in a peer's heap as NVSHMEM maps it here. One read and one subtraction
/// for an address outside the span of those heaps; the heaps are asked only inside it.
#[inline(always)]
pub fn check_host_ptr(addr: usize) -> Result<()> {
    if !TABLE.in_mapped_span(addr) {
        return Ok(());
    }
    refuse_heap_range(addr, 0)
}

/// [`check_host_ptr`] for the whole range `[addr, addr + len)` (`len` 0: `addr` alone): refused
/// when any byte of it is in the local heap or in a peer's heap as NVSHMEM maps it here. A range
/// that runs past the end of the address space is clipped there.
#[inline(always)]
pub fn check_host_range(addr: usize, len: usize) -> Result<()> {
    if !TABLE.overlaps_mapped_span(addr, len) {
        return Ok(());
    }
    refuse_heap_range(addr, len)
}

/// Whether `[addr, addr + len)` (`len` 0: `addr` alone) overlaps `[lo, lo + size)`, and the first
/// byte of the range inside it, without overflow.
fn overlap(addr: usize, len: usize, lo: usize, size: usize) -> Option<usize> {
    if addr.wrapping_sub(lo) < size {
        Some(addr)
    } else if size > 0 && lo.wrapping_sub(addr) < super::snapshot::clip(addr, len) {
        Some(lo)
    } else {
        None
    }
}

#[cold]
#[inline(never)]
fn refuse_heap_range(addr: usize, len: usize) -> Result<()> {
    let Some(v) = TABLE.view() else { return Ok(()) };
    let range = |first: usize| {
        if len == 0 || first == addr {
            format!("address 0x{addr:x}")
        } else {
            format!("the range [0x{addr:x}, +{len}) (its byte at 0x{first:x})")
        }
    };
    if let Some(first) = overlap(addr, len, v.base, v.size) {
        let off = first - v.base;
        crate::fail!(
            InvalidArgument,
            "{} is in the local NVSHMEM heap [0x{:x}, 0x{:x}) of PE {} (heap offset {off})",
            range(first),
            v.base,
            v.base + v.size,
            v.my_pe
        );
    }
    for (pe, at) in peer_mappings(v.base, v.n_pes, v.my_pe) {
        if let Some(first) = overlap(addr, len, at, v.size) {
            let off = first - at;
            let rank = TABLE.rank_of_pe(pe).map_or(String::new(), |r| format!(", UPC++ rank {r}"));
            crate::fail!(
                InvalidArgument,
                "{} is in the NVSHMEM heap of PE {pe}{rank} as this process maps it (nvshmem_ptr: [0x{at:x}, \
                 0x{:x}), heap offset {off})",
                range(first),
                at.saturating_add(v.size)
            );
        }
    }
    Ok(())
}
