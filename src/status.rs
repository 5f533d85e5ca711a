//! Status codes, the thread-local last-error message, and the panic boundary that every exported
//! function runs its body inside.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The result of every call of the C ABI.
///
/// `OK` is 0; every other value names one kind of failure. The detail of the last failure on the
/// calling thread (the address, the heap range, the PE) is in `upcxx_extra_nvshmem_last_error()`.
//
// The one table of statuses (plain comments here stay out of the C header): each variant carries
// its `strerror` description; `#[c_enum]` derives the Rust names (`Status::NullArgument`), `ALL`,
// `name()` and `description()` from it.
#[upcxx_extra_nvshmem_macros::c_enum(prefix = "UPCXX_EXTRA_NVSHMEM_STATUS_")]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum upcxx_extra_nvshmem_status_t {
    /// Success.
    #[description(c"success")]
    UPCXX_EXTRA_NVSHMEM_STATUS_OK = 0,
    /// A pointer argument that must not be NULL was NULL.
    #[description(c"a required pointer argument is NULL")]
    UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT = 1,
    /// No NVSHMEM host library (`libnvshmem_host.so.*`) is loaded in this process.
    #[description(c"NVSHMEM host library is not loaded in this process")]
    UPCXX_EXTRA_NVSHMEM_STATUS_NOT_LOADED = 2,
    /// NVSHMEM is loaded but not initialised (or already finalised).
    #[description(c"NVSHMEM is not initialised (or already finalised)")]
    UPCXX_EXTRA_NVSHMEM_STATUS_NOT_INITIALIZED = 3,
    /// The NVSHMEM state was found but its layout is not one this library knows.
    #[description(c"NVSHMEM state has a layout this library does not support")]
    UPCXX_EXTRA_NVSHMEM_STATUS_UNSUPPORTED_LAYOUT = 4,
    /// The heap description read from NVSHMEM did not pass the check against the public API.
    #[description(c"the heap found does not pass validation against nvshmem_ptr")]
    UPCXX_EXTRA_NVSHMEM_STATUS_VALIDATION_FAILED = 5,
    /// The address is not inside the symmetric heap.
    #[description(c"address is outside the NVSHMEM symmetric heap")]
    UPCXX_EXTRA_NVSHMEM_STATUS_OUT_OF_HEAP = 6,
    /// The PE number is negative or not less than the number of PEs.
    #[description(c"PE number out of range")]
    UPCXX_EXTRA_NVSHMEM_STATUS_BAD_PE = 7,
    /// The UPC++ rank is negative, out of range, or not in the table.
    #[description(c"UPC++ rank out of range or not in the table")]
    UPCXX_EXTRA_NVSHMEM_STATUS_BAD_RANK = 8,
    /// No heap is known (`heap_query` / `attach` first), or no peer table has been set
    /// (`upcxx_extra_nvshmem_set_peers`). The translation calls never run discovery.
    #[description(c"no heap is known, or its peer table is not set")]
    UPCXX_EXTRA_NVSHMEM_STATUS_TABLE_NOT_SET = 9,
    /// An argument is out of its allowed range (a size of 0, an overflowing range, duplicate ranks...).
    #[description(c"invalid argument")]
    UPCXX_EXTRA_NVSHMEM_STATUS_INVALID_ARGUMENT = 10,
    /// The selected resolution step is not available in this process (symbol not exported,
    /// `.symtab` stripped, no CUDA driver...).
    #[description(c"the selected resolution step is not available")]
    UPCXX_EXTRA_NVSHMEM_STATUS_STEP_UNAVAILABLE = 11,
    /// A CUDA driver call failed.
    #[description(c"a CUDA driver call failed")]
    UPCXX_EXTRA_NVSHMEM_STATUS_CUDA_ERROR = 12,
    /// The output buffer is too small; the needed size was written.
    #[description(c"output buffer too small")]
    UPCXX_EXTRA_NVSHMEM_STATUS_BUFFER_TOO_SMALL = 13,
    /// A panic was caught at the C ABI boundary (a bug in this library; please report it).
    #[description(c"internal error: a panic was caught at the C ABI boundary")]
    UPCXX_EXTRA_NVSHMEM_STATUS_PANIC = 14,
}

