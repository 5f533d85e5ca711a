//! The offset-translation table: for every PE its UPC++ rank and heap base, and rank -> PE.
//!
//! Translation is by offset: `raw = base[pe] + (sym - my_base)` and back, so nothing assumes the
//! bases are equal (they differ per PE when NVSHMEM runs without CUDA VMM).
//!
//! Storage is compressed: with uniform bases and PE == rank the table is O(1) bytes; otherwise at
//! most 16 bytes per PE (8 for the base, 4 for PE -> rank, 4 for rank -> PE), each array present
//! only when it is not uniform / the identity.
//!
//! Concurrency (the read path is lock-free, wait-free unless a writer is active): the fields
//! live in a sequence lock. A reader loads the sequence number, the fields and the array entries
//! it needs (all atomics, relaxed), then the sequence number again, and retries if it changed.
//! Writers (set_peers / attach / detach / discovery) serialise on a mutex. Arrays are never
//! freed while the process runs: a replaced array goes to a pool and is reused by a later table
//! (buffers only grow), so a reader that raced with a writer may read a stale entry, which the
//! sequence check then rejects, but never touches unmapped memory. The pool holds at most what
//! the largest tables needed (about twice the largest table, for growing sizes).

//!
//! The protocol is model-checked with loom (`loom/`: readers against publish, replace, pool reuse
//! and detach); under `--cfg loom` this file takes loom's atomics and mutex.

pub use crate::heap::Heap;
use crate::heap::Source;
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

