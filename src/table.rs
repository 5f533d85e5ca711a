//! The offset-translation table: for every PE its UPC++ rank and heap base, and rank -> PE.
//!
//! Translation is by offset: `raw = base[pe] + (sym - my_base)` and back, so nothing assumes the
//! bases are equal (they differ per PE when NVSHMEM runs without CUDA VMM).
//!
//! Storage is compressed: with uniform bases and PE == rank the table is O(1) bytes; otherwise at
//! most 16 bytes per PE (8 for the base, 4 for PE -> rank, 4 for rank -> PE), each array present
//! only when it is not the identity / uniform.
//!
//! Concurrency: a table is immutable once built and published as an `Arc` with a generation
//! number. Readers keep a thread-local `(generation, Arc)` and, on the hot path, only compare one
//! atomic load with it: no lock, no reference-count traffic, no shared cache line written. A
//! writer (set_peers / attach / detach) swaps the table under a mutex and bumps the generation;
//! a reader that sees the new generation takes the mutex once to pick up the new `Arc`. An old
//! table is freed when the last thread that cached it picks up a newer one or exits.

use crate::discovery::Source;
use crate::status::{Error, Result, Status};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The local heap, as attached by hand or discovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heap {
    pub base: usize,
    pub size: usize,
    pub mapped_size: usize,
    pub my_pe: i32,
    pub n_pes: i32,
    pub device: i32,
    pub version: (i32, i32, i32),
    pub source: Source,
}

impl Heap {
    /// Checks a description given by a caller.
    pub fn check(&self) -> Result<()> {
        if self.base == 0 {
            crate::fail!(InvalidArgument, "heap base is NULL");
        }
        if self.size == 0 {
            crate::fail!(InvalidArgument, "heap size is 0");
        }
        if self.base.checked_add(self.size).is_none() {
            crate::fail!(InvalidArgument, "heap [0x{:x}, +0x{:x}) overflows the address space", self.base, self.size);
        }
        if self.mapped_size > self.size {
            crate::fail!(InvalidArgument, "mapped_size 0x{:x} exceeds the heap size 0x{:x}", self.mapped_size, self.size);
        }
        if self.n_pes <= 0 {
            crate::fail!(InvalidArgument, "n_pes is {}", self.n_pes);
        }
        if self.my_pe < 0 || self.my_pe >= self.n_pes {
            crate::fail!(BadPe, "my_pe {} is not in [0, {})", self.my_pe, self.n_pes);
        }
        Ok(())
    }

    /// Same heap (base, size, PE, PE count), whatever its mapped extent.
    pub fn same_heap(&self, other: &Heap) -> bool {
        (self.base, self.size, self.my_pe, self.n_pes) == (other.base, other.size, other.my_pe, other.n_pes)
    }

    fn range(&self) -> String {
        format!("[0x{:x}, 0x{:x})", self.base, self.base + self.size)
    }

    /// The offset of `addr` in this heap.
    #[inline]
    pub fn offset_of(&self, addr: usize) -> Result<usize> {
        let off = addr.wrapping_sub(self.base);
        if off < self.size {
            Ok(off)
        } else {
            Err(Error::new(
                Status::OutOfHeap,
                format!("address 0x{addr:x} is outside the symmetric heap {} of PE {}", self.range(), self.my_pe),
            ))
        }
    }
}

/// Per-PE data; every array is absent when it would be uniform / the identity.
#[derive(Clone, Debug, Default)]
pub struct Peers {
    /// Heap base of each PE (absent: all equal to the local base).
    bases: Option<Arc<[usize]>>,
    /// UPC++ rank of each PE (absent: rank == PE).
    rank_of_pe: Option<Arc<[u32]>>,
    /// PE of each rank (absent: PE == rank).
    pe_of_rank: Option<Arc<[u32]>>,
}

/// One peer as given by the caller.
#[derive(Clone, Copy, Debug)]
pub struct PeerSpec {
    pub rank: i32,
    pub base: usize,
}

/// What the table holds: the heap and, once set, the peers.
#[derive(Debug)]
pub struct Snapshot {
    pub heap: Heap,
    pub peers: Option<Peers>,
}

/// A translated global pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Global {
    pub rank: i32,
    pub pe: i32,
    pub device: i32,
    pub raw: usize,
}

