//! NVSHMEM's host library: the one binding of it in this crate. Nothing else resolves an NVSHMEM
//! symbol, loads the library or holds a pointer to one of its functions: every module asks the
//! [`LoadedLibrary`] this module resolved (its functions, the init status and what it means,
//! `nvshmem_ptr`), resolved once per loaded library ([`loaded`], [`known`]).
//!
//! This library is never linked against NVSHMEM. It looks for `libnvshmem_host.so*` among the
//! loaded objects (`dl_iterate_phdr`), falling back to `dladdr` on a global `nvshmem_ptr` (a
//! static or renamed build), and takes a `RTLD_NOLOAD` handle to it for `dlsym`.

use parking_lot::Mutex;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// `nvshmemx_init_status()` value from which NVSHMEM is bootstrapped (`NVSHMEM_STATUS_IS_BOOTSTRAPPED`).
pub const STATUS_IS_BOOTSTRAPPED: c_int = 1;
/// `nvshmemx_init_status()` value from which NVSHMEM is initialised (`NVSHMEM_STATUS_IS_INITIALIZED`).
pub const STATUS_IS_INITIALIZED: c_int = 2;
/// `NVSHMEM_STATUS_INVALID`.
pub const STATUS_INVALID: c_int = c_int::MAX;

/// Does this `nvshmemx_init_status()` value say NVSHMEM is initialised? (The one range check.)
pub fn status_is_initialized(s: c_int) -> bool {
    (STATUS_IS_INITIALIZED..STATUS_INVALID).contains(&s)
}

/// Does this `nvshmemx_init_status()` value say NVSHMEM is bootstrapped (or initialised)?
pub fn status_is_bootstrapped(s: c_int) -> bool {
    (STATUS_IS_BOOTSTRAPPED..STATUS_INVALID).contains(&s)
}

/// The NVSHMEM host functions this library calls. Each may be missing in an odd build. The
/// initialisation functions take NVSHMEM's versioned structures (`nvshmem::init` builds them) as
/// untyped pointers.
#[derive(Clone, Copy, Debug, Default)]
pub struct PublicApi {
    pub init_status: Option<unsafe extern "C" fn() -> c_int>,
    pub ptr: Option<unsafe extern "C" fn(*const c_void, c_int) -> *mut c_void>,
    pub my_pe: Option<unsafe extern "C" fn() -> c_int>,
    pub n_pes: Option<unsafe extern "C" fn() -> c_int>,
    pub info_get_version: Option<unsafe extern "C" fn(*mut c_int, *mut c_int)>,
    pub info_get_name: Option<unsafe extern "C" fn(*mut c_char)>,
    pub cumodule_init: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    pub cumodule_finalize: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    /// `nvshmemx_hostlib_init_attr(flags, nvshmemx_init_attr_t *)`.
    pub hostlib_init_attr: Option<unsafe extern "C" fn(c_uint, *mut c_void) -> c_int>,
    pub hostlib_finalize: Option<unsafe extern "C" fn()>,
    /// `nvshmemx_get_uniqueid(nvshmemx_uniqueid_t *)`.
    pub get_uniqueid: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    /// `nvshmemx_set_attr_uniqueid_args(rank, nranks, const nvshmemx_uniqueid_t *, nvshmemx_init_attr_t *)`.
    pub set_attr_uniqueid_args: Option<unsafe extern "C" fn(c_int, c_int, *const c_void, *mut c_void) -> c_int>,
}

/// One loaded segment of the library (absolute addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub start: usize,
    pub end: usize,
    pub writable: bool,
    pub executable: bool,
}

/// The NVSHMEM host library as loaded in this process.
#[derive(Debug)]
pub struct LoadedLibrary {
    /// The file it was loaded from.
    pub path: PathBuf,
    /// The load bias: symbol value + bias = address.
    pub load_bias: usize,
    /// Its PT_LOAD segments.
    pub segments: Vec<Segment>,
    /// A `dlopen(RTLD_NOLOAD)` handle (keeps the library loaded while we hold it).
    pub handle: Handle,
    pub api: PublicApi,
}