/// One peer as given by the caller.
#[derive(Clone, Copy, Debug)]
pub struct PeerSpec {
    pub rank: i32,
    pub base: usize,
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

/// The writers' side: the heap, which arrays are in use and the pools.
struct Master {
    heap: Option<Heap>,
    peers: bool,
    bases: Option<Buf<AtomicUsize>>,
    rank_of_pe: Option<Buf<AtomicU32>>,
    pe_of_rank: Option<Buf<AtomicU32>>,
    /// The bytes of each PE's heap made addressable (`set_extent`); 0: the whole heap.
    extent: usize,
    pool_usize: Vec<Buf<AtomicUsize>>,
    pool_u32: Vec<Buf<AtomicU32>>,
}

/// A translation table (the process has one, [`TABLE`]; tests make their own).
///
/// `repr(C)` and 128-byte alignment keep the fields the readers load (64 bytes: the sequence
/// number to `pe_of_rank`) alone in one cache line; the writers' mutex and pools start on the
/// next, so a writer taking its lock never invalidates the readers' line.
#[repr(C, align(128))]
pub struct Table {
    seq: AtomicU64,
    /// The heap's PE count; 0 when no heap is known (a heap always has at least one PE).
    n_pes: AtomicU32,
    /// `n_pes` when a peer table is installed, else 0: the hot paths' one bound check.
    live_n: AtomicU32,
    my_pe: AtomicI32,
    device: AtomicI32,
    base: AtomicUsize,
    /// The bound of every translation: the extent (`set_extent`) when one is set, else the
    /// heap's size.
    size: AtomicUsize,
    bases: AtomicPtr<AtomicUsize>,
    rank_of_pe: AtomicPtr<AtomicU32>,
    pe_of_rank: AtomicPtr<AtomicU32>,
    /// The heap's own size (only the error messages read it: on the writers' cache line).
    heap_size: AtomicUsize,
    master: Mutex<Master>,
}

/// The process's table.
#[cfg(not(loom))]
pub static TABLE: Table = Table::new();

/// What one consistent read saw (for the answer, or for the error message).
#[derive(Clone, Copy)]
struct View {
    /// The heap's PE count; 0: no heap.
    n: u32,
    /// `n` when a peer table is installed; 0: no table.
    live_n: u32,
    my_pe: i32,
    base: usize,
    /// The bound: the extent, or the heap's size.
    size: usize,
    /// The heap's size.
    heap_size: usize,
}

fn take<T: Default>(pool: &mut Vec<Buf<T>>, n: usize) -> Buf<T> {
    match pool.iter().enumerate().filter(|(_, b)| b.cap >= n).min_by_key(|(_, b)| b.cap).map(|(i, _)| i) {
        Some(i) => pool.swap_remove(i),
        None => Buf::alloc(n),
    }
}

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
            size: AtomicUsize::new(0),
            bases: AtomicPtr::new(std::ptr::null_mut()),
            rank_of_pe: AtomicPtr::new(std::ptr::null_mut()),
            pe_of_rank: AtomicPtr::new(std::ptr::null_mut()),
            heap_size: AtomicUsize::new(0),
            master: Mutex::new(Master {
                heap: None,
                peers: false,
                bases: None,
                rank_of_pe: None,
                pe_of_rank: None,
                extent: 0,
                pool_usize: Vec::new(),
                pool_u32: Vec::new(),
            }),
        }
    };
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

    /// The writers' lock.
    fn lock(&self) -> MutexGuard<'_, Master> {
        #[cfg(loom)]
        return self.master.lock().unwrap();
        #[cfg(not(loom))]
        return self.master.lock();
    }

    /// Publishes the master's state into the sequence lock (caller holds the master lock).
    /// Only the fields that change are stored: every store to the readers' cache line takes it
    /// away from all of them, so a table swap that changes three pointers costs the readers
    /// five stores (with the two sequence bumps), not thirteen.
    fn store(&self, m: &Master) {
        debug_assert_eq!(m.rank_of_pe.is_some(), m.pe_of_rank.is_some(), "the rank maps are installed together");
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
        if let Some(h) = h {
            put!(self.my_pe, h.my_pe);
            put!(self.device, h.device);
            put!(self.base, h.base);
            put!(self.size, if m.extent != 0 { m.extent } else { h.size });
            put!(self.heap_size, h.size);
        }
        let p = |b: &Option<Buf<AtomicUsize>>| b.as_ref().map_or(std::ptr::null_mut(), |b| b.ptr);
        let q = |b: &Option<Buf<AtomicU32>>| b.as_ref().map_or(std::ptr::null_mut(), |b| b.ptr);
        put!(self.bases, p(&m.bases));
        put!(self.rank_of_pe, q(&m.rank_of_pe));
        put!(self.pe_of_rank, q(&m.pe_of_rank));
        self.seq.store(s + 2, Ordering::Release);
    }

    /// Returns unpublished arrays to the pool.
    fn pool(m: &mut Master, old: (Option<Buf<AtomicUsize>>, Option<Buf<AtomicU32>>, Option<Buf<AtomicU32>>)) {
        m.pool_usize.extend(old.0);
        m.pool_u32.extend(old.1);
        m.pool_u32.extend(old.2);
    }

    /// Sets the heap (None forgets heap and table). The peer table is kept when the heap is the
    /// same one (only its mapped extent changed), dropped otherwise.
    pub fn set_heap(&self, heap: Option<Heap>) {
        let mut m = self.lock();
        let keep = matches!((m.heap, heap), (Some(a), Some(b)) if a.same_heap(&b));
        m.heap = heap;
        if !keep {
            m.extent = 0;
        }
        if keep {
            self.store(&m);
        } else {
            self.unpublish_peers(&mut m);
        }
    }

    /// Forgets the heap only if it came from discovery (NVSHMEM is gone).
    pub fn forget_discovered(&self) {
        let mut m = self.lock();
        if m.heap.is_some_and(|h| h.source != Source::Manual) {
            m.heap = None;
            m.extent = 0;
            self.unpublish_peers(&mut m);
        }
    }

    /// Drops the peer table and publishes the master's state: unpublish first (the store), then
    /// pool the arrays, so no buffer is rewritten while published.
    fn unpublish_peers(&self, m: &mut Master) {
        m.peers = false;
        let old = (m.bases.take(), m.rank_of_pe.take(), m.pe_of_rank.take());
        self.store(m);
        Self::pool(m, old);
    }

    pub fn heap(&self) -> Option<Heap> {
        self.lock().heap
    }

    /// Limits every translation to the first `bytes` of each PE's heap (0: the whole heap).
    /// Kept while the heap stays the same one; a new heap or none clears it.
    pub fn set_extent(&self, bytes: usize) -> Result<()> {
        let mut m = self.lock();
        let Some(h) = m.heap else { return Err(no_heap()) };
        if bytes > h.size {
            crate::fail!(InvalidArgument, "extent {bytes} exceeds the heap size {} of PE {}", h.size, h.my_pe);
        }
        m.extent = bytes;
        self.store(&m);
        Ok(())
    }

    /// The local heap's base, size and PE, from one consistent lock-free read ((0, 0, 0) when no
    /// heap is known).
    pub fn extent(&self) -> (usize, usize, i32) {
        let (v, ()) = self.read(&self.rank_of_pe, |_, _, _| ());
        // A forgotten heap leaves its fields published (only what changes is stored): n says.
        if v.n == 0 { (0, 0, 0) } else { (v.base, v.size, v.my_pe) }
    }

    /// The bound and the heap's size, for a message (`local_ptr`'s).
    pub fn bounds(&self) -> (usize, usize) {
        let (v, ()) = self.read(&self.rank_of_pe, |_, _, _| ());
        (v.size, v.heap_size)
    }

    /// Bytes the current peer table holds (None: no table). Lock-free: one consistent read.
    pub fn table_bytes(&self) -> Option<usize> {
        // rank_of_pe and pe_of_rank are installed together (set_peers), 4 bytes per PE each.
        let (v, (bases, maps)) = self.read(&self.rank_of_pe, |_, b, r| (!b.is_null(), !r.is_null()));
        let n = v.live_n as usize;
        (n != 0).then(|| usize::from(bases) * n * 8 + usize::from(maps) * n * 8)
    }

    /// Validates `specs` (indexed by PE) against `heap` and installs them. Fails when the current
    /// heap is not `heap`.
    pub fn set_peers(&self, heap: &Heap, specs: &[PeerSpec]) -> Result<()> {
        let n = specs.len();
        if n != heap.n_pes as usize {
            crate::fail!(InvalidArgument, "{n} peers given but the heap has {}", crate::status::pes(heap.n_pes));
        }
        let mine = specs[heap.my_pe as usize];
        if mine.base != heap.base {
            crate::fail!(
                InvalidArgument,
                "the entry for my PE {} has base 0x{:x}, but the heap base is 0x{:x}",
                heap.my_pe,
                mine.base,
                heap.base
            );
        }
        let mut pe_of_rank = vec![u32::MAX; n];
        for (pe, s) in specs.iter().enumerate() {
            if s.rank < 0 || s.rank as usize >= n {
                crate::fail!(BadRank, "PE {pe} maps to rank {}, not in [0, {n}) (ranks must be a permutation of the PEs)", s.rank);
            }
            if s.base == 0 || s.base.checked_add(heap.size).is_none() {
                crate::fail!(InvalidArgument, "PE {pe} has heap base 0x{:x}, which cannot hold a 0x{:x}-byte heap", s.base, heap.size);
            }
            let slot = &mut pe_of_rank[s.rank as usize];
            if *slot != u32::MAX {
                crate::fail!(BadRank, "rank {} is given to both PE {} and PE {pe}", s.rank, *slot);
            }
            *slot = pe as u32;
        }
        let uniform = specs.iter().all(|s| s.base == heap.base);
        let identity = specs.iter().enumerate().all(|(pe, s)| s.rank as usize == pe);

        let mut m = self.lock();
        if !m.heap.is_some_and(|h| h.same_heap(heap)) {
            crate::fail!(InvalidArgument, "the heap changed while the table was being built");
        }
        // The bug the loom model must catch (loom/, `--cfg uxn_loom_bug`): retiring the published
        // arrays to the pool first lets `take` hand one back, rewritten while readers read it.
        #[cfg(uxn_loom_bug)]
        {
            let old = (m.bases.take(), m.rank_of_pe.take(), m.pe_of_rank.take());
            Self::pool(&mut m, old);
        }
        // New arrays come from the pool *before* the published ones are retired: a buffer that
        // readers may still be reading is never rewritten until a sequence bump has retired it.
        let bases = (!uniform).then(|| {
            let b = take(&mut m.pool_usize, n);
            for (slot, s) in b.slice().iter().zip(specs) {
                slot.store(s.base, Ordering::Relaxed);
            }
            b
        });
        let ranks = (!identity).then(|| {
            let r = take(&mut m.pool_u32, n);
            for (slot, s) in r.slice().iter().zip(specs) {
                slot.store(s.rank as u32, Ordering::Relaxed);
            }
            let p = take(&mut m.pool_u32, n);
            for (slot, v) in p.slice().iter().zip(&pe_of_rank) {
                slot.store(*v, Ordering::Relaxed);
            }
            (r, p)
        });
        let old = (std::mem::replace(&mut m.bases, bases), m.rank_of_pe.take(), m.pe_of_rank.take());
        if let Some((r, p)) = ranks {
            m.rank_of_pe = Some(r);
            m.pe_of_rank = Some(p);
        }
        m.peers = true;
        self.store(&m);
        // Only now, after the sequence bump, may a later table reuse the old buffers.
        Self::pool(&mut m, old);
        Ok(())
    }

    /// One consistent read, retried until no writer interfered: [`Table::open`], then `f` with
    /// the view and the array pointers (`bases` and `other`, as `open` gives them; `f` may read
    /// entries below `view.live_n`), then [`Table::unchanged`]. The same protocol as the hot
    /// paths, which make one attempt instead of retrying.
    #[inline(always)]
    fn read<R>(&self, other: &AtomicPtr<AtomicU32>, f: impl Fn(&View, *const AtomicUsize, *const AtomicU32) -> R) -> (View, R) {
        loop {
            if let Some((s1, live_n, bases, other)) = self.open(other) {
                let v = View {
                    n: self.n_pes.load(Ordering::Relaxed),
                    live_n,
                    my_pe: self.my_pe.load(Ordering::Relaxed),
                    base: self.base.load(Ordering::Relaxed),
                    size: self.size.load(Ordering::Relaxed),
                    heap_size: self.heap_size.load(Ordering::Relaxed),
                };
                let r = f(&v, bases, other);
                if self.unchanged(s1) {
                    return (v, r);
                }
            }
            spin();
        }
    }

    /// The offset of `addr` in the local heap.
    #[inline]
    pub fn offset(&self, addr: usize) -> Result<usize> {
        let (v, ()) = self.read(&self.rank_of_pe, |_, _, _| ());
        if v.n == 0 {
            return Err(no_heap());
        }
        let off = addr.wrapping_sub(v.base);
        if off < v.size { Ok(off) } else { Err(out_of_heap(addr, 0, &v)) }
    }

    /// The UPC++ rank of PE `pe` and the offset of `sym` in the local heap, with the `len` bytes
    /// at `sym` (0: the address alone) inside the heap and the extent.
    pub fn to_offset(&self, sym: usize, len: usize, pe: i32) -> Result<(i32, usize)> {
        #[allow(unsafe_code)]
        let (v, rank) = self.read(&self.rank_of_pe, |v, _, ranks| {
            if (pe as u32) >= v.live_n {
                0
            } else if ranks.is_null() {
                pe as u32
            } else {
                // SAFETY: pe < live_n <= the capacity of the array published with it.
                unsafe { (*ranks.add(pe as usize)).load(Ordering::Relaxed) }
            }
        });
        if v.n == 0 {
            return Err(no_heap());
        }
        if v.live_n == 0 {
            return Err(no_peers(&v));
        }
        let off = sym.wrapping_sub(v.base);
        if off >= v.size || len > v.size - off {
            return Err(out_of_heap(sym, len, &v));
        }
        if (pe as u32) >= v.live_n {
            return Err(Error::new(Status::BadPe, format!("PE {pe} is not in [0, {}) (address 0x{sym:x})", v.n)));
        }
        Ok((rank as i32, off))
    }

    /// The opening of every read (the one sequence-lock protocol; [`Table::unchanged`] closes
    /// it): the sequence number (None while a writer is active), the bound (`live_n`: 0 when no
    /// peer table is installed) and the array pointers entries are read through (`bases` and
    /// `other`, which is `rank_of_pe` or `pe_of_rank`), then a re-check of the sequence number, so
    /// that the bound and the pointers come from one table before an entry is read: then every
    /// index < the bound is inside the arrays (buffers never shrink and are never freed). Other
    /// fields need only the closing check.
    #[inline(always)]
    fn open(&self, other: &AtomicPtr<AtomicU32>) -> Option<(u64, u32, *const AtomicUsize, *const AtomicU32)> {
        let s1 = self.begin()?;
        let n = self.live_n.load(Ordering::Relaxed);
        let bases = self.bases.load(Ordering::Relaxed);
        let other = other.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if s1 != self.seq.load(Ordering::Relaxed) {
            return None;
        }
        Some((s1, n, bases, other))
    }

    /// The sequence number a read starts from; None while a writer is active.
    #[inline(always)]
    fn begin(&self) -> Option<u64> {
        let s1 = self.seq.load(Ordering::Acquire);
        (s1 & 1 == 0).then_some(s1)
    }

    /// Runs `f`, which may make several reads, until no writer published during it: all its
    /// reads then come from one table (`begin`, then `unchanged`, around them).
    pub fn consistent<R>(&self, f: impl Fn() -> R) -> R {
        loop {
            if let Some(s1) = self.begin() {
                let r = f();
                if self.unchanged(s1) {
                    return r;
                }
            }
            spin();
        }
    }

    /// The closing of every read: true when no writer published since `open` returned `s1`.
    #[inline(always)]
    fn unchanged(&self, s1: u64) -> bool {
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == s1
    }

    /// The hot path of `to_global`: one attempt, None on any failure *or* a race with a writer
    /// (then `to_global` retries and says why). Written so that the exported function needs no
    /// stack frame (few live values) and each failure is one conditional jump to the slow path.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub fn try_to_global(&self, sym: usize, pe: i32) -> Option<Global> {
        let (s1, n, bases, ranks) = self.open(&self.rank_of_pe)?;
        if (pe as u32) >= n {
            return None;
        }
        let off = sym.wrapping_sub(self.base.load(Ordering::Relaxed));
        if off >= self.size.load(Ordering::Relaxed) {
            return None;
        }
        // Uniform bases: the answer is `sym` itself. The per-PE arrays are behind `cold_path`, so
        // the uniform layout (CUDA VMM's default: one base everywhere, PE == rank) runs straight
        // through and a per-PE array costs a jump out and back (measured on the GPU host: this
        // layout beat a neutral one and a cmov-chosen pointer: the layout A/B in docs/bench-history.md,
        // in git history before c796a2d).
        // SAFETY: pe < n <= the capacity of the arrays published with n (checked consistent by `open`).
        let raw = if bases.is_null() {
            sym
        } else {
            cold_path();
            unsafe { (*bases.add(pe as usize)).load(Ordering::Relaxed) }.wrapping_add(off)
        };
        let r = if ranks.is_null() {
            pe as u32
        } else {
            cold_path();
            unsafe { (*ranks.add(pe as usize)).load(Ordering::Relaxed) }
        };
        // Both loaded unconditionally, so the choice is a cmov: a branch on `pe == my_pe` would be
        // mispredicted about once in n_pes calls for random PEs (every other call at 2 PEs).
        let (my_pe, device) = (self.my_pe.load(Ordering::Relaxed), self.device.load(Ordering::Relaxed));
        let device = if pe == my_pe { device } else { -1 };
        self.unchanged(s1).then_some(Global { rank: r as i32, pe, device, raw })
    }

    /// The hot path of `from_global`: one attempt, None on any failure or a race with a writer.
    #[inline(always)]
    pub fn try_from_global(&self, rank: i32, raw: usize) -> Option<(usize, i32)> {
        let (s1, n, bases, pes) = self.open(&self.pe_of_rank)?;
        if (rank as u32) >= n {
            return None;
        }
        let (pe, b) = self.pe_and_base(rank, n, bases, pes);
        let base = self.base.load(Ordering::Relaxed);
        let off = raw.wrapping_sub(b);
        if off >= self.size.load(Ordering::Relaxed) {
            return None;
        }
        self.unchanged(s1).then_some((base.wrapping_add(off), pe as i32))
    }

    /// The PE of `rank` and that PE's heap base, inside a read opened by [`Table::open`] with
    /// `pe_of_rank` (`n`, `bases`, `pes` as it gave them; `rank` < `n`): the one lookup of both
    /// `from_global` paths.
    #[inline(always)]
    #[allow(unsafe_code)]
    fn pe_and_base(&self, rank: i32, n: u32, bases: *const AtomicUsize, pes: *const AtomicU32) -> (u32, usize) {
        // SAFETY: rank < n; a PE read from pe_of_rank is clamped to < n (a racing writer may be
        // refilling a retired buffer; the closing sequence check then rejects the answer).
        let pe = if pes.is_null() {
            rank as u32
        } else {
            cold_path();
            unsafe { (*pes.add(rank as usize)).load(Ordering::Relaxed) }.min(n - 1)
        };
        // The base through a pointer chosen by a cmov and valid in both layouts (without a bases
        // array, `base` itself), so uniform and per-PE bases both run straight through (measured
        // on the GPU host: better here than the layout of try_to_global; the layout A/B in
        // docs/bench-history.md, in git history before c796a2d).
        // SAFETY: pe < n <= the capacity of the arrays published with n (checked consistent by `open`).
        let bp: *const AtomicUsize = if bases.is_null() { &self.base } else { unsafe { bases.add(pe as usize) } };
        (pe, unsafe { (*bp).load(Ordering::Relaxed) })
    }

    /// `sym` (an address in my heap) on PE `pe`: the hot path's answer (the one translation),
    /// tried again while a writer races with it; otherwise why not, from one consistent view.
    pub fn to_global(&self, sym: usize, pe: i32) -> Result<Global> {
        loop {
            if let Some(g) = self.try_to_global(sym, pe) {
                return Ok(g);
            }
            let (v, ()) = self.read(&self.rank_of_pe, |_, _, _| ());
            if (pe as u32) >= v.live_n || sym.wrapping_sub(v.base) >= v.size {
                return Err(to_global_error(sym, pe, &v));
            }
            spin(); // the table has the answer: a writer raced with the attempt
        }
    }

    /// `raw` (an address on rank `rank`) as `(symmetric address in my heap, PE)`: the hot path's
    /// answer, tried again while a writer races with it; otherwise why not.
    pub fn from_global(&self, rank: i32, raw: usize) -> Result<(usize, i32)> {
        loop {
            if let Some(a) = self.try_from_global(rank, raw) {
                return Ok(a);
            }
            // The rank's PE and base, for the reason (indices only below the bound).
            let (v, (pe, b)) = self.read(&self.pe_of_rank, |v, bases, pes| {
                if (rank as u32) >= v.live_n { (0, 0) } else { self.pe_and_base(rank, v.live_n, bases, pes) }
            });
            if (rank as u32) >= v.live_n || raw.wrapping_sub(b) >= v.size {
                return Err(from_global_error(rank, raw, pe, b, &v));
            }
            spin();
        }
    }
}

