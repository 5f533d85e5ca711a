//! The process's heap, between discovery and the table: what discovery finds is published for
//! translation; a heap attached by hand is kept as it is; when NVSHMEM is gone, a discovered heap
//! and its table are dropped. The C ABI (`abi`) only marshals around these.

use super::peers::{PeerSpec, Peers};
use super::{Heap, TABLE};
use crate::error::{Result, Status};
use crate::heap::Source;
use crate::nvshmem::discovery;
use crate::nvshmem::state_layout::StateFields;

/// Discovers the heap now and publishes it (keeping the peer table when the heap is unchanged,
/// dropping heap and table when NVSHMEM is gone), with the validated state it read (for
/// `peer_heap_base_remote`).
pub fn discover_live() -> Result<(Heap, StateFields)> {
    match discovery::query_live() {
        Ok((heap, fields)) => {
            super::local_mapping::forget_absence();
            TABLE.discovered(heap);
            Ok((heap, fields))
        }
        Err(e) => {
            if matches!(e.status, Status::NotLoaded | Status::NotInitialized) {
                // NVSHMEM is gone: never translate against a heap that no longer exists.
                TABLE.forget_discovered();
            }
            Err(e)
        }
    }
}

/// [`discover_live`] without the state.
pub fn discover() -> Result<Heap> {
    discover_live().map(|(heap, _)| heap)
}

/// The heap translation uses: the published one, else discovered now.
pub fn current() -> Result<Heap> {
    match TABLE.heap() {
        Some(h) => Ok(h),
        None => discover(),
    }
}

/// What `heap_query` describes: a heap attached by hand as it is, else NVSHMEM's, found, read
/// live and validated now.
pub fn query() -> Result<Heap> {
    match TABLE.heap() {
        Some(h) if h.source == Source::Manual => Ok(h),
        _ => discover(),
    }
}

/// Publishes a heap described by hand (after checking it), replacing any heap, peer table and
/// extent in one publication: a table made for another heap must not survive it, even when the
/// bases match, and a reader meanwhile sees the old heap or the new one, never none.
pub fn attach(heap: Heap) -> Result<()> {
    heap.check()?;
    super::local_mapping::forget_absence();
    TABLE.attach(heap);
    Ok(())
}

/// Fills the peer table from the caller's `n_pes` entries, one per PE, which `read(n_pes)` reads
/// only after discovery (when no heap is known yet) and the check that `n_pes` is the heap's.
pub fn set_peers(n_pes: usize, read: impl FnOnce(usize) -> Vec<PeerSpec>) -> Result<()> {
    let heap = current()?;
    if n_pes != heap.n_pes as usize {
        crate::fail!(InvalidArgument, "n_pes is {n_pes} but the heap has {}", crate::error::pes(heap.n_pes));
    }
    install(&heap, Peers::new(&heap, &read(n_pes))?)
}

/// Installs a checked peer table with the span of the heaps NVSHMEM maps here.
fn install(heap: &Heap, mut peers: Peers) -> Result<()> {
    peers.mapped = super::local_mapping::mapped_span(heap);
    TABLE.set_peers(&peers)
}

/// Fills the peer table from NVSHMEM itself: every PE's base from `peer_heap_base_remote` (a
/// device array, read from the same validated read of the state as the heap), and the PE -> rank
/// map from `pe_to_rank(n_pes)` (None: identity).
pub fn set_peers_from_nvshmem(pe_to_rank: impl FnOnce(usize) -> Option<Vec<i32>>) -> Result<()> {
    let (heap, f) = discover_live()?;
    let n = heap.n_pes as usize;
    let bases = discovery::peer_heap_bases(&f, n)?;
    let ranks = pe_to_rank(n).unwrap_or_else(|| (0..heap.n_pes).collect());
    let specs: Vec<PeerSpec> = bases.into_iter().zip(ranks).map(|(base, rank)| PeerSpec { rank, base }).collect();
    install(&heap, Peers::new(&heap, &specs)?)
}
