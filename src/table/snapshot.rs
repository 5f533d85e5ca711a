//! The translations, each a pure function of one immutable [`Snapshot`] of the table (the local
//! heap, and for every PE its UPC++ rank and heap base, and rank -> PE): no atomics but the
//! snapshot's own, no lock, no allocation. How a snapshot is published and read is
//! [`super::translation`]; why one refused, [`super::errors`].
//!
//! Translation is by offset: `raw = base[pe] + (sym - my_base)` and back, so nothing assumes the
//! bases are equal (they differ per PE when NVSHMEM runs without CUDA VMM). Every translation is
//! bounded by the extent (`set_extent`) when one is set, else by the heap's size.
//!
//! Storage is compressed: with uniform bases and PE == rank the table holds no array; otherwise
//! at most 16 bytes per PE (8 for the base, 4 for PE -> rank, 4 for rank -> PE), each array
//! present only when it is not uniform / the identity ([`Peers`](super::peers::Peers) decides,
//! after checking the entries).
//!
//! Each direction has one translation ([`Snapshot::sym_to_pe`], [`Snapshot::rank_to_sym`]), a pure
//! function of one snapshot: the hot paths make one read with it, the slow paths read again and,
//! when it refuses, explain why from the same snapshot.

use std::sync::atomic::{AtomicI32, Ordering};

/// A span of addresses of this process, `[lo, lo + size)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub lo: usize,
    pub size: usize,
}

/// A translated global pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Global {
    pub rank: i32,
    pub pe: i32,
    /// The CUDA device of the heap: this process's for its own PE, else [`NO_DEVICE`].
    pub device: i32,
    pub raw: usize,
}

/// The device of a global pointer to another PE's heap, and of a table without a heap.
pub(super) const NO_DEVICE: i32 = -1;

/// The table as readers see it, never changed once published. Two cache lines (`align(64)`, 128
/// bytes), shared read-only by every reader: the translations read the first only, the check of
/// a host pointer (`mapped`) the second.
#[repr(C, align(64))]
pub(super) struct Snapshot {
    /// The heap's PE count; 0 when no heap is known (a heap always has at least one PE).
    pub(super) n_pes: u32,
    /// `n_pes` when a peer table is installed, else 0: the hot paths' one bound check of a PE or
    /// a rank.
    pub(super) live_n: u32,
    pub(super) my_pe: i32,
    /// An atomic only so that the compiler loads it unconditionally (a plain load it may move
    /// into a branch, which [`Snapshot::global`] avoids); never stored after publication.
    pub(super) device: AtomicI32,
    pub(super) base: usize,
    /// The bound of every offset: the extent when one is set, else the heap's size; 0 when no
    /// heap is known (so a bare offset check refuses everything then).
    pub(super) limit: usize,
    /// The heap's own size (for messages).
    pub(super) heap_size: usize,
    /// `live_n` entries each, or null: uniform bases, PE == rank.
    pub(super) bases: *const usize,
    pub(super) rank_of_pe: *const u32,
    pub(super) pe_of_rank: *const u32,
    /// The addresses of this process that hold NVSHMEM heap memory: `[lo, lo + size)` covers
    /// the local heap and every peer's heap as NVSHMEM maps it here (with the gaps between
    /// them); (0, 0) without a heap. Published on its own too
    /// ([`Table::span_slot`](super::translation::Table::span_slot)).
    pub(super) mapped: Span,
}

const _: () = assert!(std::mem::size_of::<Snapshot>() == 128);

// SAFETY: a snapshot is immutable once published, and the arrays it points to are immutable and
// outlive it (both belong to the table's `Master`).
#[allow(unsafe_code)]
unsafe impl Sync for Snapshot {}
#[allow(unsafe_code)]
unsafe impl Send for Snapshot {}

/// A refusal of [`Snapshot::rank_to_sym`]: the rank's PE and that PE's base (0, 0 when the rank is
/// not in the table), for the explanation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Refused {
    pub(super) pe: u32,
    pub(super) base: usize,
}