impl Peers {
    /// Builds the compressed table, checking every entry.
    pub fn build(heap: &Heap, specs: &[PeerSpec]) -> Result<Peers> {
        let n = specs.len();
        if n != heap.n_pes as usize {
            crate::fail!(InvalidArgument, "{n} peers given but the heap has {} PEs", heap.n_pes);
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
        Ok(Peers {
            bases: (!uniform).then(|| specs.iter().map(|s| s.base).collect()),
            rank_of_pe: (!identity).then(|| specs.iter().map(|s| s.rank as u32).collect()),
            pe_of_rank: (!identity).then(|| pe_of_rank.into()),
        })
    }

    /// Heap bytes this table holds.
    pub fn bytes(&self) -> usize {
        self.bases.as_ref().map_or(0, |b| b.len() * 8)
            + self.rank_of_pe.as_ref().map_or(0, |b| b.len() * 4)
            + self.pe_of_rank.as_ref().map_or(0, |b| b.len() * 4)
    }
}

impl Snapshot {
    #[inline]
    fn peers(&self) -> Result<&Peers> {
        self.peers.as_ref().ok_or_else(|| {
            Error::new(
                Status::TableNotSet,
                format!(
                    "the peer table is not set for heap [0x{:x}, 0x{:x}) of PE {}: call upcxx_extra_nvshmem_set_peers first",
                    self.heap.base,
                    self.heap.base + self.heap.size,
                    self.heap.my_pe
                ),
            )
        })
    }

    /// `sym` (an address in my heap) on PE `pe`.
    #[inline]
    pub fn to_global(&self, sym: usize, pe: i32) -> Result<Global> {
        let peers = self.peers()?;
        let h = &self.heap;
        let off = h.offset_of(sym)?;
        if (pe as u32) >= h.n_pes as u32 {
            crate::fail!(BadPe, "PE {pe} is not in [0, {}) (address 0x{sym:x})", h.n_pes);
        }
        let i = pe as usize;
        let base = match &peers.bases {
            None => h.base,
            Some(b) => b[i],
        };
        let rank = match &peers.rank_of_pe {
            None => pe,
            Some(r) => r[i] as i32,
        };
        let device = if pe == h.my_pe { h.device } else { -1 };
        Ok(Global { rank, pe, device, raw: base + off })
    }

