//! The process's heap, between discovery and the table: what discovery finds is published for
//! translation; a heap attached by hand is kept as it is; when NVSHMEM is gone, a discovered heap
//! and its table are dropped. The C ABI (`ffi`) only marshals around these.

use crate::discovery;
use crate::discovery::Source;
use crate::layout::StateFields;
use crate::status::{Result, Status};
use crate::table::{Heap, TABLE};

/// Discovers the heap now and publishes it (keeping the peer table when the heap is unchanged,
/// dropping heap and table when NVSHMEM is gone), with the validated state it read (for
/// `peer_heap_base_remote`).
pub fn discover_live() -> Result<(Heap, StateFields)> {
    match discovery::query_live() {
        Ok((heap, fields)) => {
            TABLE.set_heap(Some(heap));
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
