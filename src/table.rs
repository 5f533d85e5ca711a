//! The offset-translation table: the local heap, and for every PE its UPC++ rank and heap base,
//! and rank -> PE.
//!
//! Translation is by offset: `raw = base[pe] + (sym - my_base)` and back, so nothing assumes the
//! bases are equal (they differ per PE when NVSHMEM runs without CUDA VMM). Every translation is
//! bounded by the extent (`set_extent`) when one is set, else by the heap's size.
//!
//! Storage is compressed: with uniform bases and PE == rank the table is O(1) bytes; otherwise at
//! most 16 bytes per PE (8 for the base, 4 for PE -> rank, 4 for rank -> PE), each array present
//! only when it is not uniform / the identity ([`Peers`] decides, after checking the entries).
//!
//! Concurrency (the read path is lock-free, wait-free unless a writer is active): the fields
//! live in a sequence lock, read in one way only, [`Table::try_read`]. Writers (attach, detach,
//! discovery, set_peers, set_extent) serialise on a mutex, and each change is one publication
//! ([`Table::write`]). Arrays are never freed while the process runs: a replaced array goes to a
//! pool and is reused by a later table (buffers only grow), so a reader that raced with a writer
//! may read a stale entry, which the sequence check then rejects, but never touches unmapped
//! memory. The pool holds at most what the largest tables needed (about twice the largest
//! table, for growing sizes).
//!
//! Each direction has one translation ([`Snapshot::sym_to_pe`], [`Snapshot::rank_to_sym`]), a pure
//! function of one read: the hot paths make one attempt with it, the slow paths retry it and,
//! when it refuses, explain why from the same read.
//!
//! The protocol is model-checked with loom (`loom/`: readers against publish, replace, pool reuse,
//! attach and detach); under `--cfg loom` this file takes loom's atomics and mutex.

pub use crate::heap::Heap;
use crate::heap::Source;
pub use crate::peers::{PeerSpec, Peers};
use crate::status::{Error, Result, Status};
#[cfg(loom)]
use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
};
#[cfg(not(loom))]
use parking_lot::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

/// A reader's wait for a writer to finish (under loom: a yield, so the model can schedule it).
#[inline(always)]
fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// A translated global pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Global {
    pub rank: i32,
    pub pe: i32,
    pub device: i32,
    pub raw: usize,
}

/// A pooled array: never freed, reused by later tables.
struct Buf<T> {
    ptr: *mut T,
    cap: usize,
}
// SAFETY: the buffers hold atomics and are only handed out under the writers' mutex.
#[allow(unsafe_code)]
unsafe impl<T> Send for Buf<T> {}

impl<T: Default> Buf<T> {
    fn alloc(n: usize) -> Buf<T> {
        let b: Box<[T]> = (0..n).map(|_| T::default()).collect();
        let cap = b.len();
        Buf { ptr: Box::into_raw(b) as *mut T, cap }
    }
    #[allow(unsafe_code)]
    fn slice(&self) -> &[T] {
        // SAFETY: ptr/cap come from a leaked Box<[T]> that is never freed.
        unsafe { std::slice::from_raw_parts(self.ptr, self.cap) }
    }
}

/// The arrays of one peer table (None: uniform bases / the identity).
#[derive(Default)]
struct Arrays {
    bases: Option<Buf<AtomicUsize>>,
    rank_of_pe: Option<Buf<AtomicU32>>,
    pe_of_rank: Option<Buf<AtomicU32>>,
}

/// The writers' side: the heap, the extent, which arrays are in use and the pools.
struct Master {
    heap: Option<Heap>,
    /// Whether a peer table is installed (its arrays may all be None).
    peers: bool,
    /// The bytes of each PE's heap made addressable (`set_extent`); 0: the whole heap.
    extent: usize,
    arrays: Arrays,
    pool_usize: Vec<Buf<AtomicUsize>>,
    pool_u32: Vec<Buf<AtomicU32>>,
}