/// Marks the branch it is called in as unlikely, so the compiler lays the other one out as the
/// straight path. `std::hint::cold_path` does this from Rust 1.95; the crate supports 1.85, where
/// a call to an empty `#[cold]` function, inlined, has the same effect.
#[cold]
#[inline(always)]
fn cold_path() {}

fn no_heap() -> Error {
    Error::new(Status::TableNotSet, "no heap is known: call upcxx_extra_nvshmem_heap_query or upcxx_extra_nvshmem_attach first")
}

fn no_peers(v: &View) -> Error {
    Error::new(
        Status::TableNotSet,
        format!(
            "the peer table is not set for heap [0x{:x}, 0x{:x}) of PE {}: call upcxx_extra_nvshmem_set_peers first",
            v.base,
            v.base + v.size,
            v.my_pe
        ),
    )
}

/// The bytes `[addr, addr + len)` (`len` 0: the address alone) are not all inside the local
/// heap and the extent: which of the two they leave, named.
fn out_of_heap(addr: usize, len: usize, v: &View) -> Error {
    let off = addr.wrapping_sub(v.base);
    let range = format!("[0x{:x}, 0x{:x})", v.base, v.base + v.heap_size);
    let who = format!("PE {}", v.my_pe);
    if off >= v.heap_size {
        return Error::new(Status::OutOfHeap, format!("address 0x{addr:x} is outside the symmetric heap {range} of {who}"));
    }
    Error::new(Status::OutOfHeap, past(&format!("0x{addr:x}"), len, off, v.size, v.heap_size, &who, &range))
}

