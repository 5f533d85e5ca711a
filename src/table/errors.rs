//! Explanations: why a read refused. Each builds the [`Error`] (status and message naming the
//! call's address, range, rank or PE, and the heap or extent that refused it) from the snapshot
//! the refusing translation ([`super::snapshot`]) read, so the reason given is that read's. All
//! off the hot path.

use super::snapshot::{Refused, Snapshot};
use crate::error::{Error, Status};

pub(super) fn no_heap() -> Error {
    Error::new(Status::TableNotSet, "no heap is known: call upcxx_extra_nvshmem_heap_query or upcxx_extra_nvshmem_attach first")
}

fn no_peers(s: &Snapshot) -> Error {
    Error::new(
        Status::TableNotSet,
        format!(
            "the peer table is not set for heap [0x{:x}, 0x{:x}) of PE {}: call upcxx_extra_nvshmem_set_peers first",
            s.base,
            s.base + s.heap_size,
            s.my_pe
        ),
    )
}

/// The `len` bytes (0: the address alone) at `at` ("0x10", "0x10 on rank 1"), at offset `off` in
/// the heap `[pe_base, pe_base + heap_size)` of `who` ("PE 1"), are refused by the bound: outside
/// the heap, past its end, or past the extent (`set_extent`).
pub(super) fn beyond(at: &str, len: usize, off: usize, pe_base: usize, who: &str, s: &Snapshot) -> Error {
    let range = format!("[0x{pe_base:x}, 0x{:x})", pe_base.wrapping_add(s.heap_size));
    let (what, verb) = if len == 0 { (format!("address {at}"), "runs") } else { (format!("the {len} bytes at {at}"), "run") };
    let message = if off >= s.heap_size {
        format!("address {at} is outside the symmetric heap {range} of {who}")
    } else if len <= s.heap_size - off {
        // Inside the heap, so refused by a smaller extent.
        format!("{what} {verb} past the {} bytes made addressable (set_extent) of {who}'s heap {range}", s.limit)
    } else {
        format!("{what} {verb} past the end of the symmetric heap {range} of {who} (offset {off} of {} bytes)", s.heap_size)
    };
    Error::new(Status::OutOfHeap, message)
}

/// Why [`Snapshot::sym_to_pe`] refused.
#[cold]
pub(super) fn to_error(sym: usize, len: usize, pe: i32, s: &Snapshot) -> Error {
    if s.n_pes == 0 {
        return no_heap();
    }
    if s.live_n == 0 {
        return no_peers(s);
    }
    let off = sym.wrapping_sub(s.base);
    if !s.within(off, len) {
        return beyond(&format!("0x{sym:x}"), len, off, s.base, &format!("PE {}", s.my_pe), s);
    }
    Error::new(Status::BadPe, format!("PE {pe} is not in [0, {}) (address 0x{sym:x})", s.n_pes))
}

/// The refusals every translation from a rank shares, in order: no heap, no peer table, a rank
/// outside the table (`asked` names what was asked of it).
fn rank_refusal(rank: i32, asked: impl FnOnce() -> String, s: &Snapshot) -> Option<Error> {
    if s.n_pes == 0 {
        return Some(no_heap());
    }
    if s.live_n == 0 {
        return Some(no_peers(s));
    }
    ((rank as u32) >= s.n_pes).then(|| Error::new(Status::BadRank, format!("rank {rank} is not in [0, {}) ({})", s.n_pes, asked())))
}

/// Why [`Snapshot::rank_to_sym`] refused.
#[cold]
pub(super) fn from_error(rank: i32, raw: usize, len: usize, r: Refused, s: &Snapshot) -> Error {
    if let Some(e) = rank_refusal(rank, || format!("address 0x{raw:x}"), s) {
        return e;
    }
    let off = raw.wrapping_sub(r.base);
    if off >= s.heap_size {
        let range = format!("[0x{:x}, 0x{:x})", r.base, r.base.wrapping_add(s.heap_size));
        return Error::new(Status::OutOfHeap, format!("address 0x{raw:x} on rank {rank} (PE {}) is outside that PE's heap {range}", r.pe));
    }
    beyond(&format!("0x{raw:x} on rank {rank}"), len, off, r.base, &format!("PE {}", r.pe), s)
}

/// Why [`Snapshot::rank_offset_to_sym`] refused.
#[cold]
pub(super) fn from_offset_error(rank: i32, off: usize, len: usize, s: &Snapshot) -> Error {
    if let Some(e) = rank_refusal(rank, || format!("heap offset {off}"), s) {
        return e;
    }
    let pe = s.pe_of(rank as u32);
    let b = s.base_of(pe);
    beyond(&format!("0x{:x} on rank {rank} (heap offset {off})", b.wrapping_add(off)), len, off, b, &format!("PE {pe}"), s)
}

/// Why [`Snapshot::offset`] refused.
#[cold]
pub(super) fn offset_error(addr: usize, s: &Snapshot) -> Error {
    if s.n_pes == 0 {
        return no_heap();
    }
    beyond(&format!("0x{addr:x}"), 0, addr.wrapping_sub(s.base), s.base, &format!("PE {}", s.my_pe), s)
}

/// Why [`Snapshot::local_offset`] refused.
#[cold]
pub(super) fn local_offset_error(sym: usize, len: usize, s: &Snapshot) -> Error {
    if s.n_pes == 0 {
        return no_heap();
    }
    beyond(&format!("0x{sym:x}"), len, sym.wrapping_sub(s.base), s.base, &format!("PE {}", s.my_pe), s)
}
