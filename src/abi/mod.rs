//! The C ABI, `include/upcxx_extra_nvshmem.h`: the exported functions and their types (marshalling
//! only, one module per concept: `heap`, `translation`, `errors`, `discovery`, `diagnostics`,
//! `nvshmem`, `copies`; the statuses and the last error are [`crate::error`]'s, the panic boundary
//! every export runs inside is [`crate::panic`]). As Rust items, this module is the rlib's API:
//! every function and type the header declares, by its Rust name.
//!
//! The C ABI's functions and types: marshalling only (policy lives in
//! [`crate::table::process_heap`], [`crate::table`], [`crate::nvshmem`]). Every function is
//! written `#[unsafe(no_mangle)] #[export] pub extern "C" fn upcxx_extra_nvshmem_...`: the
//! `#[export]` macro runs its body inside the panic boundary ([`crate::panic::guarded`]). A
//! body evaluates to the function's return type, or for a status to a `Result<()>` (`?` works; the error is recorded, named after the function). The crate
//! denies `unsafe_code` and only `#[export]` allows the `no_mangle`, so a plain export does not
//! compile; the macro also records each export in the library, which `tests/build_exports.rs`
//! checks. Never `#[allow(unsafe_code)]` in these files: the macro adds it.
//!
//! The hot paths (`to_global_ptr`, `from_global_ptr`, `to_offset`): the body makes one attempt
//! and returns `Status::Ok`, or tail-calls its slow path, a private `#[export(name = ...)]`
//! function (a full boundary, errors named after the export) that retries and says why.
//!
//! The types have Rust names; cbindgen writes their C names (`cbindgen.toml`).
//!
//! The header lists the functions in the order cbindgen parses them: a module's items, then its
//! modules in the order of their `mod` lines. So the `mod` lines below (one group each: rustfmt
//! would sort a group) and the functions in each file are in the header's order; a new function
//! goes where it belongs in that order (`tests/build_header_drift.rs`).

mod engine;

mod heap;

mod translation;

mod errors;

mod discovery;

mod diagnostics;

mod nvshmem;

mod copies;

mod marshal;

pub use crate::error::Status;
pub use crate::heap::Source;
pub use crate::table::translation::Span;
pub use copies::*;
pub use diagnostics::*;
pub use discovery::*;
pub use engine::*;
pub use errors::*;
pub use heap::*;
pub use nvshmem::*;
pub use translation::*;
