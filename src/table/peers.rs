//! A peer table as a caller (or NVSHMEM) gives it, checked against its heap before the table
//! ([`super::translation`]) installs it: every PE's UPC++ rank and heap base. Needs only the heap
//! and the statuses, so the loom model compiles it as it is.

use crate::error::{Error, Result, Status, pes};
use crate::heap::Heap;

/// Why a map of `0..n` into `0..n` is not a permutation: its first index that breaks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotPermutation {
    /// `map[index]` is `value`, outside `[0, n)`.
    OutOfRange { index: usize, value: i32 },
    /// `map[index]` is `value`, which `map[first]` is already (`first < index`).
    Repeated { index: usize, value: i32, first: usize },
}

/// The one check that a map of `0..n` is a permutation of `0..n`, fed in index order (so that the
/// first index that breaks it is the one reported), building the inverse map as it goes.
pub struct Permutation {
    inverse: Vec<u32>,
}

impl Permutation {
    /// A check of a map with `n` entries.
    pub fn new(n: usize) -> Self {
        Permutation { inverse: vec![u32::MAX; n] }
    }

    /// Takes `map[index] == value` (indices in increasing order, each once).
    pub fn add(&mut self, index: usize, value: i32) -> std::result::Result<(), NotPermutation> {
        let n = self.inverse.len();
        if value < 0 || value as usize >= n {
            return Err(NotPermutation::OutOfRange { index, value });
        }
        let slot = &mut self.inverse[value as usize];
        if *slot != u32::MAX {
            return Err(NotPermutation::Repeated { index, value, first: *slot as usize });
        }
        *slot = index as u32;
        Ok(())
    }

    /// The inverse map (complete once all `n` entries were added).
    pub fn into_inverse(self) -> Vec<u32> {
        self.inverse
    }
}

/// The PE/rank agreement: `pe_of_rank[r]` is the NVSHMEM PE of UPC++ rank `r`, and
/// `n_pes_of_rank[r]` (None: every rank's is `pe_of_rank.len()`) the number of PEs NVSHMEM
/// reports on rank `r`. NVSHMEM's PEs and the ranks must be the same processes: every PE count
/// the number of ranks, every PE in `[0, n)`, each rank a different PE. The first failing rank
/// decides; Err carries it with the error (INVALID_ARGUMENT for a PE count, BAD_PE for a PE).
pub fn check_pe_map(pe_of_rank: &[i32], n_pes_of_rank: Option<&[i32]>) -> std::result::Result<(), (usize, Error)> {
    const SAME: &str = "NVSHMEM's PEs and the ranks must be the same processes";
    let n = pe_of_rank.len();
    let mut check = Permutation::new(n);
    for (rank, &pe) in pe_of_rank.iter().enumerate() {
        let n_pes = n_pes_of_rank.map_or(n as i64, |c| i64::from(c[rank]));
        if n_pes != n as i64 {
            let ranks = if n == 1 { "is 1 rank".to_string() } else { format!("are {n} ranks") };
            let msg = format!("NVSHMEM has {} on rank {rank} but there {ranks}: {SAME}", pes(n_pes));
            return Err((rank, Error::new(Status::InvalidArgument, msg)));
        }
        let msg = match check.add(rank, pe) {
            Ok(()) => continue,
            Err(NotPermutation::OutOfRange { .. }) => format!("rank {rank} reports PE {pe}, out of range [0, {n})"),
            Err(NotPermutation::Repeated { first, .. }) => format!("rank {rank} reports PE {pe}, taken by another rank ({first})"),
        };
        return Err((rank, Error::new(Status::BadPe, format!("{msg}: {SAME}, each rank a different PE"))));
    }
    Ok(())
}

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
    /// `(lo, span)`: the addresses of this process covering the local heap and every peer's heap
    /// as NVSHMEM maps it here (`local_mapping::mapped_span`); None: the local heap alone.
    pub(crate) mapped: Option<(usize, usize)>,
}

