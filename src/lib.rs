//! upcxx-extra-nvshmem: one piece of GPU memory addressed from both NVSHMEM and UPC++.
//!
//! The library finds NVSHMEM's symmetric heap in the running process ([`discovery`]),
//! translates addresses between NVSHMEM (symmetric address, PE) and UPC++ (rank, raw address)
//! by offset ([`table`]; [`publish`] puts what discovery finds there), and exposes both through a C ABI ([`ffi`], header
//! `include/upcxx_extra_nvshmem.h`). [`report`] is the doctor's engine.

#![deny(unsafe_code)] // unsafe is allowed item by item; `no_mangle` only by the `#[export]` boundary macro

pub mod cuda;
pub mod discovery;
pub mod elf;
pub mod ffi;
pub mod heap;
pub mod layout;
pub mod logger;
pub mod mapping;
pub mod nvshmem_host;
pub mod nvshmem_lib;
pub mod peers;
pub mod publish;
pub mod report;
pub mod status;
pub mod table;

/// Runs when the library is loaded: logging, and where NVSHMEM's state is if NVSHMEM is loaded.
extern "C" fn on_load() {
    let _ = std::panic::catch_unwind(|| {
        logger::init();
        discovery::resolve_at_load();
    });
}

#[used]
#[allow(unsafe_code)] // the .init_array entry (load-time resolution)
#[unsafe(link_section = ".init_array")]
static ON_LOAD: extern "C" fn() = on_load;
