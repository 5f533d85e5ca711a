//! NVSHMEM's host library, for the C++ layer's nvshmem_init(): finding and loading it
//! (`nvshmem_load`), the unique id, initialisation and its check, finalisation
//! (`nvshmem_*`), and the PE/rank agreement (`check_pe_map`).

use super::marshal::{intern, nonnull};
use crate::error::Status;
use std::ffi::{c_char, c_int};
use upcxx_extra_nvshmem_macros::export;

/// NVSHMEM's host library as `upcxx_extra_nvshmem_nvshmem_load` finds it, read live.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NvshmemInfo {
    /// The host library's file (static storage, valid for the life of the process).
    pub library: *const c_char,
    /// NVSHMEM's release (major, minor, patch), from `nvshmem_info_get_name`: the version
    /// `heap_query` reports too.
    pub version_major: c_int,
    pub version_minor: c_int,
    pub version_patch: c_int,
    /// `nvshmemx_init_status()`: 0 not initialised, 1 bootstrapped, 2 and up initialised.
    pub init_status: c_int,
    /// This process's PE (`nvshmem_my_pe`) once NVSHMEM is bootstrapped; -1 before.
    pub my_pe: c_int,
    /// The number of PEs (`nvshmem_n_pes`) once NVSHMEM is bootstrapped; -1 before.
    pub n_pes: c_int,
}

/// An NVSHMEM unique id (`nvshmemx_uniqueid_t`, version 1: 128 bytes) as opaque bytes: made on
/// one process by `upcxx_extra_nvshmem_nvshmem_get_uniqueid`, sent to the others as it is.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UniqueId {
    pub bytes: [u8; 128],
}

const _: () = assert!(std::mem::size_of::<UniqueId>() == crate::nvshmem::init::UNIQUEID_BYTES);

fn nvshmem_info(host: &crate::nvshmem::init::Host) -> NvshmemInfo {
    let st = host.state();
    NvshmemInfo {
        library: intern(&host.lib.path.to_string_lossy()),
        version_major: host.version.0,
        version_minor: host.version.1,
        version_patch: host.version.2,
        init_status: st.init_status,
        my_pe: st.my_pe,
        n_pes: st.n_pes,
    }
}

/// Finds NVSHMEM's host library, loading it when it is not in the process yet: the one already
/// in the process (the program links it, or loaded it), else `libnvshmem_host.so.3` from the
/// loader's search path, else `$NVSHMEM_HOME/lib/libnvshmem_host.so.3` (loaded `RTLD_NOW |
/// RTLD_GLOBAL`, never unloaded). Checks that it has every function initialisation needs and is
/// NVSHMEM 3.x. `*out` (optional, may be NULL) receives its file, release, init status, PE and
/// PE count, read now. Every `upcxx_extra_nvshmem_nvshmem_*` function finds the library this way.
///
/// Statuses: OK; NOT_LOADED (no library found or loadable: the last error lists what was tried;
/// a function missing; not NVSHMEM 3.x); INVALID_ARGUMENT (`NVSHMEM_HOME`, needed because the
/// library was not found by its name, is not UTF-8). Process-wide state (a library loaded stays loaded);
/// thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_nvshmem_load(out: *mut NvshmemInfo) -> Status {
    let host = crate::nvshmem::init::host()?;
    if !out.is_null() {
        // SAFETY: non-NULL caller storage.
        unsafe { out.write(nvshmem_info(&host)) };
    }
    Ok(())
}

/// A unique id for NVSHMEM's unique-id bootstrap (`nvshmemx_get_uniqueid`), made on the one
/// process that then sends it to every process of the job (NVSHMEM opens a listening socket).
///
/// Statuses: OK; NULL_ARGUMENT; NOT_LOADED (as `nvshmem_load`); NOT_INITIALIZED (NVSHMEM refused:
/// the message has NVSHMEM's status). `*out` is written only on OK. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_nvshmem_get_uniqueid(out: *mut UniqueId) -> Status {
    nonnull(out, "out")?;
    let bytes = crate::nvshmem::init::host()?.get_uniqueid()?;
    // SAFETY: non-NULL caller storage.
    unsafe { out.write(UniqueId { bytes }) };
    Ok(())
}

