//! The sync facade: the one place that decides which synchronisation primitives the state shared
//! between threads is built on, for the copy engine (`src/engine/core/`) and the translation
//! table's publication (`src/table/translation.rs`). In the library they are the standard
//! library's; when the loom models (`tests/loom/`) compile those modules under `--cfg loom`, they
//! are loom's, which explore every interleaving of them (tokio's `src/loom/` facade). Those
//! modules take their mutex, atomics, pause and clock from here and name no cfg to choose them
//! (the table's model keeps its own view of a snapshot's life: `translation.rs`).

pub(crate) use imp::*;

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// A mutex whose `lock` always gives the guard: a holder that panicked (the panic boundary of
    /// the C ABI caught it) left the data in a state every holder accepts, so the lock is not
    /// poisoned for good.
    pub(crate) struct Mutex<T>(std::sync::Mutex<T>);
    pub(crate) type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) const fn new(t: T) -> Self {
            Mutex(std::sync::Mutex::new(t))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    /// Lets the thread that will change what this one waits for run: a short sleep.
    pub(crate) fn pause() {
        std::thread::sleep(Duration::from_micros(20));
    }

    /// Whether `every` has passed since `last` (`None`: never happened).
    pub(crate) fn due(last: Option<Instant>, every: Duration) -> bool {
        last.is_none_or(|t| t.elapsed() >= every)
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::MutexGuard;
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// loom's mutex, with the library's `lock` (the guard, whatever a panicking holder left).
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(t: T) -> Self {
            Mutex(loom::sync::Mutex::new(t))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    /// Lets the model run another thread.
    pub(crate) fn pause() {
        loom::thread::yield_now();
    }

    /// Always: a schedule the model explores must not depend on the clock.
    pub(crate) fn due(_last: Option<Instant>, _every: Duration) -> bool {
        true
    }
}
