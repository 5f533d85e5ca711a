//! NVSHMEM's host library as the C++ layer's `nvshmem_init()` needs it: found (or loaded), its
//! release checked (with [`LoadedLibrary::version`], the reader discovery uses too), a unique id
//! made, NVSHMEM initialised with it and finalised. The one binding of these NVSHMEM functions
//! (the C++ layer reaches them through the C ABI only).
//!
//! The structures passed to NVSHMEM (the unique id and the init attributes) are NVSHMEM 3.x's
//! fixed-size, versioned ABI structures in their version-1 layout, which every 3.x host library
//! accepts: each carries a version field `(1 << 16) + size` that tells the library which layout
//! it is given.

use crate::env;
use crate::error::{Error, Result, Status};
use crate::nvshmem::host_library::{self, LoadedLibrary};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::PathBuf;

/// The soname of NVSHMEM 3.x's host library.
pub const SONAME: &str = "libnvshmem_host.so.3";
/// `NVSHMEMX_INIT_WITH_UNIQUEID`.
const INIT_WITH_UNIQUEID: c_uint = 1 << 3;
/// The bytes of a unique id (`nvshmemx_uniqueid_v1`).
pub const UNIQUEID_BYTES: usize = 128;

/// `nvshmemx_uniqueid_v1` (bootstrap_device_host/nvshmem_uniqueid.h).
#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueIdV1 {
    version: c_int,
    internal: [c_char; 124],
}
/// `nvshmemx_uniqueid_args_v1`.
#[repr(C)]
struct UniqueIdArgsV1 {
    version: c_int,
    id: *mut UniqueIdV1,
    myrank: c_int,
    nranks: c_int,
}
/// `nvshmemx_init_args_v1` (device_host/nvshmem_types.h).
#[repr(C)]
struct InitArgsV1 {
    version: c_int,
    uid_args: UniqueIdArgsV1,
    content: [c_char; 96],
}
/// `nvshmemx_init_attr_v1`.
#[repr(C)]
struct InitAttrV1 {
    version: c_int,
    mpi_comm: *mut c_void,
    args: InitArgsV1,
}
// The sizes NVSHMEM's headers assert for the version-1 layouts.
const _: () = assert!(std::mem::size_of::<UniqueIdV1>() == UNIQUEID_BYTES);
const _: () = assert!(std::mem::size_of::<UniqueIdArgsV1>() == 24);
const _: () = assert!(std::mem::size_of::<InitArgsV1>() == 128);
const _: () = assert!(std::mem::size_of::<InitAttrV1>() == 144);

const fn version_of<T>() -> c_int {
    (1 << 16) + std::mem::size_of::<T>() as c_int
}

/// A unique id as NVSHMEM's `NVSHMEMX_UNIQUEID_INITIALIZER` makes it.
fn uniqueid_initializer() -> UniqueIdV1 {
    UniqueIdV1 { version: version_of::<UniqueIdV1>(), internal: [0; 124] }
}

/// `NVSHMEMX_INIT_ATTR_INITIALIZER`.
fn init_attr_initializer() -> InitAttrV1 {
    InitAttrV1 {
        version: version_of::<InitAttrV1>(),
        mpi_comm: std::ptr::null_mut(),
        args: InitArgsV1 {
            version: version_of::<InitArgsV1>(),
            uid_args: UniqueIdArgsV1 { version: version_of::<UniqueIdArgsV1>(), id: std::ptr::null_mut(), myrank: -1, nranks: -1 },
            content: [0; 96],
        },
    }
}

/// NVSHMEM's host library, checked: every function needed, release 3.x.
pub struct Host {
    pub lib: &'static LoadedLibrary,
    pub version: (i32, i32, i32),
}

/// What [`Host::state`] reads: `nvshmemx_init_status()`, and NVSHMEM's PE and PE count once it is
/// bootstrapped (-1 before).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    pub init_status: c_int,
    pub my_pe: c_int,
    pub n_pes: c_int,
}

/// NVSHMEM's host library: the one already in the process (the program links it, or loaded it),
/// else [`SONAME`] from the loader's search path, else from `$NVSHMEM_HOME/lib`; loaded
/// `RTLD_NOW | RTLD_GLOBAL` and kept loaded. NOT_LOADED when none can be found, when it lacks a
/// function initialisation needs, or when it is not NVSHMEM 3.x.
pub fn host() -> Result<Host> {
    let lib = match host_library::loaded() {
        Some(lib) => lib,
        None => load()?,
    };
    check(lib)
}

