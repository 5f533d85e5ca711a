//! The offset-translation table: the local heap, and for every PE its UPC++ rank and heap base,
//! and rank -> PE, as readers see it: the published [`Snapshot`], how it is read and how writers
//! replace it. The translations themselves are pure functions of one snapshot (`snapshot.rs`);
//! why one refused is built from that snapshot too (`errors.rs`).
//!
//! Concurrency: readers see one immutable [`Snapshot`] behind an atomic pointer. A read is one
//! Acquire load of that pointer and the translation from the snapshot it names: no lock, no
//! retry. Writers (attach, detach, discovery, set_peers, set_extent) serialise on a mutex, and
//! each change is one publication ([`Table::write`]): a new snapshot, stored with Release. A
//! replaced snapshot stays allocated as long as the table (a reader may still be translating
//! from it), so a table keeps one snapshot (one cache line) per publication that changed what
//! readers see, and each array once per distinct content; the process's table is never dropped.
//!
//! The protocol is model-checked with loom (`tests/loom/`); under `--cfg loom` this file takes
//! loom's atomics and mutex (through the sync facade, `crate::sync`), and every read holds a loom
//! cell of its snapshot that freeing the snapshot writes, so a snapshot freed while a reader may
//! hold it is a reported causality violation. The snapshot's translations and the explanations
//! need no loom type.

use super::errors::{from_error, from_offset_error, local_offset_error, no_heap, offset_error, to_error};
use super::peers::Peers;
pub use super::snapshot::{Global, Span};
use super::snapshot::{NO_DEVICE, Snapshot};
use crate::error::Result;
use crate::heap::{Heap, Source};
use crate::sync::{AtomicPtr, Mutex, MutexGuard, Ordering};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ptr::null;

/// What the table holds now, from one read (`Table::view`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub base: usize,
    /// The heap's reserved size.
    pub size: usize,
    /// The bound of every translation: the extent (`set_extent`), else the heap's size.
    pub limit: usize,
    pub my_pe: i32,
    pub n_pes: i32,
    pub device: i32,
    /// Whether a peer table is installed.
    pub peers: bool,
    /// `[lo, lo + span)`: the addresses of this process holding the local heap and the peers'
    /// heaps as NVSHMEM maps them here.
    pub mapped: (usize, usize),
}

/// A snapshot as the table publishes it: under loom with the cell every read holds, the model's
/// view of the snapshot's life (without loom, the snapshot alone).
#[repr(C)]
struct Issued {
    snapshot: Snapshot,
    /// Held by every read, written by the free (the loom model's view of the snapshot's life).
    #[cfg(loom)]
    held: loom::cell::UnsafeCell<()>,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Issued>() == 128);

impl Issued {
    fn new(snapshot: Snapshot) -> Issued {
        Issued {
            snapshot,
            #[cfg(loom)]
            held: loom::cell::UnsafeCell::new(()),
        }
    }
}

/// The snapshot of a table without a heap: what [`TABLE`] starts with.
#[cfg(not(loom))]
static EMPTY: Issued = Issued {
    snapshot: Snapshot {
        n_pes: 0,
        live_n: 0,
        my_pe: 0,
        device: std::sync::atomic::AtomicI32::new(NO_DEVICE),
        base: 0,
        limit: 0,
        heap_size: 0,
        bases: null(),
        rank_of_pe: null(),
        pe_of_rank: null(),
        mapped: Span { lo: 0, size: 0 },
    },
};

/// Arrays kept for the life of a table, each content once: an array never changes once made, so
/// a peer table installed again shares the arrays of its first installation.
struct Kept<T> {
    /// (hash of the content, the array as leaked by `Box::into_raw`).
    arrays: Vec<(u64, *mut [T])>,
}

impl<T: Copy + Eq + Hash> Kept<T> {
    const fn new() -> Self {
        Kept { arrays: Vec::new() }
    }

    /// The kept array holding `values`, made now if none does.
    #[allow(unsafe_code)]
    fn get(&mut self, values: &[T]) -> *const T {
        let mut h = DefaultHasher::new();
        values.hash(&mut h);
        let hash = h.finish();
        // SAFETY: every kept pointer is a live boxed slice (freed only by `drop`).
        if let Some(&(_, p)) = self.arrays.iter().find(|&&(k, p)| k == hash && unsafe { &*p } == values) {
            return p.cast();
        }
        let p = Box::into_raw(values.to_vec().into_boxed_slice());
        self.arrays.push((hash, p));
        p.cast()
    }