/// The Rust-style names of the status type (the C name is the one above).
pub use upcxx_extra_nvshmem_status_t as UpcxxExtraNvshmemStatus;
pub use upcxx_extra_nvshmem_status_t as Status;

#[cfg(test)]
#[allow(unsafe_code)] // tests read the C strings the boundary returns
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
        assert_eq!(super::boundary("t", || panic!("test")), Status::Panic);
        let s: Status = super::guarded("t", || panic!("test"));
        assert_eq!(s, Status::Panic);
        assert!(super::last_error().contains("t: internal panic caught at the C ABI boundary: test"));
        let p: *const c_char = super::guarded("t", || panic!("test"));
        assert_eq!(unsafe { CStr::from_ptr(p) }, Status::Panic.description());
        let e: Status = super::boundary("t", || Err(super::Error::new(Status::BadPe, "pe 9")));
        assert_eq!((e, super::last_error().as_str()), (Status::BadPe, "t: pe 9"));
    }

    #[test]
    fn the_short_names_are_the_c_names() {
        assert_eq!(Status::NullArgument, Status::UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT);
        assert_eq!(Status::NullArgument.name(), "NULL_ARGUMENT");
        assert_eq!(Status::from_u32(14), Some(Status::Panic));
        assert_eq!(Status::from_u32(15), None);
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

/// This thread's last error message (a copy).
pub fn last_error() -> String {
    LAST_ERROR.try_with(|slot| slot.borrow().to_string_lossy().into_owned()).unwrap_or_default()
}

/// Pointer to this thread's last error message (valid until the next failing call on this thread).
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// The panic boundary. Every exported function's body runs inside it (the `#[export]` macro of
/// `upcxx_extra_nvshmem_macros` writes the call): a panic becomes the fallback of the return type
/// ([`Boundary::panicked`]); for a status an `Err` becomes its status, with the message recorded
/// as the last error. Inlined so that the success path of the translation calls costs no call or
/// copy; the failure paths are out of line.
#[inline(always)]
pub fn guarded<R: Boundary>(name: &'static str, body: impl FnOnce() -> R::Body) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(b) => R::finish(name, b),
        Err(payload) => R::panicked(name, payload),
    }
}

/// [`guarded`] for a function that returns a status.
#[inline(always)]
pub fn boundary(name: &'static str, body: impl FnOnce() -> Result<()>) -> Status {
    guarded(name, body)
}

/// The panic boundary of the two translation calls. `fast` (the hot path, which reports success
/// by returning true) runs inside `catch_unwind`; when it returns false, `slow` runs, and `slow`
/// must be a function whose own body is a [`guarded`] boundary (`#[export(name = ...)]`) (it says why, or retries after a race).
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
    log::debug!("{name}: {}: {}", e.status.name(), e.message);
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

/// What an exported function's body evaluates to, and what the function returns when the body
/// panicked, chosen by the return type (as rustls-ffi does): a status returns `PANIC`, a string
/// the static description of a panic. A return type without an impl does not compile.
pub trait Boundary: Sized {
    /// The type of the function's body: `Result<()>` for a status (so `?` works).
    type Body;
    /// The function's return value from its body's.
    fn finish(name: &'static str, body: Self::Body) -> Self;
    /// The function's return value after its body panicked (the panic is recorded as the last error).
    fn panicked(name: &'static str, payload: Box<dyn std::any::Any + Send>) -> Self;
}

impl Boundary for Status {
    type Body = Result<()>;
    #[inline(always)]
    fn finish(name: &'static str, body: Result<()>) -> Self {
        match body {
            Ok(()) => Status::Ok,
            Err(e) => record_error(name, e),
        }
    }
    fn panicked(name: &'static str, payload: Box<dyn std::any::Any + Send>) -> Self {
        record_panic(name, payload)
    }
}

impl Boundary for *const c_char {
    type Body = *const c_char;
    #[inline(always)]
    fn finish(_: &'static str, body: *const c_char) -> Self {
        body
    }
    fn panicked(name: &'static str, payload: Box<dyn std::any::Any + Send>) -> Self {
        record_panic(name, payload).description().as_ptr()
    }
}
