//! NVSHMEM in this process: its host library ([`host_library`]: found among the loaded objects,
//! its public API; [`elf`]: its `.symtab`), the
//! state it keeps its heap description in ([`state_layout`]) and where that state is, read live
//! and validated ([`discovery`], with the CUDA driver calls of [`crate::cuda`]), and its initialisation
//! through the host library for the C++ layer ([`init`]).

pub mod discovery;
pub mod elf;
pub mod host_library;
pub(crate) mod init;
pub mod state_layout;