impl Master {
    /// Drops the peer table and the extent; the arrays are the caller's to retire.
    fn forget_peers(&mut self) -> Arrays {
        self.peers = false;
        self.extent = 0;
        std::mem::take(&mut self.arrays)
    }

    /// Returns unpublished arrays to the pool.
    fn pool(&mut self, old: Arrays) {
        self.pool_usize.extend(old.bases);
        self.pool_u32.extend(old.rank_of_pe);
        self.pool_u32.extend(old.pe_of_rank);
    }
}

fn take<T: Default>(pool: &mut Vec<Buf<T>>, n: usize) -> Buf<T> {
    match pool.iter().enumerate().filter(|(_, b)| b.cap >= n).min_by_key(|(_, b)| b.cap).map(|(i, _)| i) {
        Some(i) => pool.swap_remove(i),
        None => Buf::alloc(n),
    }
}

/// A translation table (the process has one, [`TABLE`]; tests make their own).
///
/// `repr(C)` and 128-byte alignment keep the fields the readers load (64 bytes: the sequence
/// number to `pe_of_rank`) alone in one cache line; `heap_size`, which only error messages read,
/// and the writers' mutex and pools are on the next, so a writer taking its lock never
/// invalidates the readers' line.
#[repr(C, align(128))]
pub struct Table {
    seq: AtomicU64,
    /// The heap's PE count; 0 when no heap is known (a heap always has at least one PE).
    n_pes: AtomicU32,
    /// `n_pes` when a peer table is installed, else 0: the hot paths' one bound check of a PE or
    /// a rank.
    live_n: AtomicU32,
    my_pe: AtomicI32,
    device: AtomicI32,
    base: AtomicUsize,
    /// The bound of every offset: the extent when one is set, else the heap's size; 0 when no
    /// heap is known (so a bare offset check refuses everything then).
    limit: AtomicUsize,
    bases: AtomicPtr<AtomicUsize>,
    rank_of_pe: AtomicPtr<AtomicU32>,
    pe_of_rank: AtomicPtr<AtomicU32>,
    /// The heap's own size (for messages).
    heap_size: AtomicUsize,
    master: Mutex<Master>,
}

/// The process's table.
#[cfg(not(loom))]
pub static TABLE: Table = Table::new();

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

macro_rules! new_table {
    () => {
        Table {
            seq: AtomicU64::new(0),
            n_pes: AtomicU32::new(0),
            live_n: AtomicU32::new(0),
            my_pe: AtomicI32::new(0),
            device: AtomicI32::new(-1),
            base: AtomicUsize::new(0),
            limit: AtomicUsize::new(0),
            bases: AtomicPtr::new(std::ptr::null_mut()),
            rank_of_pe: AtomicPtr::new(std::ptr::null_mut()),
            pe_of_rank: AtomicPtr::new(std::ptr::null_mut()),
            heap_size: AtomicUsize::new(0),
            master: Mutex::new(Master {
                heap: None,
                peers: false,
                extent: 0,
                arrays: Arrays { bases: None, rank_of_pe: None, pe_of_rank: None },
                pool_usize: Vec::new(),
                pool_u32: Vec::new(),
            }),
        }
    };
}

/// Which rank map a read follows. A read loads only the pointers it uses (every load is an
/// instruction of the hot paths, and an atomic load is never optimised away).
#[derive(Clone, Copy)]
enum Map {
    /// `to_global`, `to_offset`.
    RankOfPe,
    /// `from_global`, `local_ptr`.
    PeOfRank,
    /// Reads that index no array.
    None,
}

/// The table as one read sees it, inside [`Table::try_read`]'s closure only. The bound
/// (`live_n`) and the array pointers were checked to come from one table, so every index below
/// the bound is inside the arrays; the other fields are loaded on use, and the read's closing
/// check covers everything loaded.
struct Snapshot<'t> {
    t: &'t Table,
    live_n: u32,
    bases: *const AtomicUsize,
    /// `rank_of_pe` or `pe_of_rank`, as the read's [`Map`] chose.
    map: *const AtomicU32,
}

