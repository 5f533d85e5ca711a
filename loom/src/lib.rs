//! src/table.rs and src/status.rs of upcxx-extra-nvshmem, compiled as they are under `--cfg
//! loom`. The only stand-in is `discovery::Source`, the enum a heap records its origin in
//! (discovery itself is not part of the table's protocol).

#[path = "../../src/status.rs"]
pub mod status;

pub mod discovery {
    /// Where a heap came from (the table only asks whether it is `Manual`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Source {
        None,
        Manual,
        Discovered,
    }
}

#[path = "../../src/table.rs"]
pub mod table;
