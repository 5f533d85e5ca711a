//! Discovery: the resolution step that finds NVSHMEM's state (`select_source`), and where a
//! step finds it (`locate`).

use super::marshal::{intern, nonnull};
use crate::error::Status;
use crate::heap::Source;
use crate::nvshmem::discovery::{self, StateRef};
use std::ffi::{c_char, c_int, c_void};
use upcxx_extra_nvshmem_macros::export;

/// Where a resolution step finds NVSHMEM's state (`upcxx_extra_nvshmem_locate`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Location {
    /// The step that found it.
    pub source: Source,
    /// The NVSHMEM host library file (static storage, valid for the life of the process).
    pub library: *const c_char,
    /// Address of the state: host memory for DLSYM/SYMTAB, device memory for CUMODULE.
    pub address: *mut c_void,
    /// Size of the symbol holding the state (0 when unknown).
    pub symbol_size: usize,
    /// The state's version field (0x10000 + its size).
    pub version_field: u32,
    /// True when `address` is a device address (CUMODULE).
    pub is_device_address: bool,
}

/// Selects which resolution step discovery uses (an `upcxx_extra_nvshmem_source_t`: NONE = all
/// in order, DLSYM, SYMTAB or CUMODULE). Overrides `UPCXX_EXTRA_NVSHMEM_SOURCE`.
///
/// Statuses: OK; INVALID_ARGUMENT (not a step: MANUAL, or an unknown value). Process-wide state;
/// thread safety: any thread (affects later discoveries on every thread).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_select_source(source: c_int) -> Status {
    discovery::select(discovery::selection(source)?);
    Ok(())
}

/// Runs one resolution step (`source`, or NONE for the first that works) and says where it
/// finds NVSHMEM's state. Needs no initialised NVSHMEM for DLSYM and SYMTAB.
///
/// Statuses: OK; NULL_ARGUMENT; INVALID_ARGUMENT (not a step); NOT_LOADED; STEP_UNAVAILABLE;
/// NOT_INITIALIZED and CUDA_ERROR (CUMODULE). Reads only; thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_locate(source: c_int, out: *mut Location) -> Status {
    nonnull(out, "out")?;
    let loc = discovery::locate(discovery::selection(source)?)?;
    let (symbol_size, device) = match loc.state {
        StateRef::Host { symbol_size, .. } => (symbol_size.unwrap_or(0), false),
        StateRef::Device { symbol_size, .. } => (symbol_size, true),
    };
    // SAFETY: non-NULL caller storage.
    unsafe {
        out.write(Location {
            source: loc.source,
            library: intern(&loc.library.to_string_lossy()),
            address: loc.state.address() as *mut c_void,
            symbol_size,
            version_field: loc.version_field,
            is_device_address: device,
        })
    };
    Ok(())
}