/// Initialises NVSHMEM's host library with the unique-id bootstrap as PE `rank` of `n_ranks`
/// (`nvshmemx_set_attr_uniqueid_args`, `nvshmemx_hostlib_init_attr`) on the CUDA context current
/// on the calling thread, then checks that NVSHMEM is initialised as that PE of that many.
/// Collective: every one of the `n_ranks` processes calls it with the same id (NVSHMEM's
/// bootstrap waits for them). A program with NVSHMEM kernels initialises through NVSHMEM's device
/// library instead (the C++ layer does so when the program registered it), then calls
/// `upcxx_extra_nvshmem_nvshmem_check_init`.
///
/// Statuses: OK; NULL_ARGUMENT; INVALID_ARGUMENT (`n_ranks` < 1, `rank` not in `[0, n_ranks)`);
/// NOT_LOADED (as `nvshmem_load`); NOT_INITIALIZED (NVSHMEM returned an error, or is not
/// initialised as that PE afterwards: the message has NVSHMEM's status, release and file).
/// Process-wide state; thread safety: one thread of the process, the only one initialising or
/// finalising NVSHMEM; the one function here that waits on other processes.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_nvshmem_init(id: *const UniqueId, rank: c_int, n_ranks: c_int) -> Status {
    nonnull(id, "id")?;
    let host = crate::nvshmem::init::host()?;
    // SAFETY: non-NULL caller storage of a unique id (read by value: any alignment).
    let id = unsafe { std::ptr::read_unaligned(id) };
    host.init(&id.bytes, rank, n_ranks)
}

/// Checks that NVSHMEM is initialised as PE `rank` of `n_ranks` (e.g. after initialising it
/// through NVSHMEM's device library).
///
/// Statuses: OK; NOT_LOADED (as `nvshmem_load`); NOT_INITIALIZED (not initialised, or as another
/// PE or PE count: the message says which). Reads only; thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_nvshmem_check_init(rank: c_int, n_ranks: c_int) -> Status {
    crate::nvshmem::init::host()?.expect_initialized(rank, n_ranks)
}

/// Finalises NVSHMEM's host library (`nvshmemx_hostlib_finalize`) when NVSHMEM is initialised;
/// nothing when it is not (twice is harmless), nor when it is only bootstrapped, as a failed
/// `nvshmem_init` can leave it (NVSHMEM's finalisation would abort the process there). For NVSHMEM initialised through
/// `upcxx_extra_nvshmem_nvshmem_init`; NVSHMEM initialised through its device library is finalised
/// by the device library. Destroy the heap's users first (`detach`).
///
/// Statuses: OK; NOT_LOADED (as `nvshmem_load`). Process-wide state; thread safety: as
/// `nvshmem_init` (collective as NVSHMEM's finalisation is).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_nvshmem_finalize() -> Status {
    crate::nvshmem::init::host()?.finalize();
    Ok(())
}

/// The PE/rank agreement: `pe_of_rank[r]` is the NVSHMEM PE of UPC++ rank `r` (`n_ranks`
/// entries), `n_pes_of_rank[r]` the PE count NVSHMEM reports on rank `r` (optional, may be NULL:
/// every rank's is taken as `n_ranks`). NVSHMEM's PEs and the ranks must be the same processes:
/// every PE count `n_ranks`, every PE in `[0, n_ranks)`, each rank a different PE. The first
/// failing rank decides; `*failed_rank` (optional) receives it (-1 on OK), and the message names
/// it. The same check as `set_peers`' permutation check (one check, rank -> PE here).
///
/// Statuses: OK; NULL_ARGUMENT (`pe_of_rank`); INVALID_ARGUMENT (`n_ranks` < 1, a PE count that is
/// not `n_ranks`); BAD_PE (a PE out of range, or reported by two ranks). No state; thread safety:
/// any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_check_pe_map(
    n_ranks: c_int,
    pe_of_rank: *const c_int,
    n_pes_of_rank: *const c_int,
    failed_rank: *mut c_int,
) -> Status {
    let set_failed = |r: c_int| {
        if !failed_rank.is_null() {
            // SAFETY: non-NULL caller storage.
            unsafe { failed_rank.write(r) };
        }
    };
    set_failed(-1);
    nonnull(pe_of_rank, "pe_of_rank")?;
    if n_ranks < 1 {
        crate::fail!(InvalidArgument, "n_ranks is {n_ranks}");
    }
    let n = n_ranks as usize;
    // SAFETY: the caller passes n_ranks entries (each array).
    let pes = unsafe { std::slice::from_raw_parts(pe_of_rank, n) };
    let counts = (!n_pes_of_rank.is_null()).then(|| unsafe { std::slice::from_raw_parts(n_pes_of_rank, n) });
    crate::table::peers::check_pe_map(pes, counts).map_err(|(rank, e)| {
        set_failed(rank as c_int);
        e
    })
}