impl Snapshot {
    /// Whether readers would see the same table in both.
    pub(super) fn same(&self, o: &Snapshot) -> bool {
        (self.n_pes, self.live_n, self.my_pe, self.base, self.limit, self.heap_size)
            == (o.n_pes, o.live_n, o.my_pe, o.base, o.limit, o.heap_size)
            && self.device.load(Ordering::Relaxed) == o.device.load(Ordering::Relaxed)
            && (self.bases, self.rank_of_pe, self.pe_of_rank) == (o.bases, o.rank_of_pe, o.pe_of_rank)
            && self.mapped == o.mapped
    }

    /// The offset of `addr` in the local heap, within the bound (no peer table needed).
    #[inline(always)]
    pub(super) fn offset(&self, addr: usize) -> Option<usize> {
        let off = addr.wrapping_sub(self.base);
        (off < self.limit).then_some(off)
    }

    /// The offset of the `len` bytes at `sym` (0: the address alone) in the local heap, inside
    /// the heap and the bound (no peer table needed): `to_offset` toward my own PE.
    #[inline(always)]
    pub(super) fn local_offset(&self, sym: usize, len: usize) -> Option<usize> {
        let off = sym.wrapping_sub(self.base);
        self.within(off, len).then_some(off)
    }

    /// Whether `addr` is in the span of the heaps mapped in this process (one subtraction).
    #[inline(always)]
    pub(super) fn in_mapped_span(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.mapped.lo) < self.mapped.size
    }

    /// Whether `[addr, addr + len)` (`len` 0: `addr` alone; clipped at the end of the address
    /// space) overlaps the span.
    #[inline(always)]
    pub(super) fn overlaps_mapped_span(&self, addr: usize, len: usize) -> bool {
        self.in_mapped_span(addr) || (self.mapped.size > 0 && self.mapped.lo.wrapping_sub(addr) < clip(addr, len))
    }

    /// The PE of rank `rank` (< `live_n`).
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn pe_of(&self, rank: u32) -> u32 {
        if self.pe_of_rank.is_null() {
            rank
        } else {
            cold_path();
            // SAFETY: rank < live_n, the length of the array, whose entries are a permutation of
            // 0..live_n (`Peers::new` checked it).
            unsafe { *self.pe_of_rank.add(rank as usize) }
        }
    }

    /// The translation from an offset on rank `rank` (`from_offset`): the `len` bytes at offset
    /// `off` of that rank's heap (0: the offset alone) inside the bound, as (symmetric address,
    /// PE): `rank_to_sym` without the rank's base.
    #[inline(always)]
    pub(super) fn rank_offset_to_sym(&self, rank: i32, off: usize, len: usize) -> Option<(usize, i32)> {
        if (rank as u32) >= self.live_n || !self.within(off, len) {
            return None;
        }
        Some((self.base.wrapping_add(off), self.pe_of(rank as u32) as i32))
    }

    /// The base of PE `pe`'s heap in its own address space (< `live_n`): through a pointer chosen
    /// by a cmov and valid in both layouts (without a bases array, `base` itself), so uniform and
    /// per-PE bases both run straight through.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn base_of(&self, pe: u32) -> usize {
        // SAFETY: pe < live_n, the length of the array.
        let bp: *const usize = if self.bases.is_null() { &self.base } else { unsafe { self.bases.add(pe as usize) } };
        unsafe { *bp }
    }

    /// The translation toward PE `pe` (`to_global`, `to_offset`): `pe` in the table and the `len`
    /// bytes at `sym` (0: the address alone) inside the local heap and the bound; their offset.
    /// The one bound check of this direction.
    #[inline(always)]
    pub(super) fn sym_to_pe(&self, sym: usize, len: usize, pe: i32) -> Option<usize> {
        if (pe as u32) >= self.live_n {
            return None;
        }
        // `len` is 0 for `to_global`: the bound's second test folds away there.
        self.local_offset(sym, len)
    }

    /// The one bound check: the `len` bytes at heap offset `off` (0: the offset alone) inside
    /// the bound.
    #[inline(always)]
    pub(super) fn within(&self, off: usize, len: usize) -> bool {
        let limit = self.limit;
        off < limit && len <= limit - off
    }

    /// The rank of PE `pe` (< `live_n`, after [`Snapshot::sym_to_pe`]).
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn rank_of(&self, pe: i32) -> u32 {
        if self.rank_of_pe.is_null() {
            pe as u32
        } else {
            cold_path();
            // SAFETY: pe < live_n, the length of the array.
            unsafe { *self.rank_of_pe.add(pe as usize) }
        }
    }

    /// `to_global`: `sym` (an address in my heap) on PE `pe`.
    #[inline(always)]
    pub(super) fn to_global(&self, sym: usize, pe: i32) -> Option<Global> {
        self.sym_to_pe(sym, 0, pe).map(|off| self.global(sym, off, pe))
    }

    /// `to_offset`: the rank of PE `pe` and the offset of the `len` bytes at `sym`.
    #[inline(always)]
    pub(super) fn to_offset(&self, sym: usize, len: usize, pe: i32) -> Option<(i32, usize)> {
        self.sym_to_pe(sym, len, pe).map(|off| (self.rank_of(pe) as i32, off))
    }

    /// `sym` (at offset `off` in the local heap, after [`Snapshot::sym_to_pe`]) on PE `pe`.
    #[inline(always)]
    #[allow(unsafe_code)]
    fn global(&self, sym: usize, off: usize, pe: i32) -> Global {
        // Uniform bases: the answer is `sym` itself. The per-PE arrays are behind `cold_path`, so
        // the uniform layout (CUDA VMM's default: one base everywhere, PE == rank) runs straight
        // through and a per-PE array costs a jump out and back.
        let raw = if self.bases.is_null() {
            sym
        } else {
            cold_path();
            // SAFETY: pe < live_n, the length of the array.
            unsafe { *self.bases.add(pe as usize) }.wrapping_add(off)
        };
        let rank = self.rank_of(pe);
        // A cmov, not a branch: one on `pe == my_pe` would be mispredicted about once in n_pes
        // calls for random PEs (`device` is read unconditionally: see its field).
        let device = self.device.load(Ordering::Relaxed);
        let device = if pe == self.my_pe { device } else { NO_DEVICE };
        Global { rank: rank as i32, pe, device, raw }
    }

    /// The translation from rank `rank` (`from_global`, `local_ptr`): the `len` bytes at `raw` on
    /// that rank (0: the address alone) inside its PE's heap and the bound, as (symmetric
    /// address, PE). The one bound check of this direction.
    #[inline(always)]
    pub(super) fn rank_to_sym(&self, rank: i32, raw: usize, len: usize) -> std::result::Result<(usize, i32), Refused> {
        let n = self.live_n;
        if (rank as u32) >= n {
            return Err(Refused { pe: 0, base: 0 });
        }
        let pe = self.pe_of(rank as u32);
        let b = self.base_of(pe);
        let off = raw.wrapping_sub(b);
        if !self.within(off, len) {
            return Err(Refused { pe, base: b });
        }
        Ok((self.base.wrapping_add(off), pe as i32))
    }
}

/// Marks the branch it is called in as unlikely, so the compiler lays the other one out as the
/// straight path. `std::hint::cold_path` does this from Rust 1.95; the crate supports 1.85, where
/// a call to an empty `#[cold]` function, inlined, has the same effect.
#[cold]
#[inline(always)]
fn cold_path() {}

/// `len` bytes from `addr`, clipped at the end of the address space.
#[inline(always)]
pub(crate) fn clip(addr: usize, len: usize) -> usize {
    if addr == 0 { len } else { len.min(addr.wrapping_neg()) }
}