/// A `dlopen` handle, closed on drop.
#[derive(Debug)]
pub struct Handle(pub *mut c_void);
// SAFETY: a dlopen handle is a process-wide token; dlsym/dlclose are thread-safe.
#[allow(unsafe_code)]
unsafe impl Send for Handle {}
#[allow(unsafe_code)]
unsafe impl Sync for Handle {}
impl Drop for Handle {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the handle came from dlopen and is closed exactly once.
            unsafe { libc::dlclose(self.0) };
        }
    }
}

impl LoadedLibrary {
    /// Does `[addr, addr + len)` lie inside one loaded writable segment of this library?
    pub fn contains_writable(&self, addr: usize, len: usize) -> bool {
        self.segments.iter().any(|s| s.writable && addr >= s.start && addr.checked_add(len).is_some_and(|e| e <= s.end))
    }

    /// Is `addr` inside one loaded executable segment of this library?
    pub fn in_executable(&self, addr: usize) -> bool {
        self.segments.iter().any(|s| s.executable && addr >= s.start && addr < s.end)
    }

    /// Is `addr` (a `dlsym` result) a function of this library: inside one of its executable
    /// segments and, where the loader can say (`dladdr1`), the symbol there is `STT_FUNC` or
    /// `STT_GNU_IFUNC`? A data symbol that has a function's name is never called.
    #[allow(unsafe_code)]
    pub fn is_function(&self, addr: usize) -> bool {
        if addr == 0 || !self.in_executable(addr) {
            return false;
        }
        #[cfg(target_env = "gnu")]
        {
            const RTLD_DL_SYMENT: c_int = 1;
            const STT_FUNC: u8 = 2;
            const STT_GNU_IFUNC: u8 = 10;
            // SAFETY: an all-zero Dl_info is a valid out-parameter.
            let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
            let mut sym: *mut c_void = std::ptr::null_mut();
            // SAFETY: valid out-parameters; dladdr1 only reads the loader's tables.
            let found = unsafe { libc::dladdr1(addr as *const c_void, &mut info, &mut sym, RTLD_DL_SYMENT) } != 0;
            if found && !sym.is_null() {
                // SAFETY: with RTLD_DL_SYMENT, `sym` points to the ElfW(Sym) the loader matched.
                let s = unsafe { &*(sym as *const libc::Elf64_Sym) };
                let typ = s.st_info & 0xf;
                // The symbol at exactly this address says what it is. (An IFUNC's dlsym result
                // is its implementation, which need not be a dynamic symbol: the nearest one
                // below it says nothing then.)
                if info.dli_saddr as usize == addr {
                    return typ == STT_FUNC || typ == STT_GNU_IFUNC;
                }
            }
        }
        true
    }

    /// `dlsym` of a function: NULL when the symbol is not exported or is not a function
    /// ([`Self::is_function`]).
    fn function(&self, name: &CStr) -> *mut c_void {
        let p = self.dlsym(name);
        if self.is_function(p as usize) { p } else { std::ptr::null_mut() }
    }

    /// `dlsym` in this library; NULL when the symbol is not exported.
    #[allow(unsafe_code)]
    fn dlsym(&self, name: &CStr) -> *mut c_void {
        // SAFETY: valid handle and NUL-terminated name.
        unsafe { libc::dlsym(self.handle.0, name.as_ptr()) }
    }

    /// The address of `nvshmemi_device_state` when the library exports it (0: it does not).
    pub fn exported_device_state(&self) -> usize {
        self.dlsym(c"nvshmemi_device_state") as usize
    }

    /// Does the library export `nvshmemi_state` (whose layout is private: never read)?
    pub fn exports_state(&self) -> bool {
        !self.dlsym(c"nvshmemi_state").is_null()
    }

