//! The bottom of the crate: the status codes of the C ABI, the error type every module returns
//! ([`Error`], [`Result`], [`fail!`](crate::fail)), and the thread's last error message that
//! `upcxx_extra_nvshmem_last_error` returns. Imports nothing of the crate; the panic boundary
//! ([`crate::panic`]) is above it, and `table/` and `nvshmem/` use it without importing each other.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};

/// The result of every call of the C ABI.
///
/// `OK` is 0; every other value names one kind of failure. The detail of the last failure on the
/// calling thread (the address, the heap range, the PE) is in `upcxx_extra_nvshmem_last_error()`.
//
// Rust names here; cbindgen writes the C ones (`upcxx_extra_nvshmem_status_t`,
// `UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT`: cbindgen.toml, build.rs). A new status goes at the
// end, and into `ALL` and `Status::text`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A pointer argument that must not be NULL was NULL.
    NullArgument = 1,
    /// No NVSHMEM host library (`libnvshmem_host.so.*`) is loaded in this process.
    NotLoaded = 2,
    /// NVSHMEM is loaded but not initialised (or already finalised).
    NotInitialized = 3,
    /// The NVSHMEM state was found but its layout is not one this library knows.
    UnsupportedLayout = 4,
    /// The heap description read from NVSHMEM did not pass the check against the public API.
    ValidationFailed = 5,
    /// The address is not inside the symmetric heap.
    OutOfHeap = 6,
    /// The PE number is negative or not less than the number of PEs.
    BadPe = 7,
    /// The UPC++ rank is negative, out of range, or not in the table.
    BadRank = 8,
    /// No heap is known (`heap_query` / `attach` first), or no peer table has been set
    /// (`upcxx_extra_nvshmem_set_peers`). The translation calls never run discovery.
    TableNotSet = 9,
    /// An argument is out of its allowed range (a size of 0, an overflowing range, duplicate ranks...).
    InvalidArgument = 10,
    /// The selected resolution step is not available in this process (symbol not exported,
    /// `.symtab` stripped, no CUDA driver...).
    StepUnavailable = 11,
    /// A CUDA driver call failed.
    CudaError = 12,
    /// The output buffer is too small; the needed size was written.
    BufferTooSmall = 13,
    /// A panic was caught at the C ABI boundary (a bug in this library; please report it).
    Panic = 14,
    /// This process is a fork() child of the one that made the object (a copy engine): CUDA
    /// does not survive fork(), so nothing was done.
    Forked = 15,
    /// The stream is being captured into a CUDA graph (or the driver cannot say): a completion
    /// cannot follow work that runs only when the graph is launched.
    StreamCapture = 16,
    /// The copy engine is closed (draining or drained): nothing was issued.
    EngineClosed = 17,
}

impl Status {
    /// Every status, in numeric order (`ALL[s as usize] == s`).
    pub const ALL: [Status; 18] = [
        Status::Ok,
        Status::NullArgument,
        Status::NotLoaded,
        Status::NotInitialized,
        Status::UnsupportedLayout,
        Status::ValidationFailed,
        Status::OutOfHeap,
        Status::BadPe,
        Status::BadRank,
        Status::TableNotSet,
        Status::InvalidArgument,
        Status::StepUnavailable,
        Status::CudaError,
        Status::BufferTooSmall,
        Status::Panic,
        Status::Forked,
        Status::StreamCapture,
        Status::EngineClosed,
    ];