fn load() -> Result<&'static LoadedLibrary> {
    let from_home = env::nvshmem_home().map(|home| home.join("lib").join(SONAME));
    let mut tried = Vec::new();
    for name in [Some(PathBuf::from(SONAME)), from_home].into_iter().flatten() {
        // `load_global` takes UTF-8 only: a name it cannot be given is refused, never given as
        // another (lossy) name.
        let Some(name) = name.to_str() else {
            crate::fail!(
                InvalidArgument,
                "NVSHMEM's host library is not in this process and could not be loaded ({}), and {} is set to {:?}, \
                 which is not valid UTF-8: this library cannot load {SONAME} from it; name its lib directory in \
                 LD_LIBRARY_PATH instead, or link the program with {SONAME}",
                tried.join("; "),
                env::NVSHMEM_HOME.name,
                env::raw(env::NVSHMEM_HOME).unwrap_or_default()
            );
        };
        if let Err(e) = host_library::load_global(name) {
            tried.push(e);
            continue;
        }
        if let Some(lib) = host_library::loaded() {
            return Ok(lib);
        }
        tried.push(format!("{name} was loaded but exports no nvshmemx_init_status"));
    }
    crate::fail!(
        NotLoaded,
        "NVSHMEM's host library is not in this process and could not be loaded ({}): link the program with \
         {SONAME} (CMake: UpcxxExtraNvshmem::nvshmem), or name its directory in LD_LIBRARY_PATH or NVSHMEM_HOME",
        tried.join("; ")
    )
}

/// The functions initialisation and finalisation call, in the order they are checked.
fn missing(lib: &LoadedLibrary) -> Option<&'static str> {
    let a = &lib.api;
    [
        (a.hostlib_init_attr.is_some(), "nvshmemx_hostlib_init_attr"),
        (a.hostlib_finalize.is_some(), "nvshmemx_hostlib_finalize"),
        (a.init_status.is_some(), "nvshmemx_init_status"),
        (a.get_uniqueid.is_some(), "nvshmemx_get_uniqueid"),
        (a.set_attr_uniqueid_args.is_some(), "nvshmemx_set_attr_uniqueid_args"),
        (a.my_pe.is_some(), "nvshmem_my_pe"),
        (a.n_pes.is_some(), "nvshmem_n_pes"),
    ]
    .into_iter()
    .find_map(|(present, name)| (!present).then_some(name))
}

fn check(lib: &'static LoadedLibrary) -> Result<Host> {
    if let Some(name) = missing(lib) {
        crate::fail!(NotLoaded, "{} has no {name}: NVSHMEM 3.x is needed", lib.path.display());
    }
    let path = lib.path.display().to_string();
    // The one version reader (discovery's heap_query reports the same).
    let Some(version) = lib.version() else {
        let said = lib.name().map_or("nvshmem_info_get_name is missing".to_string(), |n| format!("nvshmem_info_get_name says \"{n}\""));
        crate::fail!(NotLoaded, "{path}: {said}, not a release: NVSHMEM 3.x is needed");
    };
    if version.0 != 3 {
        crate::fail!(
            NotLoaded,
            "{path} is NVSHMEM {}.{}.{}: upcxx-extra-nvshmem needs NVSHMEM 3.x (tested: 3.1.7, 3.4.5, 3.8.0)",
            version.0,
            version.1,
            version.2
        );
    }
    Ok(Host { lib, version })
}

impl Host {
    /// "NVSHMEM 3.4.5 from /path/libnvshmem_host.so.3", for messages.
    pub fn describe(&self) -> String {
        let (a, b, c) = self.version;
        format!("NVSHMEM {a}.{b}.{c} from {}", self.lib.path.display())
    }

    /// The init status, and the PE and PE count once NVSHMEM is bootstrapped.
    #[allow(unsafe_code)]
    pub fn state(&self) -> State {
        // Every function is present (checked by `check`); my_pe and n_pes are called only once
        // NVSHMEM is bootstrapped.
        let init_status = self.lib.init_status().unwrap_or(host_library::STATUS_INVALID);
        if host_library::status_is_bootstrapped(init_status) {
            State { init_status, my_pe: self.lib.my_pe().unwrap_or(-1), n_pes: self.lib.n_pes().unwrap_or(-1) }
        } else {
            State { init_status, my_pe: -1, n_pes: -1 }
        }
    }

