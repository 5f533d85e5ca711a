//! Status codes, the thread-local last-error message, and the panic boundary that every exported
//! function runs its body inside.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The result of every call of the C ABI.
///
/// `OK` is 0; every other value names one kind of failure. The detail of the last failure on the
/// calling thread (the address, the heap range, the PE) is in `upcxx_extra_nvshmem_last_error()`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpcxxExtraNvshmemStatus {
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
}

pub use UpcxxExtraNvshmemStatus as Status;

/// The status table: each status once, with its C name (without prefix) and its description.
/// `ALL`, `name` and `description` come from it; the enum above stays written out, because
/// cbindgen reads the source, not macro expansions. A status missing here fails the build (the
/// matches are exhaustive), and `ALL`'s order is checked against the numbers by a unit test.
macro_rules! status_table {
    ($($variant:ident, $name:literal, $description:literal;)*) => {
        impl Status {
            /// Every status, in numeric order (used by tests and `strerror`).
            pub const ALL: &'static [Status] = &[$(Status::$variant),*];

            /// The C name without prefix (`OK`, `NULL_ARGUMENT`, ...), as in the header.
            pub fn name(self) -> &'static str {
                match self {
                    $(Status::$variant => $name,)*
                }
            }

            /// The static, NUL-terminated description of the status.
            pub fn description(self) -> &'static CStr {
                match self {
                    $(Status::$variant => $description,)*
                }
            }
        }
    };
}

status_table! {
    Ok, "OK", c"success";
    NullArgument, "NULL_ARGUMENT", c"a required pointer argument is NULL";
    NotLoaded, "NOT_LOADED", c"NVSHMEM host library is not loaded in this process";
    NotInitialized, "NOT_INITIALIZED", c"NVSHMEM is not initialised (or already finalised)";
    UnsupportedLayout, "UNSUPPORTED_LAYOUT", c"NVSHMEM state has a layout this library does not support";
    ValidationFailed, "VALIDATION_FAILED", c"the heap found does not pass validation against nvshmem_ptr";
    OutOfHeap, "OUT_OF_HEAP", c"address is outside the NVSHMEM symmetric heap";
    BadPe, "BAD_PE", c"PE number out of range";
    BadRank, "BAD_RANK", c"UPC++ rank out of range or not in the table";
    TableNotSet, "TABLE_NOT_SET", c"no heap is known, or its peer table is not set";
    InvalidArgument, "INVALID_ARGUMENT", c"invalid argument";
    StepUnavailable, "STEP_UNAVAILABLE", c"the selected resolution step is not available";
    CudaError, "CUDA_ERROR", c"a CUDA driver call failed";
    BufferTooSmall, "BUFFER_TOO_SMALL", c"output buffer too small";
    Panic, "PANIC", c"internal error: a panic was caught at the C ABI boundary";
}

#[cfg(test)]
mod table_tests {
    use super::Status;

    #[test]
    fn all_is_every_status_in_numeric_order() {
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i, "{} is at position {i} of ALL", s.name());
        }
        assert_eq!(Status::ALL.len(), Status::Panic as usize + 1);
    }

    #[test]
    fn a_panic_returns_the_fallback_of_the_type() {
        use std::ffi::{CStr, c_char};
        let s: Status = super::boundary_value(|| panic!("test"));
        assert_eq!(s, Status::Panic);
        let p: *const c_char = super::boundary_value(|| panic!("test"));
        assert_eq!(unsafe { CStr::from_ptr(p) }, Status::Panic.description());
        assert_eq!(super::boundary("t", || panic!("test")), Status::Panic);
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

/// Shorthand for `Err(Error::new(status, format!(...)))`.
#[macro_export]
macro_rules! fail {
    ($status:ident, $($arg:tt)*) => {
        return Err($crate::status::Error::new($crate::status::Status::$status, format!($($arg)*)))
    };
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error.
pub fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // `try_with`: during thread teardown the slot may be gone; then there is nowhere to record.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = c);
}

/// Pointer to this thread's last error message (valid until the next failing call on this thread).
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// The panic boundary. Every exported function's body runs inside it: a panic becomes
/// `Status::Panic`, an `Err` becomes its status with the message recorded as the last error.
/// Inlined so that the success path of the translation calls costs no call or copy; the
/// failure paths are out of line.
#[inline(always)]
pub fn boundary(name: &'static str, body: impl FnOnce() -> Result<()>) -> Status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => Status::Ok,
        Ok(Err(e)) => record_error(name, e),
        Err(payload) => record_panic(name, payload),
    }
}

/// The panic boundary of the two translation calls. `fast` (the hot path, which reports success
/// by returning true) runs inside `catch_unwind`; when it returns false, `slow` runs, and `slow`
/// must be a function whose own body is a [`boundary`] (it says why, or retries after a race).
/// Calling `slow` outside the unwind scope lets the compiler make it a tail call (a conditional
/// jump), so the exported function keeps no frame for it: `catch_unwind` around code that cannot
/// unwind costs nothing.
#[inline(always)]
pub fn boundary_hot(name: &'static str, fast: impl FnOnce() -> bool, slow: impl FnOnce() -> Status) -> Status {
    match catch_unwind(AssertUnwindSafe(fast)) {
        Ok(true) => Status::Ok,
        Ok(false) => slow(),
        Err(payload) => record_panic(name, payload),
    }
}

#[cold]
#[inline(never)]
fn record_error(name: &str, e: Error) -> Status {
    log::debug!("{name}: {:?}: {}", e.status, e.message);
    set_last_error(&format!("{name}: {}", e.message));
    e.status
}

#[cold]
#[inline(never)]
fn record_panic(name: &str, payload: Box<dyn std::any::Any + Send>) -> Status {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    set_last_error(&format!("{name}: internal panic caught at the C ABI boundary: {what}"));
    Status::Panic
}

/// What an exported function returns when its body panicked, chosen by its return type (as
/// rustls-ffi does): a status returns `PANIC`, a string the static description of a panic.
pub trait PanicFallback {
    fn panic_fallback() -> Self;
}

impl PanicFallback for Status {
    fn panic_fallback() -> Self {
        Status::Panic
    }
}

impl PanicFallback for *const c_char {
    fn panic_fallback() -> Self {
        Status::Panic.description().as_ptr()
    }
}

/// The panic boundary for exported functions that return a value rather than a status; the
/// value after a panic comes from the type ([`PanicFallback`]).
pub fn boundary_value<T: PanicFallback>(body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| T::panic_fallback())
}
