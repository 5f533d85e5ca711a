//! What the exports of every concept share: the NULL check of an argument, and strings interned
//! for the life of the process.

use crate::error::{Error, Result, Status};
use std::ffi::{CStr, CString, c_char};

#[inline(always)]
pub(super) fn nonnull<T>(p: *const T, what: &'static str) -> Result<()> {
    if p.is_null() { Err(null_argument(what)) } else { Ok(()) }
}

#[cold]
#[inline(never)]
fn null_argument(what: &str) -> Error {
    Error::new(Status::NullArgument, format!("{what} is NULL"))
}

/// Interns a string for the life of the process (a handful of library paths at most).
pub(super) fn intern(s: &str) -> *const c_char {
    static STRINGS: parking_lot::Mutex<Vec<&'static CStr>> = parking_lot::Mutex::new(Vec::new());
    let mut v = STRINGS.lock();
    if let Some(c) = v.iter().find(|c| c.to_bytes() == s.as_bytes()) {
        return c.as_ptr();
    }
    let c: &'static CStr = Box::leak(CString::new(s.replace('\0', "")).unwrap_or_default().into_boxed_c_str());
    v.push(c);
    c.as_ptr()
}