    #[cfg(all(test, not(loom)))]
    fn len(&self) -> usize {
        self.arrays.len()
    }
}

impl<T> Drop for Kept<T> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        for &(_, p) in &self.arrays {
            // SAFETY: from Box::into_raw, freed once; the table is being dropped, so no reader is left.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// The writers' side: the heap, the extent, the installed arrays, and everything the table has
/// published (freed with it).
struct Master {
    heap: Option<Heap>,
    /// Whether a peer table is installed (its arrays may all be null).
    peers: bool,
    /// The bytes of each PE's heap made addressable (`set_extent`); 0: the whole heap.
    extent: usize,
    bases: *const usize,
    rank_of_pe: *const u32,
    pe_of_rank: *const u32,
    /// The span of the heaps mapped here that the peer table came with (`Peers::mapped`).
    mapped: Option<(usize, usize)>,
    /// Every snapshot this table published, the current one among them.
    published: Vec<*mut Issued>,
    /// Under loom: the snapshots freed (in the model) before the table, kept allocated until it
    /// goes so that the model's own execution stays defined.
    #[cfg(loom)]
    freed: Vec<*mut Issued>,
    usize_arrays: Kept<usize>,
    u32_arrays: Kept<u32>,
}

// SAFETY: the pointers are to memory the master owns (snapshots, kept arrays), immutable once
// made; the master is only reached under the writers' mutex.
#[allow(unsafe_code)]
unsafe impl Send for Master {}

impl Master {
    const fn new() -> Master {
        Master {
            heap: None,
            peers: false,
            extent: 0,
            bases: null(),
            rank_of_pe: null(),
            pe_of_rank: null(),
            mapped: None,
            published: Vec::new(),
            #[cfg(loom)]
            freed: Vec::new(),
            usize_arrays: Kept::new(),
            u32_arrays: Kept::new(),
        }
    }

    /// Drops the peer table and the extent.
    fn forget_peers(&mut self) {
        self.peers = false;
        self.extent = 0;
        (self.bases, self.rank_of_pe, self.pe_of_rank) = (null(), null(), null());
        self.mapped = None;
    }

    /// What readers must see now.
    fn snapshot(&self) -> Snapshot {
        let h = self.heap;
        let n = h.map_or(0, |h| h.n_pes as u32);
        // The peers' mappings come with a peer table; without one, the local heap alone.
        let (lo, size) = match (h, self.mapped) {
            (Some(_), Some(m)) => m, // `mapped` is set with a peer table and forgotten with it
            (Some(h), _) => (h.base, h.size),
            (None, _) => (0, 0),
        };
        Snapshot {
            n_pes: n,
            live_n: if self.peers && h.is_some() { n } else { 0 },
            my_pe: h.map_or(0, |h| h.my_pe),
            device: std::sync::atomic::AtomicI32::new(h.map_or(NO_DEVICE, |h| h.device)),
            base: h.map_or(0, |h| h.base),
            limit: h.map_or(0, |h| if self.extent != 0 { self.extent } else { h.size }),
            heap_size: h.map_or(0, |h| h.size),
            bases: self.bases,
            rank_of_pe: self.rank_of_pe,
            pe_of_rank: self.pe_of_rank,
            mapped: Span { lo, size },
        }
    }