    /// The one table of the statuses' texts: the name as the header spells it (without its
    /// `UPCXX_EXTRA_NVSHMEM_STATUS_` prefix) and the description `strerror` returns.
    fn text(self) -> (&'static str, &'static CStr) {
        match self {
            Status::Ok => ("OK", c"success"),
            Status::NullArgument => ("NULL_ARGUMENT", c"a required pointer argument is NULL"),
            Status::NotLoaded => ("NOT_LOADED", c"NVSHMEM host library is not loaded in this process"),
            Status::NotInitialized => ("NOT_INITIALIZED", c"NVSHMEM is not initialised (or already finalised)"),
            Status::UnsupportedLayout => ("UNSUPPORTED_LAYOUT", c"NVSHMEM state has a layout this library does not support"),
            Status::ValidationFailed => ("VALIDATION_FAILED", c"the heap found does not pass validation against nvshmem_ptr"),
            Status::OutOfHeap => ("OUT_OF_HEAP", c"address is outside the NVSHMEM symmetric heap"),
            Status::BadPe => ("BAD_PE", c"PE number out of range"),
            Status::BadRank => ("BAD_RANK", c"UPC++ rank out of range or not in the table"),
            Status::TableNotSet => ("TABLE_NOT_SET", c"no heap is known, or its peer table is not set"),
            Status::InvalidArgument => ("INVALID_ARGUMENT", c"invalid argument"),
            Status::StepUnavailable => ("STEP_UNAVAILABLE", c"the selected resolution step is not available"),
            Status::CudaError => ("CUDA_ERROR", c"a CUDA driver call failed"),
            Status::BufferTooSmall => ("BUFFER_TOO_SMALL", c"output buffer too small"),
            Status::Panic => ("PANIC", c"internal error: a panic was caught at the C ABI boundary"),
            Status::Forked => ("FORKED", c"this process is a fork() child of the one that made the object"),
            Status::StreamCapture => ("STREAM_CAPTURE", c"the stream is being captured into a CUDA graph"),
            Status::EngineClosed => ("ENGINE_CLOSED", c"the copy engine is closed"),
        }
    }

    /// The name as in the header, without its prefix (`NULL_ARGUMENT`).
    pub fn name(self) -> &'static str {
        self.text().0
    }

    /// The static, NUL-terminated description (`upcxx_extra_nvshmem_strerror`).
    pub fn description(self) -> &'static CStr {
        self.text().1
    }

    /// The status with this number, if any.
    pub fn from_u32(v: u32) -> Option<Status> {
        Status::ALL.get(v as usize).copied()
    }
}

#[cfg(test)]
mod table_tests {
    use super::Status;

    #[test]
    fn all_is_every_status_in_numeric_order() {
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i, "{} is at position {i} of ALL", s.name());
        }
        assert_eq!(Status::ALL.len(), Status::EngineClosed as usize + 1);
        let names: std::collections::HashSet<_> = Status::ALL.iter().map(|s| s.name()).collect();
        let descriptions: std::collections::HashSet<_> = Status::ALL.iter().map(|s| s.description()).collect();
        assert_eq!((names.len(), descriptions.len()), (18, 18), "names and descriptions are distinct");
    }

    #[test]
    fn names_are_the_headers() {
        assert_eq!(Status::NullArgument.name(), "NULL_ARGUMENT");
        assert_eq!(Status::from_u32(14), Some(Status::Panic));
        assert_eq!(Status::from_u32(18), None);
        let header = include_str!("../include/upcxx_extra_nvshmem.h");
        for s in Status::ALL {
            let line = format!("UPCXX_EXTRA_NVSHMEM_STATUS_{} = {},", s.name(), s as u32);
            assert!(header.contains(&line), "the header lacks {line}");
        }
    }
}

/// A failure: the status plus the detail message for `last_error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        Error { status, message: message.into() }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// "1 PE", "4 PEs": counts in messages.
pub fn pes(n: impl Into<i64>) -> String {
    let n = n.into();
    if n == 1 { "1 PE".to_string() } else { format!("{n} PEs") }
}

/// Shorthand for `Err(Error::new(status, format!(...)))`. Crate-private (reached as
/// `crate::fail!` through the re-export at the crate root), as rustls-ffi keeps its internals.
macro_rules! fail {
    ($status:ident, $($arg:tt)*) => {
        return Err($crate::error::Error::new($crate::error::Status::$status, format!($($arg)*)))
    };
}
pub(crate) use fail;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error.
pub fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // `try_with`: during thread teardown the slot may be gone; then there is nowhere to record.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = c);
}

/// This thread's last error message (a copy).
#[cfg(test)]
#[allow(dead_code)] // the panic boundary's tests read it
pub fn last_error() -> String {
    LAST_ERROR.try_with(|slot| slot.borrow().to_string_lossy().into_owned()).unwrap_or_default()
}

/// Pointer to this thread's last error message (valid until the next failing call on this thread).
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.try_with(|slot| slot.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}