    /// Which of NVSHMEM's identifying functions (`nvshmemx_init_status`, `nvshmem_info_get_name`)
    /// the library exports as something that is not a function (a data symbol, never called).
    pub fn api_names_exported_as_data(&self) -> Vec<&'static str> {
        let data = |f: Option<()>, name: &'static CStr| f.is_none() && !self.dlsym(name).is_null();
        [(self.api.init_status.map(|_| ()), c"nvshmemx_init_status"), (self.api.info_get_name.map(|_| ()), c"nvshmem_info_get_name")]
            .into_iter()
            .filter(|(f, n)| data(*f, n))
            .map(|(_, n)| n.to_str().unwrap_or_default())
            .collect()
    }

    /// `nvshmemx_init_status()`, or None when the build lacks it.
    #[allow(unsafe_code)]
    pub fn init_status(&self) -> Option<c_int> {
        // SAFETY: a public NVSHMEM function without arguments, safe before init.
        self.api.init_status.map(|f| unsafe { f() })
    }

    /// True when `nvshmemx_init_status()` says NVSHMEM is initialised.
    pub fn is_initialized(&self) -> bool {
        self.init_status().is_some_and(status_is_initialized)
    }

    /// `nvshmem_my_pe()` (call it once NVSHMEM is bootstrapped), or None when the build lacks it.
    #[allow(unsafe_code)]
    pub fn my_pe(&self) -> Option<c_int> {
        // SAFETY: a public NVSHMEM function without arguments.
        self.api.my_pe.map(|f| unsafe { f() })
    }

    /// `nvshmem_n_pes()` (call it once NVSHMEM is bootstrapped), or None when the build lacks it.
    #[allow(unsafe_code)]
    pub fn n_pes(&self) -> Option<c_int> {
        // SAFETY: a public NVSHMEM function without arguments.
        self.api.n_pes.map(|f| unsafe { f() })
    }

    /// `nvshmem_ptr(addr, pe)` as an address (0: not mapped), or None when the build lacks it.
    /// `nvshmem_ptr` only compares the address against its heaps; it never dereferences it.
    #[allow(unsafe_code)]
    pub fn nvshmem_ptr(&self, addr: usize, pe: c_int) -> Option<usize> {
        // SAFETY: a public NVSHMEM function; the address is only looked up.
        self.api.ptr.map(|f| unsafe { f(addr as *const c_void, pe) } as usize)
    }

    /// `nvshmemx_cumodule_init(module)`, or None when the build lacks it.
    #[allow(unsafe_code)]
    pub fn cumodule_init(&self, module: &crate::cuda::Module) -> Option<c_int> {
        // SAFETY: a public NVSHMEM function, given a module loaded in the current context.
        self.api.cumodule_init.map(|f| unsafe { f(module.raw()) })
    }

    /// The NVSHMEM release `(major, minor, patch)`, parsed from `nvshmem_info_get_name`
    /// ("NVSHMEM v3.4.5"; callable before init). `nvshmem_info_get_version` is not used: it
    /// returns the OpenSHMEM specification version (1.3), not the release.
    pub fn version(&self) -> Option<(i32, i32, i32)> {
        parse_vendor_version(&self.name()?)
    }

    /// `nvshmem_info_get_name` (e.g. "NVSHMEM v3.4.5").
    #[allow(unsafe_code)]
    pub fn name(&self) -> Option<String> {
        let get = self.api.info_get_name?;
        // NVSHMEM_MAX_NAME_LEN is 256; leave generous room.
        let mut buf = vec![0 as c_char; 1024];
        // SAFETY: the buffer exceeds NVSHMEM_MAX_NAME_LEN.
        unsafe { get(buf.as_mut_ptr()) };
        // SAFETY: zero-initialised buffer, so it is NUL-terminated.
        let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
        Some(s.to_string_lossy().into_owned())
    }
}

/// "NVSHMEM v3.4.5" -> (3, 4, 5).
pub fn parse_vendor_version(name: &str) -> Option<(i32, i32, i32)> {
    let v = name.rsplit('v').next()?;
    let mut it = v.trim().split('.').map(|p| p.trim().parse::<i32>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(a)), Some(Ok(b)), Some(Ok(c))) => Some((a, b, c)),
        _ => None,
    }
}

