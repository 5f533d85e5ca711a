//! The doctor: what this library can do with an NVSHMEM host library ([`report`]), for
//! `upcxx-nvshmem-doctor` (`src/bin/`) and `upcxx_extra_nvshmem_report`; the checks of a file's
//! ELF headers before the doctor loads it ([`elf_check`], only the doctor binary calls them).

pub mod elf_check;
pub mod report;
