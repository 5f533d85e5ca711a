//! The C ABI, `include/upcxx_extra_nvshmem.h`: the exported functions and their types
//! ([`exports`]: marshalling only; the statuses and the last error are [`crate::error`]'s, the
//! panic boundary every export runs inside is [`crate::panic`]). As Rust items, this module is the
//! rlib's API: every function and type the header declares, by its Rust name.

mod engine;
mod exports;

pub use crate::error::Status;
pub use crate::heap::Source;
pub use crate::table::translation::Span;
pub use engine::*;
pub use exports::*;