/// Every scalar of the table as one read saw it: what an explanation names.
#[derive(Clone, Copy, Debug)]
struct View {
    /// The heap's PE count; 0: no heap.
    n: u32,
    /// `n` when a peer table is installed; 0: no table.
    live_n: u32,
    my_pe: i32,
    base: usize,
    /// The extent, or the heap's size.
    limit: usize,
    heap_size: usize,
}

/// A refusal of [`Snapshot::rank_to_sym`]: the rank's PE and that PE's base (0, 0 when the rank is
/// not in the table), for the explanation.
#[derive(Clone, Copy, Debug)]
struct Refused {
    pe: u32,
    base: usize,
}

impl Snapshot<'_> {
    #[inline(always)]
    fn base(&self) -> usize {
        self.t.base.load(Ordering::Relaxed)
    }

    #[inline(always)]
    fn limit(&self) -> usize {
        self.t.limit.load(Ordering::Relaxed)
    }

    #[inline(always)]
    fn my_pe(&self) -> i32 {
        self.t.my_pe.load(Ordering::Relaxed)
    }

    /// Every scalar, for an explanation.
    fn view(&self) -> View {
        let t = self.t;
        View {
            n: t.n_pes.load(Ordering::Relaxed),
            live_n: self.live_n,
            my_pe: self.my_pe(),
            base: self.base(),
            limit: self.limit(),
            heap_size: t.heap_size.load(Ordering::Relaxed),
        }
    }

    /// The offset of `addr` in the local heap, within the bound (no peer table needed).
    #[inline(always)]
    fn offset(&self, addr: usize) -> Option<usize> {
        let off = addr.wrapping_sub(self.base());
        (off < self.limit()).then_some(off)
    }

    /// The translation toward PE `pe` (`to_global`, `to_offset`): `pe` in the table and the `len`
    /// bytes at `sym` (0: the address alone) inside the local heap and the bound; their offset.
    /// The one bound check of this direction. Read with [`Map::RankOfPe`].
    #[inline(always)]
    fn sym_to_pe(&self, sym: usize, len: usize, pe: i32) -> Option<usize> {
        if (pe as u32) >= self.live_n {
            return None;
        }
        let off = sym.wrapping_sub(self.base());
        let limit = self.limit();
        // `len` is 0 for `to_global`: the second test folds away there.
        if off >= limit || len > limit - off {
            return None;
        }
        Some(off)
    }

    /// The rank of PE `pe` (< `live_n`, after [`Snapshot::sym_to_pe`]).
    #[inline(always)]
    #[allow(unsafe_code)]
    fn rank_of(&self, pe: i32) -> u32 {
        if self.map.is_null() {
            pe as u32
        } else {
            cold_path();
            // SAFETY: pe < live_n <= the capacity of the array published with it (`try_read`).
            unsafe { (*self.map.add(pe as usize)).load(Ordering::Relaxed) }
        }
    }

    /// `to_global`: `sym` (an address in my heap) on PE `pe`.
    #[inline(always)]
    fn to_global(&self, sym: usize, pe: i32) -> Option<Global> {
        self.sym_to_pe(sym, 0, pe).map(|off| self.global(sym, off, pe))
    }

    /// `to_offset`: the rank of PE `pe` and the offset of the `len` bytes at `sym`.
    #[inline(always)]
    fn to_offset(&self, sym: usize, len: usize, pe: i32) -> Option<(i32, usize)> {
        self.sym_to_pe(sym, len, pe).map(|off| (self.rank_of(pe) as i32, off))
    }

    /// `sym` (at offset `off` in the local heap, after [`Snapshot::sym_to_pe`]) on PE `pe`.
    #[inline(always)]
    #[allow(unsafe_code)]
    fn global(&self, sym: usize, off: usize, pe: i32) -> Global {
        // Uniform bases: the answer is `sym` itself. The per-PE arrays are behind `cold_path`, so
        // the uniform layout (CUDA VMM's default: one base everywhere, PE == rank) runs straight
        // through and a per-PE array costs a jump out and back (measured on the GPU host: this
        // layout beat a neutral one and a cmov-chosen pointer: the layout A/B in
        // docs/bench-history.md, in git history before c796a2d).
        let raw = if self.bases.is_null() {
            sym
        } else {
            cold_path();
            // SAFETY: pe < live_n <= the capacity of the arrays published with it (`try_read`).
            unsafe { (*self.bases.add(pe as usize)).load(Ordering::Relaxed) }.wrapping_add(off)
        };
        let rank = self.rank_of(pe);
        // Both loaded unconditionally, so the choice is a cmov: a branch on `pe == my_pe` would be
        // mispredicted about once in n_pes calls for random PEs (every other call at 2 PEs).
        let (my_pe, device) = (self.my_pe(), self.t.device.load(Ordering::Relaxed));
        let device = if pe == my_pe { device } else { -1 };
        Global { rank: rank as i32, pe, device, raw }
    }

    /// The translation from rank `rank` (`from_global`, `local_ptr`): the `len` bytes at `raw` on
    /// that rank (0: the address alone) inside its PE's heap and the bound, as (symmetric
    /// address, PE). The one bound check of this direction. Read with [`Map::PeOfRank`].
    #[inline(always)]
    #[allow(unsafe_code)]
    fn rank_to_sym(&self, rank: i32, raw: usize, len: usize) -> std::result::Result<(usize, i32), Refused> {
        let n = self.live_n;
        if (rank as u32) >= n {
            return Err(Refused { pe: 0, base: 0 });
        }
        // SAFETY: rank < n; a PE read from pe_of_rank is clamped to < n (a racing writer may be
        // refilling a retired buffer; the closing sequence check then rejects the answer).
        let pe = if self.map.is_null() {
            rank as u32
        } else {
            cold_path();
            unsafe { (*self.map.add(rank as usize)).load(Ordering::Relaxed) }.min(n - 1)
        };
        // The base through a pointer chosen by a cmov and valid in both layouts (without a bases
        // array, `base` itself), so uniform and per-PE bases both run straight through (measured
        // on the GPU host: better here than the layout of `global`; the layout A/B in
        // docs/bench-history.md, in git history before c796a2d).
        // SAFETY: pe < n <= the capacity of the arrays published with n (`try_read`).
        let bp: *const AtomicUsize = if self.bases.is_null() { &self.t.base } else { unsafe { self.bases.add(pe as usize) } };
        let b = unsafe { (*bp).load(Ordering::Relaxed) };
        let base = self.base();
        let off = raw.wrapping_sub(b);
        let limit = self.limit();
        if off >= limit || len > limit - off {
            return Err(Refused { pe, base: b });
        }
        Ok((base.wrapping_add(off), pe as i32))
    }
}