    /// Frees snapshot `p`, which no reader may hold any more. Under loom the free is a write to
    /// the cell every read holds, so the model reports a reader that may still hold it.
    #[allow(unsafe_code)]
    fn free(&mut self, p: *mut Issued) {
        #[cfg(loom)]
        {
            // SAFETY: p is a snapshot this table published and has not freed.
            unsafe { (*p).held.with_mut(|_| ()) };
            self.freed.push(p);
        }
        // SAFETY: p came from Box::into_raw and is freed once.
        #[cfg(not(loom))]
        drop(unsafe { Box::from_raw(p) });
    }
}

impl Drop for Master {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // The table is being dropped: no reader is left.
        for p in std::mem::take(&mut self.published) {
            self.free(p);
        }
        #[cfg(loom)]
        for p in std::mem::take(&mut self.freed) {
            // SAFETY: from Box::into_raw, deallocated once.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// A translation table (the process has one, [`TABLE`]; tests make their own).
pub struct Table {
    current: Published,
    /// The current snapshot's `mapped`, published after the snapshot: what a caller reads inline
    /// (one Acquire load, then the pair) to tell a host pointer from heap memory without a call.
    span: SpanSlot,
    master: Mutex<Master>,
}

/// The pointer readers load, alone on its cache lines: a writer taking its lock never
/// invalidates the readers' line.
#[repr(align(128))]
struct Published(AtomicPtr<Issued>);

/// The pointer to the current snapshot's span, on its own cache lines as [`Published`].
#[repr(align(128))]
struct SpanSlot(AtomicPtr<Span>);

/// The process's table.
#[cfg(not(loom))]
pub static TABLE: Table = Table::new();

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    #[cfg(not(loom))]
    pub const fn new() -> Table {
        Table {
            current: Published(AtomicPtr::new(&raw const EMPTY as *mut Issued)),
            span: SpanSlot(AtomicPtr::new(&raw const EMPTY.snapshot.mapped as *mut Span)),
            master: Mutex::new(Master::new()),
        }
    }

    /// Under loom a snapshot holds a loom cell, made inside the model: the empty snapshot is the
    /// table's own.
    #[cfg(loom)]
    pub fn new() -> Table {
        let mut master = Master::new();
        let empty = Box::into_raw(Box::new(Issued::new(master.snapshot())));
        master.published.push(empty);
        // SAFETY: `empty` is a live snapshot the master keeps.
        #[allow(unsafe_code)]
        let span = unsafe { &raw mut (*empty).snapshot.mapped };
        Table { current: Published(AtomicPtr::new(empty)), span: SpanSlot(AtomicPtr::new(span)), master: Mutex::new(master) }
    }

    // ---- The read side --------------------------------------------------------------------

    /// The one read: one Acquire load of the published snapshot, then `f` on it.
    #[inline(always)]
    #[allow(unsafe_code)]
    fn read<R>(&self, f: impl FnOnce(&Snapshot) -> R) -> R {
        // SAFETY: the pointer is EMPTY or a snapshot this table published; both live as long as
        // the table, and the Acquire load makes the snapshot's contents visible.
        let p = unsafe { &*self.current.0.load(Ordering::Acquire) };
        #[cfg(loom)]
        return p.held.with(|_| f(&p.snapshot));
        #[cfg(not(loom))]
        f(&p.snapshot)
    }

    /// The hot path of `to_global`: None on any refusal (then [`Table::to_global`] says why).
    #[inline(always)]
    pub fn try_to_global(&self, sym: usize, pe: i32) -> Option<Global> {
        self.read(|s| s.to_global(sym, pe))
    }

    /// The hot path of `from_global`: None on any refusal.
    #[inline(always)]
    pub fn try_from_global(&self, rank: i32, raw: usize) -> Option<(usize, i32)> {
        self.read(|s| s.rank_to_sym(rank, raw, 0).ok())
    }

    /// The hot path of `to_offset`: None on any refusal.
    #[inline(always)]
    pub fn try_to_offset(&self, sym: usize, len: usize, pe: i32) -> Option<(i32, usize)> {
        self.read(|s| s.to_offset(sym, len, pe))
    }

    /// `sym` (an address in my heap) on PE `pe`, or why not (from the same snapshot).
    pub fn to_global(&self, sym: usize, pe: i32) -> Result<Global> {
        self.read(|s| s.to_global(sym, pe).ok_or_else(|| to_error(sym, 0, pe, s)))
    }

    /// The rank of PE `pe` and the offset of `sym` in the local heap, with the `len` bytes at
    /// `sym` (0: the address alone) inside the heap and the bound; or why not.
    pub fn to_offset(&self, sym: usize, len: usize, pe: i32) -> Result<(i32, usize)> {
        self.read(|s| s.to_offset(sym, len, pe).ok_or_else(|| to_error(sym, len, pe, s)))
    }

    /// `raw` (an address on rank `rank`) as `(symmetric address in my heap, PE)`, or why not.
    pub fn from_global(&self, rank: i32, raw: usize) -> Result<(usize, i32)> {
        self.from_global_range(rank, raw, 0).map(|(sym, pe, _)| (sym, pe))
    }

    /// The `len` bytes at `raw` on rank `rank` (0: the address alone) as `(symmetric address in
    /// my heap, PE, my PE)`, or why not: one read (`local_ptr` compares the PE with mine).
    pub fn from_global_range(&self, rank: i32, raw: usize, len: usize) -> Result<(usize, i32, i32)> {
        self.read(|s| match s.rank_to_sym(rank, raw, len) {
            Ok((sym, pe)) => Ok((sym, pe, s.my_pe)),
            Err(r) => Err(from_error(rank, raw, len, r, s)),
        })
    }

    /// The offset of `addr` in the local heap (within the bound), or why not.
    pub fn offset(&self, addr: usize) -> Result<usize> {
        self.read(|s| s.offset(addr).ok_or_else(|| offset_error(addr, s)))
    }

    /// Bytes the current peer table holds (None: no table).
    pub fn table_bytes(&self) -> Option<usize> {
        // rank_of_pe and pe_of_rank are installed together, 4 bytes per PE each.
        let (n, bases, maps) = self.read(|s| (s.live_n as usize, !s.bases.is_null(), !s.rank_of_pe.is_null()));
        (n != 0).then(|| usize::from(bases) * n * 8 + usize::from(maps) * n * 8)
    }

    /// The table as one read sees it; None when no heap is known.
    pub fn view(&self) -> Option<View> {
        self.read(|s| {
            (s.n_pes != 0).then(|| View {
                base: s.base,
                size: s.heap_size,
                limit: s.limit,
                my_pe: s.my_pe,
                n_pes: s.n_pes as i32,
                device: s.device.load(Ordering::Relaxed),
                peers: s.live_n != 0,
                mapped: (s.mapped.lo, s.mapped.size),
            })
        })
    }

    /// The hot path of `local_offset`: None on any refusal.
    #[inline(always)]
    pub fn try_local_offset(&self, sym: usize, len: usize) -> Option<usize> {
        self.read(|s| s.local_offset(sym, len))
    }

    /// The offset of the `len` bytes at `sym` (0: the address alone) in the local heap, inside
    /// the heap and the bound, or why not.
    pub fn local_offset(&self, sym: usize, len: usize) -> Result<usize> {
        self.read(|s| s.local_offset(sym, len).ok_or_else(|| local_offset_error(sym, len, s)))
    }

    /// The hot path of `from_offset`: None on any refusal.
    #[inline(always)]
    pub fn try_from_offset(&self, rank: i32, off: usize, len: usize) -> Option<(usize, i32)> {
        self.read(|s| s.rank_offset_to_sym(rank, off, len))
    }

    /// The `len` bytes at offset `off` of rank `rank`'s heap (0: the offset alone) as (symmetric
    /// address in my heap, PE), or why not.
    pub fn from_offset(&self, rank: i32, off: usize, len: usize) -> Result<(usize, i32)> {
        self.read(|s| s.rank_offset_to_sym(rank, off, len).ok_or_else(|| from_offset_error(rank, off, len, s)))
    }

    /// The address of the pointer to the current span of the local heap and the peers' heaps as
    /// mapped here: an Acquire load of it gives a pair that never changes (each publication
    /// points it at its own snapshot's span, and a snapshot lives as long as the table).
    #[cfg(not(loom))]
    pub fn span_slot(&self) -> *const *const Span {
        self.span.0.as_ptr().cast_const().cast()
    }

    /// Whether `addr` is in the span of the local heap and the peers' heaps as mapped here (one
    /// read, one subtraction): false for every address when no heap is known.
    #[inline(always)]
    pub fn in_mapped_span(&self, addr: usize) -> bool {
        self.read(|s| s.in_mapped_span(addr))
    }

    /// Whether `[addr, addr + len)` (`len` 0: `addr` alone) overlaps the span of the heaps mapped
    /// here.
    pub fn overlaps_mapped_span(&self, addr: usize, len: usize) -> bool {
        self.read(|s| s.overlaps_mapped_span(addr, len))
    }

    /// The UPC++ rank of PE `pe` (None: no peer table, or `pe` not in it).
    pub fn rank_of_pe(&self, pe: i32) -> Option<i32> {
        self.read(|s| ((pe as u32) < s.live_n).then(|| s.rank_of(pe) as i32))
    }

    /// The local heap's base, the bound (extent or size) and the PE, from one read ((0, 0, 0)
    /// when no heap is known).
    pub fn extent(&self) -> (usize, usize, i32) {
        self.read(|s| if s.n_pes == 0 { (0, 0, 0) } else { (s.base, s.limit, s.my_pe) })
    }

    // ---- The write side -------------------------------------------------------------------

    /// The writers' lock.
    fn lock(&self) -> MutexGuard<'_, Master> {
        self.master.lock()
    }

