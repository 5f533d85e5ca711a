//! The panic boundary every exported function runs its body inside: a panic becomes the fallback
//! of the return type, an error its status with the message recorded as the thread's last error
//! ([`crate::error`]). The `#[export]` macro (`macros/`) writes the call.

use crate::error::{Error, Result, Status, set_last_error};
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The panic boundary. Every exported function's body runs inside it (the `#[export]` macro of
/// `upcxx_extra_nvshmem_macros` writes the call, with the function's name): a panic becomes the
/// fallback of the return type ([`Boundary::panicked`]). The body evaluates to the return type,
/// returned as it is, or, for a status, to a [`Result`], whose error becomes its status with
/// the message recorded as the last error ([`Body`]). Inlined, and a body that cannot unwind
/// (the hot paths: their slow paths are `extern "C"`, which cannot unwind either) costs no
/// frame and keeps its tail call; the failure paths are out of line.
#[inline(always)]
pub fn guarded<R: Boundary, B: Body<R>>(name: &'static str, body: impl FnOnce() -> B) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(b) => b.finish(name),
        Err(payload) => R::panicked(name, payload),
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

/// A type an exported function may return: what it returns when its body panicked (the panic is
/// recorded as the last error). As rustls-ffi does, chosen by the return type: a status returns
/// `PANIC`, a string the static description of a panic. A return type without an impl does not
/// compile.
pub trait Boundary: Sized {
    fn panicked(name: &'static str, payload: Box<dyn std::any::Any + Send>) -> Self;
}

impl Boundary for Status {
    fn panicked(name: &'static str, payload: Box<dyn std::any::Any + Send>) -> Self {
        record_panic(name, payload)
    }
}

impl Boundary for () {
    fn panicked(name: &'static str, payload: Box<dyn std::any::Any + Send>) -> Self {
        record_panic(name, payload);
    }
}

impl Boundary for *const c_char {
    fn panicked(name: &'static str, payload: Box<dyn std::any::Any + Send>) -> Self {
        record_panic(name, payload).description().as_ptr()
    }
}

/// What the body of a function returning `R` may evaluate to: `R` itself, or for a status a
/// `Result<()>` (so that `?` works), whose error is recorded as the last error, named after the
/// function.
pub trait Body<R> {
    fn finish(self, name: &'static str) -> R;
}

impl Body<Status> for Status {
    #[inline(always)]
    fn finish(self, _: &'static str) -> Status {
        self
    }
}

impl Body<Status> for Result<()> {
    #[inline(always)]
    fn finish(self, name: &'static str) -> Status {
        match self {
            Ok(()) => Status::Ok,
            Err(e) => record_error(name, e),
        }
    }
}

impl Body<()> for () {
    #[inline(always)]
    fn finish(self, _: &'static str) {}
}

impl Body<*const c_char> for *const c_char {
    #[inline(always)]
    fn finish(self, _: &'static str) -> *const c_char {
        self
    }
}

#[cfg(test)]
#[allow(unsafe_code)] // tests read the C strings the boundary returns
mod tests {
    use crate::error::Status;

    #[test]
    fn a_panic_returns_the_fallback_of_the_type() {
        use std::ffi::{CStr, c_char};
        let s: Status = super::guarded("t", || -> Status { panic!("test") });
        assert_eq!(s, Status::Panic);
        assert!(crate::error::last_error().contains("t: internal panic caught at the C ABI boundary: test"));
        let p: *const c_char = super::guarded("t", || -> *const c_char { panic!("test") });
        assert_eq!(unsafe { CStr::from_ptr(p) }, Status::Panic.description());
        let e: Status = super::guarded("t", || Err(crate::error::Error::new(Status::BadPe, "pe 9")));
        assert_eq!((e, crate::error::last_error().as_str()), (Status::BadPe, "t: pe 9"));
        let s: Status = super::guarded("t", || Status::BadRank);
        assert_eq!((s, crate::error::last_error().as_str()), (Status::BadRank, "t: pe 9"), "a status body is returned as it is");
    }
}