    /// `raw` (an address on rank `rank`) as `(symmetric address in my heap, PE)`.
    #[inline]
    pub fn from_global(&self, rank: i32, raw: usize) -> Result<(usize, i32)> {
        let peers = self.peers()?;
        let h = &self.heap;
        if (rank as u32) >= h.n_pes as u32 {
            crate::fail!(BadRank, "rank {rank} is not in [0, {}) (address 0x{raw:x})", h.n_pes);
        }
        let pe = match &peers.pe_of_rank {
            None => rank,
            Some(m) => m[rank as usize] as i32,
        };
        let base = match &peers.bases {
            None => h.base,
            Some(b) => b[pe as usize],
        };
        let off = raw.wrapping_sub(base);
        if off >= h.size {
            crate::fail!(
                OutOfHeap,
                "address 0x{raw:x} on rank {rank} (PE {pe}) is outside that PE's heap [0x{base:x}, 0x{:x})",
                base + h.size
            );
        }
        Ok((h.base + off, pe))
    }
}

static CURRENT: Mutex<Option<Arc<Snapshot>>> = Mutex::new(None);
static GENERATION: AtomicU64 = AtomicU64::new(0);

struct Cached {
    generation: u64,
    snapshot: Option<Arc<Snapshot>>,
}

thread_local! {
    static CACHE: RefCell<Cached> = const { RefCell::new(Cached { generation: 0, snapshot: None }) };
}

/// Publishes a new snapshot (None = forget the heap and the table).
pub fn publish(snapshot: Option<Snapshot>) {
    let mut cur = CURRENT.lock();
    *cur = snapshot.map(Arc::new);
    GENERATION.fetch_add(1, Ordering::Release);
}

/// The current snapshot, for writers and slow paths.
pub fn current() -> Option<Arc<Snapshot>> {
    CURRENT.lock().clone()
}

/// Replaces the snapshot under the writers' lock with `f(current)`.
pub fn update(f: impl FnOnce(Option<&Snapshot>) -> Result<Option<Snapshot>>) -> Result<()> {
    let mut cur = CURRENT.lock();
    let next = f(cur.as_deref())?;
    *cur = next.map(Arc::new);
    GENERATION.fetch_add(1, Ordering::Release);
    Ok(())
}

#[cold]
fn refresh(c: &mut Cached) {
    let cur = CURRENT.lock();
    c.generation = GENERATION.load(Ordering::Acquire);
    c.snapshot = cur.clone();
}

/// Runs `f` on the current snapshot: the read path (lock-free unless the table just changed).
#[inline]
pub fn with_snapshot<R>(f: impl FnOnce(Option<&Snapshot>) -> R) -> R {
    let generation = GENERATION.load(Ordering::Acquire);
    match CACHE.try_with(|c| c as *const RefCell<Cached>) {
        Ok(p) => {
            // SAFETY: the pointer is to this thread's live slot, used before this call returns.
            let mut c = unsafe { &*p }.borrow_mut();
            if c.generation != generation {
                refresh(&mut c);
            }
            f(c.snapshot.as_deref())
        }
        // Thread teardown: no cache; read under the lock.
        Err(_) => f(CURRENT.lock().as_deref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap(n: i32, me: i32) -> Heap {
        Heap { base: 0x10000, size: 0x1000, mapped_size: 0x800, my_pe: me, n_pes: n, device: 3, version: (3, 4, 5), source: Source::Manual }
    }

    #[test]
    fn uniform_identity_is_o1() {
        let h = heap(4, 1);
        let specs: Vec<_> = (0..4).map(|r| PeerSpec { rank: r, base: h.base }).collect();
        let p = Peers::build(&h, &specs).unwrap();
        assert_eq!(p.bytes(), 0);
        let s = Snapshot { heap: h, peers: Some(p) };
        assert_eq!(s.to_global(0x10010, 2).unwrap(), Global { rank: 2, pe: 2, device: -1, raw: 0x10010 });
        assert_eq!(s.to_global(0x10010, 1).unwrap().device, 3);
        assert_eq!(s.from_global(2, 0x10010).unwrap(), (0x10010, 2));
    }

    #[test]
    fn different_bases_and_shuffled_ranks() {
        let h = heap(3, 0);
        let specs = [
            PeerSpec { rank: 2, base: 0x10000 },
            PeerSpec { rank: 0, base: 0x50000 },
            PeerSpec { rank: 1, base: 0x90000 },
        ];
        let p = Peers::build(&h, &specs).unwrap();
        assert_eq!(p.bytes(), 3 * 16);
        let s = Snapshot { heap: h, peers: Some(p) };
        let g = s.to_global(0x10020, 1).unwrap();
        assert_eq!((g.rank, g.raw), (0, 0x50020));
        assert_eq!(s.from_global(0, 0x50020).unwrap(), (0x10020, 1));
        assert_eq!(s.from_global(1, 0x90fff).unwrap(), (0x10fff, 2));
        assert_eq!(s.from_global(1, 0x91000).unwrap_err().status, Status::OutOfHeap);
        assert_eq!(s.from_global(1, 0x8ffff).unwrap_err().status, Status::OutOfHeap);
        assert_eq!(s.to_global(0x10020, 3).unwrap_err().status, Status::BadPe);
        assert_eq!(s.to_global(0x10020, -1).unwrap_err().status, Status::BadPe);
        assert_eq!(s.from_global(3, 0x10020).unwrap_err().status, Status::BadRank);
        assert_eq!(s.to_global(0x11000, 0).unwrap_err().status, Status::OutOfHeap);
        assert_eq!(s.to_global(0xffff, 0).unwrap_err().status, Status::OutOfHeap);
    }

    #[test]
    fn bad_tables_are_refused() {
        let h = heap(2, 0);
        let dup = [PeerSpec { rank: 1, base: 0x10000 }, PeerSpec { rank: 1, base: 0x10000 }];
        assert_eq!(Peers::build(&h, &dup).unwrap_err().status, Status::BadRank);
        let wrong_mine = [PeerSpec { rank: 0, base: 0x20000 }, PeerSpec { rank: 1, base: 0x10000 }];
        assert_eq!(Peers::build(&h, &wrong_mine).unwrap_err().status, Status::InvalidArgument);
        let null_base = [PeerSpec { rank: 0, base: 0x10000 }, PeerSpec { rank: 1, base: 0 }];
        assert_eq!(Peers::build(&h, &null_base).unwrap_err().status, Status::InvalidArgument);
        let short = [PeerSpec { rank: 0, base: 0x10000 }];
        assert_eq!(Peers::build(&h, &short).unwrap_err().status, Status::InvalidArgument);
        let s = Snapshot { heap: h, peers: None };
        assert_eq!(s.to_global(0x10000, 0).unwrap_err().status, Status::TableNotSet);
    }
}