impl Table {
    #[cfg(not(loom))]
    pub const fn new() -> Table {
        new_table!()
    }
    #[cfg(loom)]
    pub fn new() -> Table {
        new_table!()
    }

    // ---- The read side --------------------------------------------------------------------

    /// The one read protocol: loads the sequence number (None while a writer is active), the
    /// bound and the array pointers `map` names, checks the sequence number again (so that bound
    /// and pointers come from one table before any entry is read), runs `f` on that
    /// [`Snapshot`], and checks the sequence number a last time: `f`'s answer, or None when a
    /// writer published meanwhile (then nothing `f` saw may be used). When `f` itself answers
    /// None (a hot path's refusal, which the slow path explains), nothing is left to check.
    #[inline(always)]
    fn try_read<R>(&self, map: Map, f: impl FnOnce(&Snapshot) -> Option<R>) -> Option<R> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let live_n = self.live_n.load(Ordering::Relaxed);
        let bases = self.bases.load(Ordering::Relaxed);
        let map = match map {
            Map::RankOfPe => self.rank_of_pe.load(Ordering::Relaxed),
            Map::PeOfRank => self.pe_of_rank.load(Ordering::Relaxed),
            Map::None => std::ptr::null_mut(),
        };
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != s1 {
            return None;
        }
        let r = f(&Snapshot { t: self, live_n, bases, map })?;
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s1).then_some(r)
    }

    /// [`Table::try_read`] until no writer interferes.
    #[inline(always)]
    fn read<R>(&self, map: Map, f: impl Fn(&Snapshot) -> R) -> R {
        loop {
            if let Some(r) = self.try_read(map, |s| Some(f(s))) {
                return r;
            }
            spin();
        }
    }

    /// The hot path of `to_global`: one attempt, None on any refusal *or* a race with a writer
    /// (then [`Table::to_global`] retries and says why).
    #[inline(always)]
    pub fn try_to_global(&self, sym: usize, pe: i32) -> Option<Global> {
        self.try_read(Map::RankOfPe, |s| s.to_global(sym, pe))
    }

    /// The hot path of `from_global`: one attempt, None on any refusal or a race with a writer.
    #[inline(always)]
    pub fn try_from_global(&self, rank: i32, raw: usize) -> Option<(usize, i32)> {
        self.try_read(Map::PeOfRank, |s| s.rank_to_sym(rank, raw, 0).ok())
    }

    /// The hot path of `to_offset`: one attempt, None on any refusal or a race with a writer.
    #[inline(always)]
    pub fn try_to_offset(&self, sym: usize, len: usize, pe: i32) -> Option<(i32, usize)> {
        self.try_read(Map::RankOfPe, |s| s.to_offset(sym, len, pe))
    }

    /// `sym` (an address in my heap) on PE `pe`, or why not (from the same read).
    pub fn to_global(&self, sym: usize, pe: i32) -> Result<Global> {
        self.read(Map::RankOfPe, |s| s.to_global(sym, pe).ok_or_else(|| s.view())).map_err(|v| to_error(sym, 0, pe, &v))
    }

    /// The rank of PE `pe` and the offset of `sym` in the local heap, with the `len` bytes at
    /// `sym` (0: the address alone) inside the heap and the bound; or why not.
    pub fn to_offset(&self, sym: usize, len: usize, pe: i32) -> Result<(i32, usize)> {
        self.read(Map::RankOfPe, |s| s.to_offset(sym, len, pe).ok_or_else(|| s.view())).map_err(|v| to_error(sym, len, pe, &v))
    }

    /// `raw` (an address on rank `rank`) as `(symmetric address in my heap, PE)`, or why not.
    pub fn from_global(&self, rank: i32, raw: usize) -> Result<(usize, i32)> {
        self.from_global_range(rank, raw, 0).map(|(sym, pe, _)| (sym, pe))
    }

    /// The `len` bytes at `raw` on rank `rank` (0: the address alone) as `(symmetric address in
    /// my heap, PE, my PE)`, or why not: one read (`local_ptr` compares the PE with mine).
    pub fn from_global_range(&self, rank: i32, raw: usize, len: usize) -> Result<(usize, i32, i32)> {
        self.read(Map::PeOfRank, |s| match s.rank_to_sym(rank, raw, len) {
            Ok((sym, pe)) => Ok((sym, pe, s.my_pe())),
            Err(r) => Err((r, s.view())),
        })
        .map_err(|(r, v)| from_error(rank, raw, len, r, &v))
    }

    /// The offset of `addr` in the local heap (within the bound), or why not.
    pub fn offset(&self, addr: usize) -> Result<usize> {
        self.read(Map::None, |s| s.offset(addr).ok_or_else(|| s.view())).map_err(|v| offset_error(addr, &v))
    }

    /// Bytes the current peer table holds (None: no table).
    pub fn table_bytes(&self) -> Option<usize> {
        // rank_of_pe and pe_of_rank are installed together, 4 bytes per PE each.
        let (n, bases, maps) = self.read(Map::RankOfPe, |s| (s.live_n as usize, !s.bases.is_null(), !s.map.is_null()));
        (n != 0).then(|| usize::from(bases) * n * 8 + usize::from(maps) * n * 8)
    }

    /// The local heap's base, the bound (extent or size) and the PE, from one read ((0, 0, 0)
    /// when no heap is known).
    pub fn extent(&self) -> (usize, usize, i32) {
        let v = self.read(Map::None, |s| s.view());
        if v.n == 0 { (0, 0, 0) } else { (v.base, v.limit, v.my_pe) }
    }

    // ---- The write side -------------------------------------------------------------------

    /// The writers' lock.
    fn lock(&self) -> MutexGuard<'_, Master> {
        #[cfg(loom)]
        return self.master.lock().unwrap();
        #[cfg(not(loom))]
        return self.master.lock();
    }

    /// The one way to change the table: `change` edits the master under the writers' lock and
    /// returns the arrays it took out of use; then the readers' fields are published under one
    /// sequence bump ([`Table::store`]); only then do the retired arrays go to the pool, so no
    /// buffer is rewritten while readers may still read it. A change that fails publishes
    /// nothing.
    fn write<R>(&self, change: impl FnOnce(&mut Master) -> Result<(R, Arrays)>) -> Result<R> {
        let mut m = self.lock();
        let (r, retired) = change(&mut m)?;
        self.store(&m);
        m.pool(retired);
        Ok(r)
    }

    /// Publishes the master's state into the sequence lock (caller holds the master lock).
    /// Only the fields that change are stored: every store to the readers' cache line takes it
    /// away from all of them, so a table swap that changes three pointers costs the readers
    /// five stores (with the two sequence bumps), not thirteen.
    fn store(&self, m: &Master) {
        let a = &m.arrays;
        debug_assert_eq!(a.rank_of_pe.is_some(), a.pe_of_rank.is_some(), "the rank maps are installed together");
        macro_rules! put {
            ($field:expr, $value:expr) => {{
                let v = $value;
                if $field.load(Ordering::Relaxed) != v {
                    $field.store(v, Ordering::Relaxed);
                }
            }};
        }
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let h = m.heap;
        let n = h.map_or(0, |h| h.n_pes as u32);
        put!(self.n_pes, n);
        put!(self.live_n, if m.peers && h.is_some() { n } else { 0 });
        put!(self.limit, h.map_or(0, |h| if m.extent != 0 { m.extent } else { h.size }));
        if let Some(h) = h {
            put!(self.my_pe, h.my_pe);
            put!(self.device, h.device);
            put!(self.base, h.base);
            put!(self.heap_size, h.size);
        }
        let p = |b: &Option<Buf<AtomicUsize>>| b.as_ref().map_or(std::ptr::null_mut(), |b| b.ptr);
        let q = |b: &Option<Buf<AtomicU32>>| b.as_ref().map_or(std::ptr::null_mut(), |b| b.ptr);
        put!(self.bases, p(&a.bases));
        put!(self.rank_of_pe, q(&a.rank_of_pe));
        put!(self.pe_of_rank, q(&a.pe_of_rank));
        self.seq.store(s + 2, Ordering::Release);
    }

    /// Publishes a heap that discovery found: the peer table and the extent stay when it is the
    /// same heap (only its mapped extent changed), and go otherwise.
    pub fn discovered(&self, heap: Heap) {
        let _ = self.write(|m| {
            let same = m.heap.is_some_and(|h| h.same_heap(&heap));
            m.heap = Some(heap);
            Ok(((), if same { Arrays::default() } else { m.forget_peers() }))
        });
    }

    /// Replaces the heap with `heap` (described by hand), dropping the peer table and the
    /// extent, in one publication: a reader sees the old heap or the new one, never none.
    pub fn attach(&self, heap: Heap) {
        let _ = self.write(|m| {
            m.heap = Some(heap);
            Ok(((), m.forget_peers()))
        });
    }

    /// Forgets the heap, the peer table and the extent.
    pub fn detach(&self) {
        let _ = self.write(|m| {
            m.heap = None;
            Ok(((), m.forget_peers()))
        });
    }

    /// Forgets the heap only if it came from discovery (NVSHMEM is gone).
    pub fn forget_discovered(&self) {
        let _ = self.write(|m| {
            if m.heap.is_some_and(|h| h.source != Source::Manual) {
                m.heap = None;
                return Ok(((), m.forget_peers()));
            }
            Ok(((), Arrays::default()))
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
            Ok(((), Arrays::default()))
        })
    }

    /// Installs a checked peer table; fails when the current heap is not the one it was checked
    /// against. The extent stays.
    pub fn set_peers(&self, peers: &Peers) -> Result<()> {
        self.write(|m| {
            if !m.heap.is_some_and(|h| h.same_heap(&peers.heap)) {
                crate::fail!(InvalidArgument, "the heap changed while the table was being built");
            }
            let n = peers.heap.n_pes as usize;
            // The bug the loom model must catch (loom/, `--cfg uxn_loom_bug`): retiring the
            // published arrays to the pool first lets `take` hand one back, rewritten while
            // readers read it.
            #[cfg(uxn_loom_bug)]
            {
                let old = std::mem::take(&mut m.arrays);
                m.pool(old);
            }
            // New arrays come from the pool *before* the published ones are retired: a buffer that
            // readers may still be reading is never rewritten until a sequence bump has retired it.
            fn fill<T: Default, V: Copy>(pool: &mut Vec<Buf<T>>, n: usize, values: &[V], put: impl Fn(&T, V)) -> Buf<T> {
                let b = take(pool, n);
                for (slot, v) in b.slice().iter().zip(values) {
                    put(slot, *v);
                }
                b
            }
            let fresh = Arrays {
                bases: peers.bases.as_ref().map(|v| fill(&mut m.pool_usize, n, v, |s, b| s.store(b, Ordering::Relaxed))),
                rank_of_pe: peers.ranks.as_ref().map(|(r, _)| fill(&mut m.pool_u32, n, r, |s, x| s.store(x, Ordering::Relaxed))),
                pe_of_rank: peers.ranks.as_ref().map(|(_, p)| fill(&mut m.pool_u32, n, p, |s, x| s.store(x, Ordering::Relaxed))),
            };
            m.peers = true;
            Ok(((), std::mem::replace(&mut m.arrays, fresh)))
        })
    }
}