    /// The one way to change the table: `change` edits the master under the writers' lock, then
    /// what readers must see is published as one new snapshot (none when it is the current one).
    /// A change that fails publishes nothing.
    #[allow(unsafe_code)]
    fn write<R>(&self, change: impl FnOnce(&mut Master) -> Result<R>) -> Result<R> {
        let mut m = self.lock();
        let r = change(&mut m)?;
        let next = m.snapshot();
        let old = self.current.0.load(Ordering::Relaxed);
        // SAFETY: as in `read` (only writers store the pointer, under the lock held here).
        if unsafe { &*old }.snapshot.same(&next) {
            return Ok(r);
        }
        let new = Box::into_raw(Box::new(Issued::new(next)));
        m.published.push(new);
        self.current.0.store(new, Ordering::Release);
        // SAFETY: `new` is live (kept in `published`); its span is immutable from here on.
        self.span.0.store(unsafe { &raw mut (*new).snapshot.mapped }, Ordering::Release);
        Ok(r)
    }

    /// Publishes a heap that discovery found: the peer table and the extent stay when it is the
    /// same heap (only its mapped extent changed), and go otherwise.
    pub fn discovered(&self, heap: Heap) {
        let _ = self.write(|m| {
            if !m.heap.is_some_and(|h| h.same_heap(&heap)) {
                m.forget_peers();
            }
            m.heap = Some(heap);
            Ok(())
        });
    }