impl Peers {
    /// Checks `specs` (indexed by PE) against `heap`: one entry per PE, my entry with my base, the
    /// ranks a permutation of the PEs ([`Permutation`]), every base able to hold the heap. The
    /// first failing PE decides the status (within one PE: its rank out of range, then its base,
    /// then its rank given to an earlier PE).
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
        let mut check = Permutation::new(n);
        // Within one PE: its rank's range, then its base, then whether its rank was given before.
        for (pe, s) in specs.iter().enumerate() {
            let added = check.add(pe, s.rank);
            if let Err(NotPermutation::OutOfRange { .. }) = added {
                crate::fail!(BadRank, "PE {pe} maps to rank {}, not in [0, {n}) (ranks must be a permutation of the PEs)", s.rank)
            }
            if s.base == 0 || s.base.checked_add(heap.size).is_none() {
                crate::fail!(InvalidArgument, "PE {pe} has heap base 0x{:x}, which cannot hold a 0x{:x}-byte heap", s.base, heap.size);
            }
            if let Err(NotPermutation::Repeated { first, .. }) = added {
                crate::fail!(BadRank, "rank {} is given to both PE {first} and PE {pe}", s.rank)
            }
        }
        let pe_of_rank = check.into_inverse();
        let uniform = specs.iter().all(|s| s.base == heap.base);
        let identity = specs.iter().enumerate().all(|(pe, s)| s.rank as usize == pe);
        Ok(Peers {
            heap: *heap,
            bases: (!uniform).then(|| specs.iter().map(|s| s.base).collect()),
            ranks: (!identity).then(|| (specs.iter().map(|s| s.rank as u32).collect(), pe_of_rank)),
            mapped: None,
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::error::Status;
    use crate::heap::Source;

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
        // Within one PE the base is checked before the rank's repetition.
        assert_eq!(status(&[spec(0, 0x10000), spec(0, 0)]), Status::InvalidArgument);
        let e = Peers::new(&heap(1), &[spec(0, 0x10000), spec(1, 0x10000)]).unwrap_err();
        assert!(e.message.ends_with("the heap has 1 PE"), "{}", e.message);
    }

    #[test]
    fn the_pe_map_check_names_the_first_failing_rank() {
        let check =
            |pe_of_rank: &[i32], counts: Option<&[i32]>| check_pe_map(pe_of_rank, counts).map_err(|(r, e)| (r, e.status, e.message));
        assert_eq!(check(&[0], None), Ok(()));
        assert_eq!(check(&[2, 0, 1], Some(&[3, 3, 3])), Ok(()));
        let (r, s, m) = check(&[0, 0, 1], None).unwrap_err();
        assert_eq!((r, s), (1, Status::BadPe));
        assert!(m.starts_with("rank 1 reports PE 0, taken by another rank (0): ") && m.contains("must be the same processes"), "{m}");
        let (r, s, m) = check(&[0, 1, 3], None).unwrap_err();
        assert_eq!((r, s), (2, Status::BadPe));
        assert!(m.starts_with("rank 2 reports PE 3, out of range [0, 3)"), "{m}");
        assert_eq!(check(&[-1, 1], None).unwrap_err().0, 0);
        assert_eq!(check(&[i32::MIN, 1], None).unwrap_err().1, Status::BadPe);
        let (r, s, m) = check(&[0, 1, 2], Some(&[3, 4, 3])).unwrap_err();
        assert_eq!((r, s), (1, Status::InvalidArgument));
        assert_eq!(m, "NVSHMEM has 4 PEs on rank 1 but there are 3 ranks: NVSHMEM's PEs and the ranks must be the same processes");
        // The first failing rank decides, whichever the check.
        assert_eq!(check(&[5, 1, 2], Some(&[3, 4, 3])).unwrap_err().0, 0);
        assert_eq!(
            check(&[0], Some(&[2])).unwrap_err().2,
            "NVSHMEM has 2 PEs on rank 0 but there is 1 rank: NVSHMEM's PEs and the ranks must be the same processes"
        );
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
