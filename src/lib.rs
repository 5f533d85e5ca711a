//! upcxx-extra-nvshmem: one piece of GPU memory addressed from both NVSHMEM and UPC++.
//!
//! The library finds NVSHMEM's symmetric heap in the running process ([`nvshmem`]: its host
//! library, its state, the heap that state describes), translates addresses between NVSHMEM
//! (symmetric address, PE) and UPC++ (rank, raw address) by offset ([`table`]: the heap, its peer
//! table and the policy of what is published there), and exposes both through the C ABI
//! ([`abi`], header `include/upcxx_extra_nvshmem.h`). [`doctor`] is the doctor's engine. At the
//! bottom: [`error`](crate::error) (the statuses, the error type, the thread's last error), [`panic`](crate::panic) (the
//! boundary every export runs inside), [`heap`] (the heap record `nvshmem` and `table` share)
//! and [`cuda`] (the one module that calls the CUDA driver); NVSHMEM itself is bound once, in
//! `nvshmem::host_library`.
//!
//! The Rust API of the rlib is [`abi`], the header's functions and types. [`internals`] is for
//! this package's own tests, benches, fuzzer and doctor binary.

#![deny(unsafe_code)] // unsafe is allowed item by item; `no_mangle` only by the `#[export]` boundary macro

// Layers, bottom to top (tests/build_layers.rs checks that no `crate::` path points upward):
// error, env, sync; panic, logger, heap, cuda; nvshmem; table; engine; doctor; abi.
pub mod abi;
mod cuda;
mod doctor;
mod engine;
mod env;
mod error;
mod heap;
mod logger;
mod nvshmem;
mod panic;
mod sync;
mod table;

/// `crate::fail!` (error.rs), crate-private.
pub(crate) use error::fail;

/// The modules this package's tests, benches, fuzzer and doctor binary reach into. Not an API:
/// nothing here is kept stable.
#[doc(hidden)]
pub mod internals {
    pub use crate::doctor::{elf_check, report};
    pub mod env {
        pub use crate::env::*;
    }
    pub use crate::nvshmem::{discovery, elf, host_library, state_layout};
    pub mod heap {
        pub use crate::heap::*;
    }
    pub use crate::table::{local_mapping, peers, translation};
}

/// Runs when the library is loaded: logging, and where NVSHMEM's state is if NVSHMEM is loaded.
extern "C" fn on_load() {
    let _ = std::panic::catch_unwind(|| {
        logger::init();
        nvshmem::discovery::resolve_at_load();
    });
}

#[used]
#[allow(unsafe_code)] // the .init_array entry (load-time resolution)
#[unsafe(link_section = ".init_array")]
static ON_LOAD: extern "C" fn() = on_load;