/// Why the `len` bytes (0: the address alone) at `at` (an address, and where: "0x10 on rank 1"),
/// at offset `off` < `heap_size` in the heap of `who` ("PE 1") spanning `range`, are refused by
/// the bound `limit`: they run past the extent (`set_extent`) or past the heap's end.
pub(crate) fn past(at: &str, len: usize, off: usize, limit: usize, heap_size: usize, who: &str, range: &str) -> String {
    let (what, verb) = if len == 0 { (format!("address {at}"), "runs") } else { (format!("the {len} bytes at {at}"), "run") };
    if limit < heap_size && len <= heap_size - off {
        format!("{what} {verb} past the {limit} bytes made addressable (set_extent) of {who}'s heap {range}")
    } else {
        format!("{what} {verb} past the end of the symmetric heap {range} of {who} (offset {off} of {heap_size} bytes)")
    }
}

#[cold]
fn to_global_error(sym: usize, pe: i32, v: &View) -> Error {
    if v.n == 0 {
        return no_heap();
    }
    if v.live_n == 0 {
        return no_peers(v);
    }
    if sym.wrapping_sub(v.base) >= v.size {
        return out_of_heap(sym, 0, v);
    }
    Error::new(Status::BadPe, format!("PE {pe} is not in [0, {}) (address 0x{sym:x})", v.n))
}