/// Marks the branch it is called in as unlikely, so the compiler lays the other one out as the
/// straight path. `std::hint::cold_path` does this from Rust 1.95; the crate supports 1.85, where
/// a call to an empty `#[cold]` function, inlined, has the same effect.
#[cold]
#[inline(always)]
fn cold_path() {}

// ---- Explanations: why a read refused ------------------------------------------------------

fn no_heap() -> Error {
    Error::new(Status::TableNotSet, "no heap is known: call upcxx_extra_nvshmem_heap_query or upcxx_extra_nvshmem_attach first")
}

fn no_peers(v: &View) -> Error {
    Error::new(
        Status::TableNotSet,
        format!(
            "the peer table is not set for heap [0x{:x}, 0x{:x}) of PE {}: call upcxx_extra_nvshmem_set_peers first",
            v.base,
            v.base + v.heap_size,
            v.my_pe
        ),
    )
}

/// The `len` bytes (0: the address alone) at `at` ("0x10", "0x10 on rank 1"), at offset `off` in
/// the heap `[pe_base, pe_base + heap_size)` of `who` ("PE 1"), are refused by the bound: outside
/// the heap, past its end, or past the extent (`set_extent`).
fn beyond(at: &str, len: usize, off: usize, pe_base: usize, who: &str, v: &View) -> Error {
    let range = format!("[0x{pe_base:x}, 0x{:x})", pe_base.wrapping_add(v.heap_size));
    let (what, verb) = if len == 0 { (format!("address {at}"), "runs") } else { (format!("the {len} bytes at {at}"), "run") };
    let message = if off >= v.heap_size {
        format!("address {at} is outside the symmetric heap {range} of {who}")
    } else if v.limit < v.heap_size && len <= v.heap_size - off {
        format!("{what} {verb} past the {} bytes made addressable (set_extent) of {who}'s heap {range}", v.limit)
    } else {
        format!("{what} {verb} past the end of the symmetric heap {range} of {who} (offset {off} of {} bytes)", v.heap_size)
    };
    Error::new(Status::OutOfHeap, message)
}