    /// Replaces the heap with `heap` (described by hand), dropping the peer table and the
    /// extent, in one publication: a reader sees the old heap or the new one, never none.
    pub fn attach(&self, heap: Heap) {
        let _ = self.write(|m| {
            m.heap = Some(heap);
            m.forget_peers();
            Ok(())
        });
    }

    /// Forgets the heap, the peer table and the extent.
    pub fn detach(&self) {
        let _ = self.write(|m| {
            m.heap = None;
            m.forget_peers();
            Ok(())
        });
    }

    /// Forgets the heap only if it came from discovery (NVSHMEM is gone).
    pub fn forget_discovered(&self) {
        let _ = self.write(|m| {
            if m.heap.is_some_and(|h| h.source != Source::Manual) {
                m.heap = None;
                m.forget_peers();
            }
            Ok(())
        });
    }

    /// The heap, if one is known.
    pub fn heap(&self) -> Option<Heap> {
        self.lock().heap
    }

    /// Limits every translation to the first `bytes` of each PE's heap (0: the whole heap).
    pub fn set_extent(&self, bytes: usize) -> Result<()> {
        self.write(|m| {
            let Some(h) = m.heap else { return Err(no_heap()) };
            if bytes > h.size {
                crate::fail!(InvalidArgument, "extent {bytes} exceeds the heap size {} of PE {}", h.size, h.my_pe);
            }
            m.extent = bytes;
            Ok(())
        })
    }

