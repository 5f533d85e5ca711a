//! src/status.rs, src/heap.rs, src/peers.rs and src/table.rs of upcxx-extra-nvshmem, compiled as
//! they are under `--cfg loom` (the table then takes loom's atomics and mutex). No stand-ins.

#[path = "../../src/status.rs"]
pub mod status;

#[path = "../../src/heap.rs"]
pub mod heap;

#[path = "../../src/peers.rs"]
pub mod peers;

#[path = "../../src/table.rs"]
pub mod table;