/// Why [`Snapshot::sym_to_pe`] refused.
#[cold]
fn to_error(sym: usize, len: usize, pe: i32, v: &View) -> Error {
    if v.n == 0 {
        return no_heap();
    }
    if v.live_n == 0 {
        return no_peers(v);
    }
    let off = sym.wrapping_sub(v.base);
    if off >= v.limit || len > v.limit - off {
        return beyond(&format!("0x{sym:x}"), len, off, v.base, &format!("PE {}", v.my_pe), v);
    }
    Error::new(Status::BadPe, format!("PE {pe} is not in [0, {}) (address 0x{sym:x})", v.n))
}

/// Why [`Snapshot::rank_to_sym`] refused.
#[cold]
fn from_error(rank: i32, raw: usize, len: usize, r: Refused, v: &View) -> Error {
    if v.n == 0 {
        return no_heap();
    }
    if v.live_n == 0 {
        return no_peers(v);
    }
    if (rank as u32) >= v.n {
        return Error::new(Status::BadRank, format!("rank {rank} is not in [0, {}) (address 0x{raw:x})", v.n));
    }
    let off = raw.wrapping_sub(r.base);
    if off >= v.heap_size {
        let range = format!("[0x{:x}, 0x{:x})", r.base, r.base.wrapping_add(v.heap_size));
        return Error::new(Status::OutOfHeap, format!("address 0x{raw:x} on rank {rank} (PE {}) is outside that PE's heap {range}", r.pe));
    }
    beyond(&format!("0x{raw:x} on rank {rank}"), len, off, r.base, &format!("PE {}", r.pe), v)
}