    /// `nvshmemx_get_uniqueid`: a unique id for the unique-id bootstrap (on one process; a
    /// listening socket of NVSHMEM's bootstrap).
    #[allow(unsafe_code)]
    pub fn get_uniqueid(&self) -> Result<[u8; UNIQUEID_BYTES]> {
        let mut id = uniqueid_initializer();
        // SAFETY: a version-1 unique id, initialised as NVSHMEM's initializer does.
        let get = self.lib.api.get_uniqueid.expect("checked by `check`");
        let s = unsafe { get(&mut id as *mut UniqueIdV1 as *mut c_void) };
        if s != 0 {
            crate::fail!(
                NotInitialized,
                "nvshmemx_get_uniqueid ({}) failed with NVSHMEM status {s} (NVSHMEM_DEBUG=WARN prints NVSHMEM's \
                 reasons; the unique-id bootstrap needs a network interface, NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME names one)",
                self.describe()
            );
        }
        // SAFETY: UniqueIdV1 is plain data of exactly UNIQUEID_BYTES bytes.
        Ok(unsafe { std::mem::transmute::<UniqueIdV1, [u8; UNIQUEID_BYTES]>(id) })
    }

    /// NVSHMEM initialised with the unique-id bootstrap as PE `rank` of `n_ranks`
    /// (`nvshmemx_set_attr_uniqueid_args`, `nvshmemx_hostlib_init_attr`), then checked: NVSHMEM
    /// initialised, as that PE of that many.
    #[allow(unsafe_code)]
    pub fn init(&self, id: &[u8; UNIQUEID_BYTES], rank: c_int, n_ranks: c_int) -> Result<()> {
        if n_ranks < 1 || rank < 0 || rank >= n_ranks {
            crate::fail!(InvalidArgument, "rank {rank} of {n_ranks}: the rank must be in [0, n_ranks), n_ranks >= 1");
        }
        // SAFETY: plain data of exactly UNIQUEID_BYTES bytes; the copy is aligned for NVSHMEM.
        let id = unsafe { std::mem::transmute::<[u8; UNIQUEID_BYTES], UniqueIdV1>(*id) };
        let mut attr = init_attr_initializer();
        let failed = |call: &str, s: c_int| {
            Error::new(
                Status::NotInitialized,
                format!("{call} ({}) returned {s} (NVSHMEM_DEBUG=WARN prints NVSHMEM's reasons)", self.describe()),
            )
        };
        // SAFETY: version-1 structures as NVSHMEM's initializers make them; `id` outlives the calls.
        let (set_args, init_attr) = (self.lib.api.set_attr_uniqueid_args, self.lib.api.hostlib_init_attr);
        let (set_args, init_attr) = (set_args.expect("checked by `check`"), init_attr.expect("checked by `check`"));
        let s = unsafe { set_args(rank, n_ranks, &id as *const UniqueIdV1 as *const c_void, &mut attr as *mut InitAttrV1 as *mut c_void) };
        if s != 0 {
            return Err(failed("nvshmemx_set_attr_uniqueid_args", s));
        }
        // SAFETY: as above; NVSHMEM's bootstrap, collective over the n_ranks processes.
        let s = unsafe { init_attr(INIT_WITH_UNIQUEID, &mut attr as *mut InitAttrV1 as *mut c_void) };
        if s != 0 {
            return Err(failed("nvshmemx_hostlib_init_attr", s));
        }
        self.expect_initialized(rank, n_ranks)
            .map_err(|e| Error::new(e.status, format!("nvshmemx_hostlib_init_attr returned 0, but {}", e.message)))
    }

    /// NOT_INITIALIZED unless NVSHMEM is initialised as PE `rank` of `n_ranks`.
    pub fn expect_initialized(&self, rank: c_int, n_ranks: c_int) -> Result<()> {
        let st = self.state();
        if !host_library::status_is_initialized(st.init_status) || st.my_pe != rank || st.n_pes != n_ranks {
            crate::fail!(
                NotInitialized,
                "{} is not initialised as PE {rank} of {n_ranks}: nvshmemx_init_status() is {}, PE {} of {} \
                 (NVSHMEM_DEBUG=WARN prints NVSHMEM's reasons)",
                self.describe(),
                st.init_status,
                st.my_pe,
                st.n_pes
            );
        }
        Ok(())
    }

    /// `nvshmemx_hostlib_finalize`, when NVSHMEM is initialised; nothing otherwise (NVSHMEM's
    /// finalisation aborts the process when NVSHMEM is only bootstrapped, as a failed
    /// initialisation leaves it).
    #[allow(unsafe_code)]
    pub fn finalize(&self) {
        if let (true, Some(finalize)) = (host_library::status_is_initialized(self.state().init_status), self.lib.api.hostlib_finalize) {
            // SAFETY: NVSHMEM is initialised; its public finalisation.
            unsafe { finalize() };
        }
    }
}