    /// Installs a checked peer table; fails when the current heap is not the one it was checked
    /// against. The extent stays.
    pub fn set_peers(&self, peers: &Peers) -> Result<()> {
        self.write(|m| {
            if !m.heap.is_some_and(|h| h.same_heap(&peers.heap)) {
                crate::fail!(InvalidArgument, "the heap changed while the table was being built");
            }
            m.bases = peers.bases.as_ref().map_or(null(), |b| m.usize_arrays.get(b));
            (m.rank_of_pe, m.pe_of_rank) = match &peers.ranks {
                Some((r, p)) => (m.u32_arrays.get(r), m.u32_arrays.get(p)),
                None => (null(), null()),
            };
            m.peers = true;
            m.mapped = peers.mapped;
            Ok(())
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::peers::PeerSpec;
    use super::*;
    use crate::error::Status;

    fn heap(n: i32, me: i32) -> Heap {
        Heap { base: 0x10000, size: 0x1000, mapped_size: 0x800, my_pe: me, n_pes: n, device: 3, version: (3, 4, 5), source: Source::Manual }
    }

    fn table_with(h: Heap) -> Table {
        let t = Table::new();
        t.attach(h);
        t
    }

    /// Three PEs with a base each and ranks that are not the PEs (PE 0 is rank 2).
    const SHUFFLED: [PeerSpec; 3] =
        [PeerSpec { rank: 2, base: 0x10000 }, PeerSpec { rank: 0, base: 0x50000 }, PeerSpec { rank: 1, base: 0x90000 }];

    fn set(t: &Table, h: &Heap, specs: &[PeerSpec]) {
        t.set_peers(&Peers::new(h, specs).unwrap()).unwrap();
    }

    #[test]
    fn counts_of_pes_read_as_english() {
        assert_eq!(crate::error::pes(1), "1 PE");
        assert_eq!(crate::error::pes(4), "4 PEs");
    }

    #[test]
    fn uniform_identity_is_o1() {
        let h = heap(4, 1);
        let t = table_with(h);
        let specs: Vec<_> = (0..4).map(|r| PeerSpec { rank: r, base: h.base }).collect();
        set(&t, &h, &specs);
        assert_eq!(t.table_bytes(), Some(0));
        assert_eq!(t.to_global(0x10010, 2).unwrap(), Global { rank: 2, pe: 2, device: -1, raw: 0x10010 });
        assert_eq!(t.to_global(0x10010, 1).unwrap().device, 3);
        assert_eq!(t.from_global(2, 0x10010).unwrap(), (0x10010, 2));
    }

    #[test]
    fn table_bytes_counts_each_array_and_extent_forgets() {
        let h = heap(4, 0);
        let t = table_with(h);
        assert_eq!((t.table_bytes(), t.extent()), (None, (0x10000, 0x1000, 0)));
        // Per-PE bases, PE == rank: the bases array only (8 bytes per PE).
        let bases: Vec<_> = (0..4).map(|r| PeerSpec { rank: r, base: 0x10000 * (r as usize + 1) }).collect();
        set(&t, &h, &bases);
        assert_eq!(t.table_bytes(), Some(4 * 8));
        // One base, shuffled ranks: the two rank maps only (4 + 4 bytes per PE).
        let ranks: Vec<_> = (0..4).map(|r| PeerSpec { rank: 3 - r, base: 0x10000 }).collect();
        set(&t, &h, &ranks);
        assert_eq!(t.table_bytes(), Some(4 * 8));
        t.set_extent(0x100).unwrap();
        assert_eq!(t.extent(), (0x10000, 0x100, 0));
        // A forgotten heap has no extent.
        t.detach();
        assert_eq!((t.table_bytes(), t.extent()), (None, (0, 0, 0)));
        assert_eq!(t.offset(0x10000).unwrap_err().status, Status::TableNotSet);
    }

    #[test]
    fn one_read_answers_the_range_and_my_pe() {
        let h = heap(2, 0);
        let t = table_with(h);
        set(&t, &h, &[PeerSpec { rank: 0, base: 0x10000 }, PeerSpec { rank: 1, base: 0x50000 }]);
        assert_eq!(t.from_global_range(1, 0x50010, 0xff0).unwrap(), (0x10010, 1, 0));
        let e = t.from_global_range(1, 0x50010, 0xff1).unwrap_err();
        assert_eq!(e.status, Status::OutOfHeap);
        assert!(
            e.message.contains("the 4081 bytes at 0x50010 on rank 1 run past the end of the symmetric heap [0x50000, 0x51000) of PE 1"),
            "{}",
            e.message
        );
        t.set_extent(0x20).unwrap();
        let e = t.from_global_range(1, 0x50010, 0x11).unwrap_err();
        assert!(
            e.message.contains("run past the 32 bytes made addressable (set_extent) of PE 1's heap [0x50000, 0x51000)"),
            "{}",
            e.message
        );
    }

    #[test]
    fn different_bases_and_shuffled_ranks() {
        let h = heap(3, 0);
        let t = table_with(h);
        set(&t, &h, &SHUFFLED);
        assert_eq!(t.table_bytes(), Some(3 * 16));
        let g = t.to_global(0x10020, 1).unwrap();
        assert_eq!((g.rank, g.raw), (0, 0x50020));
        assert_eq!(t.to_offset(0x10020, 0x10, 1).unwrap(), (0, 0x20));
        assert_eq!(t.from_global(0, 0x50020).unwrap(), (0x10020, 1));
        assert_eq!(t.from_global(1, 0x90fff).unwrap(), (0x10fff, 2));
        assert_eq!(t.from_global(1, 0x91000).unwrap_err().status, Status::OutOfHeap);
        assert_eq!(t.from_global(1, 0x8ffff).unwrap_err().status, Status::OutOfHeap);
        assert_eq!(t.to_global(0x10020, 3).unwrap_err().status, Status::BadPe);
        assert_eq!(t.to_global(0x10020, -1).unwrap_err().status, Status::BadPe);
        assert_eq!(t.from_global(3, 0x10020).unwrap_err().status, Status::BadRank);
        assert_eq!(t.from_global(-1, 0x10020).unwrap_err().status, Status::BadRank);
        assert_eq!(t.to_global(0x11000, 0).unwrap_err().status, Status::OutOfHeap);
        assert_eq!(t.to_global(0xffff, 0).unwrap_err().status, Status::OutOfHeap);
        assert_eq!(t.offset(0x10fff).unwrap(), 0xfff);
        assert!(t.offset(0x11000).unwrap_err().message.contains("0x11000"));
    }

    #[test]
    fn the_mapped_span_comes_and_goes_with_the_peer_table() {
        let h = heap(2, 0);
        let t = table_with(h);
        // A heap alone: its own range.
        assert!(t.in_mapped_span(0x10000) && t.in_mapped_span(0x10fff) && !t.in_mapped_span(0x11000) && !t.in_mapped_span(0xffff));
        assert_eq!(t.view().unwrap().mapped, (0x10000, 0x1000));
        // A peer table with the peer's heap mapped at 0x40000: the span covers both (and the gap).
        let mut p = Peers::new(&h, &[PeerSpec { rank: 0, base: 0x10000 }, PeerSpec { rank: 1, base: 0x10000 }]).unwrap();
        p.mapped = Some((0x10000, 0x31000));
        t.set_peers(&p).unwrap();
        assert!(t.in_mapped_span(0x40fff) && t.in_mapped_span(0x20000) && !t.in_mapped_span(0x41000));
        assert_eq!(
            t.view().unwrap(),
            View { base: 0x10000, size: 0x1000, limit: 0x1000, my_pe: 0, n_pes: 2, device: 3, peers: true, mapped: (0x10000, 0x31000) }
        );
        // The same heap discovered again keeps it; attach drops it with the peer table; detach all.
        t.discovered(Heap { source: Source::Symtab, ..h });
        assert!(t.in_mapped_span(0x40fff));
        t.attach(h);
        assert!(!t.in_mapped_span(0x40fff) && t.in_mapped_span(0x10000));
        t.detach();
        assert!(!t.in_mapped_span(0x10000) && t.view().is_none());
    }

    #[test]
    fn a_range_overlaps_the_span_when_any_of_its_bytes_is_in_it() {
        let t = table_with(heap(2, 0)); // the span [0x10000, 0x11000)
        // Ranges that start below the span and run into it, or start inside it.
        assert!(t.overlaps_mapped_span(0xf000, 0x1001) && t.overlaps_mapped_span(0xffff, 2) && t.overlaps_mapped_span(0x10fff, 8));
        // Ranges that end where the span begins, or start where it ends; len 0 is the address alone.
        assert!(!t.overlaps_mapped_span(0xf000, 0x1000) && !t.overlaps_mapped_span(0x11000, 0x1000));
        assert!(!t.overlaps_mapped_span(0xffff, 0) && t.overlaps_mapped_span(0x10000, 0));
        // A range that wraps around the address space (clipped) and one from the top.
        assert!(!t.overlaps_mapped_span(usize::MAX - 4, usize::MAX) && t.overlaps_mapped_span(0, usize::MAX));
        t.detach();
        assert!(!t.overlaps_mapped_span(0, usize::MAX), "no heap: no span");
    }

    /// The hot paths (`try_*`, what the C ABI calls first) answer every translation the table
    /// accepts, with the same answer, and refuse what it refuses: a hot path that gave up would
    /// cost every call the slow path.
    #[test]
    fn the_hot_paths_answer_what_the_table_accepts() {
        let h = heap(3, 0);
        let t = table_with(h);
        set(&t, &h, &SHUFFLED);
        for (sym, pe) in [(0x10000, 0), (0x10010, 1), (0x10fff, 2)] {
            assert_eq!(t.try_to_global(sym, pe), Some(t.to_global(sym, pe).unwrap()), "to_global(0x{sym:x}, {pe})");
            assert_eq!(t.try_to_offset(sym, 1, pe), Some(t.to_offset(sym, 1, pe).unwrap()), "to_offset(0x{sym:x}, 1, {pe})");
        }
        for (rank, raw) in [(0, 0x50020), (1, 0x90fff), (2, 0x10000)] {
            assert_eq!(t.try_from_global(rank, raw), Some(t.from_global(rank, raw).unwrap()), "from_global({rank}, 0x{raw:x})");
        }
        assert_eq!((t.try_to_global(0x11000, 0), t.try_to_global(0x10000, 3)), (None, None));
        assert_eq!((t.try_to_offset(0x10fff, 2, 0), t.try_from_global(3, 0x10000)), (None, None));
    }

    #[test]
    fn offsets_both_ways_agree_with_the_translations() {
        let h = heap(3, 0);
        let t = table_with(h);
        assert_eq!(t.try_local_offset(0x10010, 0xff0), Some(0x10));
        assert_eq!(t.try_local_offset(0x10010, 0xff1), None);
        assert_eq!(t.from_offset(0, 0, 0).unwrap_err().status, Status::TableNotSet);
        set(&t, &h, &SHUFFLED);
        for (rank, raw) in [(0, 0x50020), (1, 0x90fff), (2, 0x10000)] {
            let off = raw & 0xfff;
            assert_eq!(t.from_offset(rank, off, 0).unwrap(), t.from_global(rank, raw).unwrap());
            assert_eq!(t.try_from_offset(rank, off, 0), Some(t.from_global(rank, raw).unwrap()));
        }
        assert_eq!(t.from_offset(3, 0, 0).unwrap_err().status, Status::BadRank);
        assert_eq!(t.from_offset(0, 0x1000, 0).unwrap_err().status, Status::OutOfHeap);
        assert_eq!((t.rank_of_pe(0), t.rank_of_pe(2), t.rank_of_pe(3)), (Some(2), Some(1), None));
        t.set_extent(0x100).unwrap();
        assert_eq!(t.from_offset(0, 0xff, 1).unwrap(), (0x100ff, 1));
        let e = t.from_offset(0, 0xff, 2).unwrap_err();
        assert!(
            e.message.contains("the 2 bytes at 0x500ff on rank 0 (heap offset 255) run past the 256 bytes made addressable"),
            "{}",
            e.message
        );
        assert_eq!(t.local_offset(0x100ff, 2).unwrap_err().status, Status::OutOfHeap);
    }

    #[test]
    fn a_table_for_another_heap_is_refused() {
        let h = heap(2, 0);
        let t = table_with(h);
        let other = Heap { base: 0x20000, ..h };
        let p = Peers::new(&other, &[PeerSpec { rank: 0, base: 0x20000 }, PeerSpec { rank: 1, base: 0x10000 }]).unwrap();
        assert_eq!(t.set_peers(&p).unwrap_err().status, Status::InvalidArgument);
        assert_eq!(t.to_global(0x10000, 0).unwrap_err().status, Status::TableNotSet);
    }

    #[test]
    fn attach_replaces_and_discovery_keeps_the_same_heap() {
        let h = heap(2, 0);
        let t = table_with(h);
        let specs = [PeerSpec { rank: 0, base: 0x10000 }, PeerSpec { rank: 1, base: 0x50000 }];
        set(&t, &h, &specs);
        t.set_extent(0x10).unwrap();
        // The same heap found again (another mapped size): table and extent stay.
        t.discovered(Heap { mapped_size: 0x1000, source: Source::Symtab, ..h });
        assert_eq!(t.to_global(0x1000f, 1).unwrap().raw, 0x5000f);
        assert_eq!(t.to_global(0x10010, 1).unwrap_err().status, Status::OutOfHeap);
        // forget_discovered forgets it (it is discovery's now); attach replaces everything.
        t.forget_discovered();
        assert_eq!(t.heap(), None);
        t.attach(h);
        set(&t, &h, &specs);
        t.set_extent(0x10).unwrap();
        t.forget_discovered();
        assert_eq!(t.heap(), Some(h), "a heap attached by hand is not discovery's to forget");
        t.attach(h);
        assert_eq!(t.to_global(0x10000, 1).unwrap_err().status, Status::TableNotSet);
        assert_eq!(t.offset(0x10fff).unwrap(), 0xfff, "attach dropped the extent");
    }

    #[test]
    fn a_table_installed_again_shares_its_arrays_and_detach_forgets() {
        let h = heap(4, 0);
        let t = table_with(h);
        let shuffled: Vec<_> = (0..4).map(|p| PeerSpec { rank: (p + 1) % 4, base: 0x10000 + (p as usize) * 0x100000 }).collect();
        let spread: Vec<_> = (0..4).map(|p| PeerSpec { rank: p, base: 0x10000 + (p as usize) * 0x200000 }).collect();
        for _ in 0..10 {
            set(&t, &h, &shuffled);
            set(&t, &h, &spread);
        }
        let published = t.lock().published.len();
        set(&t, &h, &spread);
        let m = t.lock();
        assert_eq!(published, 21, "one snapshot for the attach, one per change of table");
        assert_eq!(m.published.len(), published, "installing the current table again publishes nothing");
        assert_eq!((m.usize_arrays.len(), m.u32_arrays.len()), (2, 2), "each array is kept once per content");
        drop(m);
        t.detach();
        assert_eq!(t.to_global(0x10000, 0).unwrap_err().status, Status::TableNotSet);
        assert_eq!(t.table_bytes(), None);
    }
}