/// Does this file name look like the NVSHMEM host library?
pub fn is_host_library_name(path: &str) -> bool {
    path.rsplit('/').next().is_some_and(|f| f.starts_with("libnvshmem_host.so"))
}

struct Found {
    path: Option<PathBuf>,
    load_bias: usize,
    segments: Vec<Segment>,
}

struct Search {
    want_name: bool,
    addr: usize,
    found: Option<Found>,
}

#[allow(unsafe_code)]
unsafe extern "C" fn phdr_callback(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut c_void) -> c_int {
    // SAFETY: called by dl_iterate_phdr with a valid info; data is our &mut Search.
    let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: NUL-terminated name provided by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
    };
    let bias = info.dlpi_addr as usize;
    let mut segments = Vec::new();
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr has dlpi_phnum entries.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == libc::PT_LOAD {
            let start = bias.wrapping_add(ph.p_vaddr as usize);
            segments.push(Segment {
                start,
                end: start.saturating_add(ph.p_memsz as usize),
                writable: ph.p_flags & libc::PF_W != 0,
                executable: ph.p_flags & libc::PF_X != 0,
            });
        }
    }
    let hit =
        if search.want_name { is_host_library_name(&name) } else { segments.iter().any(|s| search.addr >= s.start && search.addr < s.end) };
    if hit {
        let path = if name.is_empty() { std::fs::read_link("/proc/self/exe").ok() } else { Some(PathBuf::from(name)) };
        search.found = Some(Found { path, load_bias: bias, segments });
        return 1;
    }
    0
}

#[allow(unsafe_code)]
fn iterate(search: &mut Search) {
    // SAFETY: the callback matches the expected signature and only touches `search`.
    unsafe { libc::dl_iterate_phdr(Some(phdr_callback), search as *mut Search as *mut c_void) };
}

/// Every NVSHMEM host library resolved in this process, one per (path, load bias), never freed:
/// its handle keeps it loaded (NVSHMEM is never unloaded while its heap is in use), and its
/// function pointers stay valid for the life of the process.
static RESOLVED: Mutex<Vec<&'static LoadedLibrary>> = Mutex::new(Vec::new());
/// The library [`known`] answers with without a search (null: none yet).
static CURRENT: AtomicPtr<LoadedLibrary> = AtomicPtr::new(std::ptr::null_mut());
/// The loaded objects were searched and held no NVSHMEM: [`known`] does not search again (the
/// search takes the loader's lock) until [`forget_absence`].
static ABSENT: AtomicBool = AtomicBool::new(false);
/// How many times [`known`] searched the loaded objects (for the tests).
static KNOWN_SEARCHES: AtomicUsize = AtomicUsize::new(0);

/// The NVSHMEM host library loaded in this process now (one search of the loaded objects), its
/// functions resolved once per loaded library; None when no NVSHMEM is loaded.
pub fn loaded() -> Option<&'static LoadedLibrary> {
    let found = search_loaded()?;
    let path = found.path.clone()?;
    let mut all = RESOLVED.lock();
    let hit = all.iter().copied().find(|l| l.path == path && l.load_bias == found.load_bias);
    let lib = match hit {
        Some(l) => l,
        None => {
            let l: &'static LoadedLibrary = Box::leak(Box::new(open_loaded(found)?));
            all.push(l);
            l
        }
    };
    CURRENT.store(lib as *const LoadedLibrary as *mut LoadedLibrary, Ordering::Release);
    ABSENT.store(false, Ordering::Release);
    Some(lib)
}

