//! Diagnostics: what the library says about itself: the memory its peer table holds
//! (`table_bytes`), the doctor's report (`report`, `report_buffer`) and its version (`version`).

use super::marshal::nonnull;
use crate::error::{Error, Status};
use crate::table::TABLE;
use std::ffi::{CStr, CString, c_char};
use upcxx_extra_nvshmem_macros::export;

/// Bytes of heap memory the current peer table holds (0 for uniform bases with PE == rank).
///
/// Statuses: OK; NULL_ARGUMENT; TABLE_NOT_SET (never runs discovery). Thread safety: any thread,
/// lock-free.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_table_bytes(out: *mut usize) -> Status {
    nonnull(out, "out")?;
    let bytes = TABLE
        .table_bytes()
        .ok_or_else(|| Error::new(Status::TableNotSet, "no peer table is set: call upcxx_extra_nvshmem_set_peers first"))?;
    // SAFETY: non-NULL caller storage.
    unsafe { out.write(bytes) };
    Ok(())
}

/// Writes the doctor's report for this process (library, steps, layout check, and, when NVSHMEM
/// is initialised, base, sizes, PE, device, the step that served, validation; a heap attached
/// by hand as such) to `file`.
///
/// Statuses: OK; NULL_ARGUMENT; INVALID_ARGUMENT (the write failed). Thread safety: any thread
/// (it may run discovery, a writer).
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_report(file: *mut libc::FILE) -> Status {
    nonnull(file, "file")?;
    let text = CString::new(crate::doctor::report::in_process().to_text().replace('\0', "")).unwrap_or_default();
    // SAFETY: caller's open FILE*.
    if unsafe { libc::fputs(text.as_ptr(), file) } < 0 {
        crate::fail!(InvalidArgument, "writing the report to the FILE* failed");
    }
    Ok(())
}

/// Like `upcxx_extra_nvshmem_report`, into `buf` (`len` bytes, NUL-terminated). `*needed`
/// (optional) receives the size including the NUL.
///
/// Statuses: OK; NULL_ARGUMENT (`buf` NULL with `len` > 0); BUFFER_TOO_SMALL (nothing written but
/// `*needed`). Thread safety: as `upcxx_extra_nvshmem_report`.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_report_buffer(buf: *mut c_char, len: usize, needed: *mut usize) -> Status {
    let text = crate::doctor::report::in_process().to_text().replace('\0', "");
    let need = text.len() + 1;
    if !needed.is_null() {
        // SAFETY: non-NULL caller storage.
        unsafe { needed.write(need) };
    }
    if buf.is_null() && len > 0 {
        crate::fail!(NullArgument, "buf is NULL but len is {len}");
    }
    if len < need {
        crate::fail!(BufferTooSmall, "the report needs {need} bytes, the buffer has {len}");
    }
    // SAFETY: buf has len >= need bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, buf, text.len());
        buf.add(text.len()).write(0);
    }
    Ok(())
}

/// This library's version, e.g. "0.1.0" (the header's `UPCXX_EXTRA_NVSHMEM_VERSION_STRING` is the
/// version it was generated with). Never NULL. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_version() -> *const c_char {
    static V: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => c"",
    };
    V.as_ptr()
}
