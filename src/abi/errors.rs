//! Errors: a status's description (`strerror`) and the detail of this thread's last failure
//! (`last_error`), both [`crate::error`]'s.

use crate::error::Status;
use std::ffi::{c_char, c_int};
use upcxx_extra_nvshmem_macros::export;

/// A static description of a status (any integer is accepted: "unknown status" for others).
/// Never NULL. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_strerror(status: c_int) -> *const c_char {
    u32::try_from(status).ok().and_then(Status::from_u32).map_or(c"unknown status".as_ptr(), |s| s.description().as_ptr())
}

/// The detail of the last failure on this thread (names the function, address, heap range, PE).
/// Valid until the next failing call on this thread; "" when nothing has failed. Never NULL.
/// Thread safety: any thread (thread-local).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_last_error() -> *const c_char {
    crate::error::last_error_ptr()
}