#[cold]
fn from_global_error(rank: i32, raw: usize, pe: u32, base: usize, v: &View) -> Error {
    if v.n == 0 {
        return no_heap();
    }
    if v.live_n == 0 {
        return no_peers(v);
    }
    if (rank as u32) >= v.n {
        return Error::new(Status::BadRank, format!("rank {rank} is not in [0, {}) (address 0x{raw:x})", v.n));
    }
    let off = raw.wrapping_sub(base);
    if off < v.heap_size {
        let range = format!("[0x{base:x}, 0x{:x})", base + v.heap_size);
        return Error::new(Status::OutOfHeap, past(&format!("0x{raw:x} on rank {rank}"), 0, off, v.size, v.heap_size, &format!("PE {pe}"), &range));
    }
    Error::new(
        Status::OutOfHeap,
        format!("address 0x{raw:x} on rank {rank} (PE {pe}) is outside that PE's heap [0x{base:x}, 0x{:x})", base + v.heap_size),
    )
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn heap(n: i32, me: i32) -> Heap {
        Heap { base: 0x10000, size: 0x1000, mapped_size: 0x800, my_pe: me, n_pes: n, device: 3, version: (3, 4, 5), source: Source::Manual }
    }

    fn table_with(h: Heap) -> Table {
        let t = Table::new();
        t.set_heap(Some(h));
        t
    }

    #[test]
    fn counts_of_pes_read_as_english() {
        assert_eq!(crate::status::pes(1), "1 PE");
        assert_eq!(crate::status::pes(4), "4 PEs");
        let t = Table::new();
        let h = Heap { base: 0x1000, size: 0x1000, mapped_size: 0x1000, my_pe: 0, n_pes: 1, device: -1, version: (-1, -1, -1), source: Source::Manual };
        t.set_heap(Some(h));
        let e = t.set_peers(&h, &[PeerSpec { rank: 0, base: 0x1000 }, PeerSpec { rank: 1, base: 0x1000 }]).unwrap_err();
        assert!(e.message.ends_with("the heap has 1 PE"), "{}", e.message);
    }

    #[test]
    fn uniform_identity_is_o1() {
        let h = heap(4, 1);
        let t = table_with(h);
        let specs: Vec<_> = (0..4).map(|r| PeerSpec { rank: r, base: h.base }).collect();
        t.set_peers(&h, &specs).unwrap();
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
        t.set_peers(&h, &bases).unwrap();
        assert_eq!(t.table_bytes(), Some(4 * 8));
        // One base, shuffled ranks: the two rank maps only (4 + 4 bytes per PE).
        let ranks: Vec<_> = (0..4).map(|r| PeerSpec { rank: 3 - r, base: 0x10000 }).collect();
        t.set_peers(&h, &ranks).unwrap();
        assert_eq!(t.table_bytes(), Some(4 * 8));
        // A forgotten heap has no extent, though its fields stay published.
        t.set_heap(None);
        assert_eq!((t.table_bytes(), t.extent()), (None, (0, 0, 0)));
    }

    #[test]
    fn consistent_reads_come_from_one_table() {
        let h = heap(2, 0);
        let t = table_with(h);
        t.set_peers(&h, &[PeerSpec { rank: 0, base: 0x10000 }, PeerSpec { rank: 1, base: 0x50000 }]).unwrap();
        let (sym, extent) = t.consistent(|| (t.from_global(1, 0x50010), t.extent()));
        assert_eq!((sym.unwrap(), extent), ((0x10010, 1), (0x10000, 0x1000, 0)));
    }

    #[test]
    fn different_bases_and_shuffled_ranks() {
        let h = heap(3, 0);
        let t = table_with(h);
        let specs = [
            PeerSpec { rank: 2, base: 0x10000 },
            PeerSpec { rank: 0, base: 0x50000 },
            PeerSpec { rank: 1, base: 0x90000 },
        ];
        t.set_peers(&h, &specs).unwrap();
        assert_eq!(t.table_bytes(), Some(3 * 16));
        let g = t.to_global(0x10020, 1).unwrap();
        assert_eq!((g.rank, g.raw), (0, 0x50020));
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
    fn bad_tables_are_refused() {
        let h = heap(2, 0);
        let t = table_with(h);
        let dup = [PeerSpec { rank: 1, base: 0x10000 }, PeerSpec { rank: 1, base: 0x10000 }];
        assert_eq!(t.set_peers(&h, &dup).unwrap_err().status, Status::BadRank);
        let wrong_mine = [PeerSpec { rank: 0, base: 0x20000 }, PeerSpec { rank: 1, base: 0x10000 }];
        assert_eq!(t.set_peers(&h, &wrong_mine).unwrap_err().status, Status::InvalidArgument);
        let null_base = [PeerSpec { rank: 0, base: 0x10000 }, PeerSpec { rank: 1, base: 0 }];
        assert_eq!(t.set_peers(&h, &null_base).unwrap_err().status, Status::InvalidArgument);
        let short = [PeerSpec { rank: 0, base: 0x10000 }];
        assert_eq!(t.set_peers(&h, &short).unwrap_err().status, Status::InvalidArgument);
        assert_eq!(t.to_global(0x10000, 0).unwrap_err().status, Status::TableNotSet);
        let other = Heap { base: 0x20000, ..h };
        let ok = [PeerSpec { rank: 0, base: 0x20000 }, PeerSpec { rank: 1, base: 0x10000 }];
        assert_eq!(t.set_peers(&other, &ok).unwrap_err().status, Status::InvalidArgument);
    }

    #[test]
    fn pool_reuses_buffers_and_detach_forgets() {
        let h = heap(4, 0);
        let t = table_with(h);
        let shuffled: Vec<_> = (0..4).map(|p| PeerSpec { rank: (p + 1) % 4, base: 0x10000 + (p as usize) * 0x100000 }).collect();
        for _ in 0..10 {
            t.set_peers(&h, &shuffled).unwrap();
        }
        let m = t.master.lock();
        assert!(m.pool_usize.len() <= 2 && m.pool_u32.len() <= 4, "buffers are recycled, not accumulated");
        drop(m);
        t.set_heap(None);
        assert_eq!(t.to_global(0x10000, 0).unwrap_err().status, Status::TableNotSet);
        assert_eq!(t.table_bytes(), None);
    }
}
