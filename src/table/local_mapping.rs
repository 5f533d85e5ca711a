//! Where a UPC++ global address is mapped in this process.
//!
//! NVSHMEM maps the heap of every PE it reaches by P2P (NVLink, PCIe) into each process, and
//! `nvshmem_ptr(sym, pe)` returns that mapping. [`local_ptr`] answers, for (rank, raw address,
//! length): the translation to (symmetric address, PE) through the table, the range check, and
//! the address this process can load and store (or copy to with `cudaMemcpyAsync`) the bytes at;
//! `None` when they are not mapped here (another node, no P2P, a heap attached by hand).

use super::TABLE;
use crate::error::Result;
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
    let Some(lib) = host_library::known().filter(|l| l.api.init_status.is_some() && l.api.ptr.is_some()) else {
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
