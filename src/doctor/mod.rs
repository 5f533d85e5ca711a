//! The doctor: what this library can do with an NVSHMEM host library ([`report`]), for
//! `upcxx-nvshmem-doctor` (`src/bin/`) and `upcxx_extra_nvshmem_report`.

pub mod report;
