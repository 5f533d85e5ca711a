//! The C ABI, `include/upcxx_extra_nvshmem.h`: the exported functions and their types
//! ([`exports`]: marshalling only), and the statuses, the thread's last error and the panic
//! boundary every export runs inside ([`status`]). As Rust items, this module is the rlib's API:
//! every function and type the header declares, by its Rust name.

mod exports;
pub(crate) mod status;

pub use crate::table::heap::Source;
pub use exports::*;
pub use status::Status;