/// The NVSHMEM host library last resolved, without searching the loaded objects again (the hot
/// paths: `local_ptr`); when none was, one search, not repeated after it found nothing until
/// [`forget_absence`].
pub fn known() -> Option<&'static LoadedLibrary> {
    let p = CURRENT.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: CURRENT only ever holds a leaked, never freed `&'static LoadedLibrary`.
        #[allow(unsafe_code)]
        return Some(unsafe { &*p });
    }
    if ABSENT.load(Ordering::Acquire) {
        return None;
    }
    KNOWN_SEARCHES.fetch_add(1, Ordering::Relaxed);
    let lib = loaded();
    if lib.is_none() {
        ABSENT.store(true, Ordering::Release);
    }
    lib
}

/// A new heap is published: NVSHMEM may have been loaded since [`known`] last found none.
pub fn forget_absence() {
    ABSENT.store(false, Ordering::Release);
}

/// How many times [`known`] searched the loaded objects for NVSHMEM in this process.
pub fn known_searches() -> usize {
    KNOWN_SEARCHES.load(Ordering::Relaxed)
}

/// Where the NVSHMEM host library is among the loaded objects: by its file name, else the object
/// that defines `nvshmemx_init_status` (a build under another name, or linked statically).
#[allow(unsafe_code)]
fn search_loaded() -> Option<Found> {
    let mut search = Search { want_name: true, addr: 0, found: None };
    iterate(&mut search);
    if search.found.is_none() {
        // SAFETY: RTLD_DEFAULT lookup of a NUL-terminated name.
        let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"nvshmemx_init_status".as_ptr()) };
        if sym.is_null() {
            return None;
        }
        search = Search { want_name: false, addr: sym as usize, found: None };
        iterate(&mut search);
    }
    search.found
}

/// A `RTLD_NOLOAD` handle to a library found loaded, and its functions.
#[allow(unsafe_code)]
fn open_loaded(found: Found) -> Option<LoadedLibrary> {
    let path = found.path?;
    let cpath = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already loaded.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    let handle = if handle.is_null() {
        // The main executable: the global handle finds its exported symbols.
        // SAFETY: dlopen(NULL) returns the handle of the main program.
        unsafe { libc::dlopen(std::ptr::null(), libc::RTLD_LAZY) }
    } else {
        handle
    };
    if handle.is_null() {
        return None;
    }
    let mut lib =
        LoadedLibrary { path, load_bias: found.load_bias, segments: found.segments, handle: Handle(handle), api: PublicApi::default() };
    lib.api = resolve_api(&lib);
    Some(lib)
}

/// Loads `name` (a soname for the loader's search path, or a path) `RTLD_NOW | RTLD_GLOBAL`,
/// never unloaded: NVSHMEM stays loaded for the life of the process. Err is `dlerror()`.
#[allow(unsafe_code)]
pub fn load_global(name: &str) -> Result<(), String> {
    let c = CString::new(name).map_err(|_| format!("{name}: contains NUL"))?;
    // SAFETY: loading NVSHMEM's host library runs its constructors; that is what using it
    // requires. The handle is never closed.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if h.is_null() { Err(dlerror_text(name)) } else { Ok(()) }
}