/// Why [`Snapshot::offset`] refused.
#[cold]
fn offset_error(addr: usize, v: &View) -> Error {
    if v.n == 0 {
        return no_heap();
    }
    beyond(&format!("0x{addr:x}"), 0, addr.wrapping_sub(v.base), v.base, &format!("PE {}", v.my_pe), v)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn heap(n: i32, me: i32) -> Heap {
        Heap { base: 0x10000, size: 0x1000, mapped_size: 0x800, my_pe: me, n_pes: n, device: 3, version: (3, 4, 5), source: Source::Manual }
    }

    fn table_with(h: Heap) -> Table {
        let t = Table::new();
        t.attach(h);
        t
    }

    fn set(t: &Table, h: &Heap, specs: &[PeerSpec]) {
        t.set_peers(&Peers::new(h, specs).unwrap()).unwrap();
    }

    #[test]
    fn counts_of_pes_read_as_english() {
        assert_eq!(crate::status::pes(1), "1 PE");
        assert_eq!(crate::status::pes(4), "4 PEs");
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
        // A forgotten heap has no extent, though its other fields stay published.
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
        let specs = [PeerSpec { rank: 2, base: 0x10000 }, PeerSpec { rank: 0, base: 0x50000 }, PeerSpec { rank: 1, base: 0x90000 }];
        set(&t, &h, &specs);
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
    fn pool_reuses_buffers_and_detach_forgets() {
        let h = heap(4, 0);
        let t = table_with(h);
        let shuffled: Vec<_> = (0..4).map(|p| PeerSpec { rank: (p + 1) % 4, base: 0x10000 + (p as usize) * 0x100000 }).collect();
        for _ in 0..10 {
            set(&t, &h, &shuffled);
        }
        let m = t.master.lock();
        assert!(m.pool_usize.len() <= 2 && m.pool_u32.len() <= 4, "buffers are recycled, not accumulated");
        drop(m);
        t.detach();
        assert_eq!(t.to_global(0x10000, 0).unwrap_err().status, Status::TableNotSet);
        assert_eq!(t.table_bytes(), None);
    }
}
