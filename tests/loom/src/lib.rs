//! src/error.rs, src/heap.rs and src/table/{peers,snapshot,errors,translation}.rs of
//! upcxx-extra-nvshmem, compiled as they are under `--cfg loom` (the table's publication,
//! translation.rs, then takes loom's atomics and mutex), reachable at the paths they have in the
//! library (`error`, `heap`, `table::translation`, ...). No stand-ins.

#[path = "../../../src/error.rs"]
pub mod error;

#[path = "../../../src/heap.rs"]
pub mod heap;

/// The sync facade: loom's primitives under `--cfg loom`.
#[path = "../../../src/sync.rs"]
mod sync;

#[path = "../../../src/table/peers.rs"]
pub mod peers;

#[path = "../../../src/table/snapshot.rs"]
mod snapshot;

#[path = "../../../src/table/errors.rs"]
mod errors;

#[cfg(not(uxn_loom_bug))]
#[path = "../../../src/table/translation.rs"]
pub mod translation;

/// Under `--cfg uxn_loom_bug`: translation.rs with the bug the table's model must catch (build.rs
/// puts it in a copy; the library's file has none).
#[cfg(uxn_loom_bug)]
pub mod translation {
    include!(concat!(env!("OUT_DIR"), "/translation_bug.rs"));
}

pub mod table {
    pub use super::{peers, translation};
}

/// `crate::fail!`, as the library re-exports it at its root.
pub(crate) use error::fail;

/// src/engine/core/: the copy engine's protocol, generic over its GPU (the model's in
/// tests/engine_model.rs).
#[path = "../../../src/engine/core/mod.rs"]
pub mod engine_core;