#[allow(unsafe_code)]
fn dlerror_text(fallback: &str) -> String {
    // SAFETY: dlerror returns a thread-local message or NULL.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        fallback.to_string()
    } else {
        // SAFETY: a NUL-terminated message of the loader.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Opens a library file for inspection (the doctor): `dlopen(RTLD_NOW | RTLD_LOCAL)`, without
/// initialising NVSHMEM. `canonical` is a canonical path whose ELF headers the caller checked
/// (`doctor::elf_check`): `dlopen` trusts the file. Err carries `dlerror()`, or says the
/// library loaded but is not NVSHMEM.
#[allow(unsafe_code)]
pub fn open_file(canonical: &std::path::Path) -> Result<LoadedLibrary, String> {
    let cpath = CString::new(canonical.as_os_str().as_encoded_bytes()).map_err(|_| "path contains NUL".to_string())?;
    // SAFETY: loading a library runs its constructors; that is what inspecting it requires.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(dlerror_text("dlopen failed"));
    }
    let handle = Handle(handle);
    // Find the loaded object by an address inside it: any exported symbol will do.
    let probe = [c"nvshmemx_init_status", c"nvshmem_ptr", c"nvshmem_info_get_name"]
        .iter()
        // SAFETY: valid handle and names.
        .map(|n| unsafe { libc::dlsym(handle.0, n.as_ptr()) } as usize)
        .find(|p| *p != 0);
    let Some(addr) = probe else {
        return Err("not an NVSHMEM host library: it exports none of nvshmemx_init_status, nvshmem_ptr, nvshmem_info_get_name".into());
    };
    let mut search = Search { want_name: false, addr, found: None };
    iterate(&mut search);
    let found = search.found.ok_or_else(|| "the library is loaded but not found among the loaded objects".to_string())?;
    let mut lib = LoadedLibrary {
        path: canonical.to_path_buf(),
        load_bias: found.load_bias,
        segments: found.segments,
        handle,
        api: PublicApi::default(),
    };
    lib.api = resolve_api(&lib);
    Ok(lib)
}

macro_rules! sym {
    ($lib:expr, $name:literal, $ty:ty) => {{
        let p = $lib.function($name);
        // SAFETY: the symbol, when present, is a function (checked by `function`); the public
        // NVSHMEM function of this signature.
        if p.is_null() { None } else { Some(unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }) }
    }};
}

#[allow(unsafe_code)]
fn resolve_api(lib: &LoadedLibrary) -> PublicApi {
    PublicApi {
        init_status: sym!(lib, c"nvshmemx_init_status", unsafe extern "C" fn() -> c_int),
        ptr: sym!(lib, c"nvshmem_ptr", unsafe extern "C" fn(*const c_void, c_int) -> *mut c_void),
        my_pe: sym!(lib, c"nvshmem_my_pe", unsafe extern "C" fn() -> c_int),
        n_pes: sym!(lib, c"nvshmem_n_pes", unsafe extern "C" fn() -> c_int),
        info_get_version: sym!(lib, c"nvshmem_info_get_version", unsafe extern "C" fn(*mut c_int, *mut c_int)),
        info_get_name: sym!(lib, c"nvshmem_info_get_name", unsafe extern "C" fn(*mut c_char)),
        cumodule_init: sym!(lib, c"nvshmemx_cumodule_init", unsafe extern "C" fn(*mut c_void) -> c_int),
        cumodule_finalize: sym!(lib, c"nvshmemx_cumodule_finalize", unsafe extern "C" fn(*mut c_void) -> c_int),
        hostlib_init_attr: sym!(lib, c"nvshmemx_hostlib_init_attr", unsafe extern "C" fn(c_uint, *mut c_void) -> c_int),
        hostlib_finalize: sym!(lib, c"nvshmemx_hostlib_finalize", unsafe extern "C" fn()),
        get_uniqueid: sym!(lib, c"nvshmemx_get_uniqueid", unsafe extern "C" fn(*mut c_void) -> c_int),
        set_attr_uniqueid_args: sym!(
            lib,
            c"nvshmemx_set_attr_uniqueid_args",
            unsafe extern "C" fn(c_int, c_int, *const c_void, *mut c_void) -> c_int
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_host_library_name("/x/lib/libnvshmem_host.so.3"));
        assert!(is_host_library_name("libnvshmem_host.so"));
        assert!(!is_host_library_name("/x/libnvshmem_device.a"));
        assert!(!is_host_library_name("/libnvshmem_host.so.3/libc.so.6"));
    }

    #[test]
    fn vendor_version() {
        assert_eq!(parse_vendor_version("NVSHMEM v3.4.5"), Some((3, 4, 5)));
        assert_eq!(parse_vendor_version("NVSHMEM v3.10.21"), Some((3, 10, 21)));
        assert_eq!(parse_vendor_version("garbage"), None);
    }

    #[test]
    fn not_loaded_in_a_plain_test_process() {
        assert!(loaded().is_none());
    }
}
