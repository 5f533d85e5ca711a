//! src/abi/status.rs and src/table/{heap,peers,translation}.rs of upcxx-extra-nvshmem, compiled
//! as they are under `--cfg loom` (the table then takes loom's atomics and mutex), reachable at
//! the paths they have in the library (`abi::status`, `table::heap`, ...). No stand-ins.

#[path = "../../src/abi/status.rs"]
pub mod status;

#[path = "../../src/table/heap.rs"]
pub mod heap;

#[path = "../../src/table/peers.rs"]
pub mod peers;

#[path = "../../src/table/translation.rs"]
pub mod translation;

pub mod abi {
    pub use super::status;
}

pub mod table {
    pub use super::{heap, peers, translation};
}
