//! A peer table as a caller (or NVSHMEM) gives it, checked against its heap before the table
//! ([`crate::table`]) installs it: every PE's UPC++ rank and heap base. A leaf module (heap and
//! statuses only), so the loom model compiles it as it is.

use crate::heap::Heap;
use crate::status::{Result, pes};

/// One PE's entry as given by the caller.
#[derive(Clone, Copy, Debug)]
pub struct PeerSpec {
    pub rank: i32,
    pub base: usize,
}

/// A checked peer table for one heap, compressed: `bases` only when they are not all the local
/// base, the rank maps only when PE != rank somewhere.
#[derive(Clone, Debug)]
pub struct Peers {
    pub(crate) heap: Heap,
    pub(crate) bases: Option<Vec<usize>>,
    /// (rank of each PE, PE of each rank).
    pub(crate) ranks: Option<(Vec<u32>, Vec<u32>)>,
}

impl Peers {
    /// Checks `specs` (indexed by PE) against `heap`: one entry per PE, my entry with my base, the
    /// ranks a permutation of the PEs, every base able to hold the heap. The first failing PE
    /// decides the status.
    pub fn new(heap: &Heap, specs: &[PeerSpec]) -> Result<Peers> {
        let n = specs.len();
        if n != heap.n_pes as usize {
            crate::fail!(InvalidArgument, "{n} peers given but the heap has {}", pes(heap.n_pes));
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
            heap: *heap,
            bases: (!uniform).then(|| specs.iter().map(|s| s.base).collect()),
            ranks: (!identity).then(|| (specs.iter().map(|s| s.rank as u32).collect(), pe_of_rank)),
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::heap::Source;
    use crate::status::Status;

    fn heap(n: i32) -> Heap {
        Heap { base: 0x10000, size: 0x1000, mapped_size: 0x800, my_pe: 0, n_pes: n, device: 3, version: (3, 4, 5), source: Source::Manual }
    }

    fn spec(rank: i32, base: usize) -> PeerSpec {
        PeerSpec { rank, base }
    }

    #[test]
    fn bad_tables_are_refused() {
        let h = heap(2);
        let status = |specs: &[PeerSpec]| Peers::new(&h, specs).unwrap_err().status;
        assert_eq!(status(&[spec(1, 0x10000), spec(1, 0x10000)]), Status::BadRank);
        assert_eq!(status(&[spec(0, 0x20000), spec(1, 0x10000)]), Status::InvalidArgument);
        assert_eq!(status(&[spec(0, 0x10000), spec(1, 0)]), Status::InvalidArgument);
        assert_eq!(status(&[spec(0, 0x10000)]), Status::InvalidArgument);
        assert_eq!(status(&[spec(0, 0x10000), spec(2, 0x10000)]), Status::BadRank);
        assert_eq!(status(&[spec(0, 0x10000), spec(1, usize::MAX - 0xfff)]), Status::InvalidArgument);
        let e = Peers::new(&heap(1), &[spec(0, 0x10000), spec(1, 0x10000)]).unwrap_err();
        assert!(e.message.ends_with("the heap has 1 PE"), "{}", e.message);
    }

    #[test]
    fn only_what_is_not_uniform_is_kept() {
        let h = heap(3);
        let p = Peers::new(&h, &[spec(0, 0x10000), spec(1, 0x10000), spec(2, 0x10000)]).unwrap();
        assert!(p.bases.is_none() && p.ranks.is_none());
        let p = Peers::new(&h, &[spec(2, 0x10000), spec(0, 0x10000), spec(1, 0x10000)]).unwrap();
        assert_eq!((p.bases, p.ranks), (None, Some((vec![2, 0, 1], vec![1, 2, 0]))));
        let p = Peers::new(&h, &[spec(0, 0x10000), spec(1, 0x50000), spec(2, 0x90000)]).unwrap();
        assert_eq!((p.bases, p.ranks), (Some(vec![0x10000, 0x50000, 0x90000]), None));
    }
}
