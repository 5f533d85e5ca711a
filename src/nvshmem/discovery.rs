//! Discovery: where NVSHMEM keeps its heap description in this process, and reading it live.
//!
//! Three resolution steps, tried in order (or one alone, when selected):
//! 1. `dlsym` of `nvshmemi_device_state` (and of `nvshmemi_state`, which is recorded but never read:
//!    its layout is private) in builds that export them;
//! 2. the `.symtab` of the loaded library file: `nvshmemi_device_state` at load bias + `st_value`,
//!    accepted only when its version field equals `0x10000 + st_size`;
//! 3. the public route: `nvshmemx_cumodule_init` on a small PTX module declaring
//!    `nvshmemi_device_lib_version_d` and `nvshmemi_device_state_d`, read back with a
//!    device-to-host copy. Needs an initialised NVSHMEM and a current CUDA context.
//!
//! *Where* is resolved once per loaded library (at load time by the constructor when NVSHMEM is
//! already loaded, otherwise on first use); the *values* are read at every query and validated
//! against the public `nvshmem_ptr` before use.

use crate::cuda;
use crate::env::{self, SourceSetting};
use crate::error::{Error, Result, Status};
use crate::nvshmem::elf;
use crate::nvshmem::host_library::{self, LoadedLibrary};
use crate::nvshmem::state_layout::{self, PREFIX_LEN, StateFields};
use parking_lot::Mutex;
use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::heap::{Heap, Source};

/// A resolution step (what can be selected; `Option<Step>`'s None = every step in order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Dlsym,
    Symtab,
    Cumodule,
}

impl Step {
    /// The steps, in the order tried.
    pub const ALL: [Step; 3] = [Step::Dlsym, Step::Symtab, Step::Cumodule];
    pub fn name(self) -> &'static str {
        Source::from(self).name()
    }
}

/// What `UPCXX_EXTRA_NVSHMEM_SOURCE` selects ([`env::source`] parses it): None = every step.
fn from_setting(s: SourceSetting) -> Option<Step> {
    match s {
        SourceSetting::Auto => None,
        SourceSetting::Dlsym => Some(Step::Dlsym),
        SourceSetting::Symtab => Some(Step::Symtab),
        SourceSetting::Cumodule => Some(Step::Cumodule),
    }
}

/// A variable of [`env`] whose value is bad, as the calls that read it fail: `INVALID_ARGUMENT`,
/// the message naming the variable and its value.
fn bad_env(bad: env::BadValue, what_else: &str) -> Error {
    Error::new(Status::InvalidArgument, format!("{bad}{what_else}"))
}

/// What a C caller's source number selects: NONE = every step in order (`Ok(None)`), a
/// step, or an error for MANUAL and unknown numbers.
pub fn selection(v: i32) -> Result<Option<Step>> {
    match u32::try_from(v).ok().and_then(Source::from_u32) {
        Some(Source::None) => Ok(None),
        Some(Source::Dlsym) => Ok(Some(Step::Dlsym)),
        Some(Source::Symtab) => Ok(Some(Step::Symtab)),
        Some(Source::Cumodule) => Ok(Some(Step::Cumodule)),
        Some(Source::Manual) => {
            crate::fail!(InvalidArgument, "MANUAL is not a resolution step: use upcxx_extra_nvshmem_attach")
        }
        None => crate::fail!(InvalidArgument, "{v} is not a source"),
    }
}

impl From<Step> for Source {
    fn from(s: Step) -> Source {
        match s {
            Step::Dlsym => Source::Dlsym,
            Step::Symtab => Source::Symtab,
            Step::Cumodule => Source::Cumodule,
        }
    }
}

/// Where the state lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateRef {
    /// In host memory, inside the library's writable segment.
    Host { addr: usize, symbol_size: Option<usize> },
    /// In a module's `__constant__` `nvshmemi_device_state_d` (step 3), a device address.
    Device { addr: usize, symbol_size: usize },
}

impl StateRef {
    pub fn address(&self) -> usize {
        match *self {
            StateRef::Host { addr, .. } | StateRef::Device { addr, .. } => addr,
        }
    }
}

/// What one step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepOutcome {
    pub step: Step,
    /// `Ok` when the step found a state whose version check passed.
    pub status: Status,
    pub detail: String,
}

impl StepOutcome {
    fn of(step: Step, r: &Result<(StateRef, u32, String)>) -> StepOutcome {
        match r {
            Ok((_, _, detail)) => StepOutcome { step, status: Status::Ok, detail: detail.clone() },
            Err(e) => StepOutcome { step, status: e.status, detail: e.message.clone() },
        }
    }

    /// `[step] detail`: how a failed resolution's message lists each step it tried.
    pub fn label(&self) -> String {
        format!("[{}] {}", self.step.name(), self.detail)
    }
}

/// The status of a resolution whose steps all failed: the most telling one (a layout problem
/// beats a CUDA error beats "not initialised" beats "unavailable").
pub fn failed_status(outcomes: &[StepOutcome]) -> Status {
    [Status::UnsupportedLayout, Status::CudaError, Status::NotInitialized]
        .into_iter()
        .find(|s| outcomes.iter().any(|o| o.status == *s))
        .unwrap_or(Status::StepUnavailable)
}

/// Runs one step on `lib` without any cache and says what it found (the doctor's inspection).
pub fn try_step(lib: &LoadedLibrary, step: Step) -> StepOutcome {
    StepOutcome::of(step, &run_step(lib, step))
}

/// A successful resolution.
#[derive(Debug)]
pub struct Resolution {
    pub lib: &'static LoadedLibrary,
    pub source: Source,
    pub state: StateRef,
    pub version_field: u32,
    /// Every step tried, in order, with what it found.
    pub steps: Vec<StepOutcome>,
}

/// The process-wide selection (0 = try all, else the step's source number; u32::MAX = not read
/// yet), set by `upcxx_extra_nvshmem_select_source` or `UPCXX_EXTRA_NVSHMEM_SOURCE`.
static SELECTED: AtomicU32 = AtomicU32::new(u32::MAX);
static RESOLVED: Mutex<Option<Arc<Resolution>>> = Mutex::new(None);
static LAST_STEPS: Mutex<Vec<StepOutcome>> = Mutex::new(Vec::new());
/// Step 3's module: (library path, load bias) -> state symbol. Loaded once per library and never
/// unloaded: NVSHMEM keeps the module registered and may update it until `nvshmem_finalize`.
static CUMODULE: Mutex<Option<(PathBuf, usize, StateRef)>> = Mutex::new(None);

fn encode(which: Option<Step>) -> u32 {
    which.map_or(Source::None, Source::from) as u32
}

/// The selected step (None = all in order): `select`'s, else `UPCXX_EXTRA_NVSHMEM_SOURCE`'s,
/// taken once it is read with a good value. A bad value is `INVALID_ARGUMENT` naming it, at every
/// call until it is fixed or `select` is called; nothing is taken from it.
pub fn selected() -> Result<Option<Step>> {
    let v = SELECTED.load(Ordering::Relaxed);
    if v != u32::MAX {
        return Ok(selection(v as i32).ok().flatten()); // stored by `encode`: always a valid selection
    }
    let which = env::source().map_err(|bad| bad_env(bad, ", or call upcxx_extra_nvshmem_select_source"))?.and_then(from_setting);
    SELECTED.store(encode(which), Ordering::Relaxed);
    Ok(which)
}

/// Selects one step (None: all in order); forgets the cached resolution.
pub fn select(which: Option<Step>) {
    SELECTED.store(encode(which), Ordering::Relaxed);
    *RESOLVED.lock() = None;
}

/// The steps tried by the last resolution (for reports).
pub fn last_steps() -> Vec<StepOutcome> {
    LAST_STEPS.lock().clone()
}

/// Reads `PREFIX_LEN` bytes of host memory that the loader mapped for the library.
#[allow(unsafe_code)]
fn read_host_prefix(addr: usize) -> [u8; PREFIX_LEN] {
    let mut out = [0u8; PREFIX_LEN];
    for (i, b) in out.iter_mut().enumerate() {
        // SAFETY: callers checked that [addr, addr + PREFIX_LEN) is inside a loaded writable
        // segment; volatile because NVSHMEM writes it from other threads at init/finalize.
        *b = unsafe { std::ptr::read_volatile((addr + i) as *const u8) };
    }
    out
}

fn host_state(lib: &LoadedLibrary, addr: usize, symbol_size: Option<usize>, what: &str) -> Result<(StateRef, u32)> {
    if !lib.contains_writable(addr, PREFIX_LEN) {
        crate::fail!(UnsupportedLayout, "{what} at 0x{addr:x} is not inside a loaded writable segment of {}", lib.path.display());
    }
    // Aligned, and a size the version field can describe (a hostile file's st_size can be
    // anything, 2^64-1 included).
    if let Err(m) = state_layout::check_state_symbol(addr, symbol_size.map(|s| s as u64)) {
        crate::fail!(UnsupportedLayout, "{what} {m}");
    }
    let fields = StateFields::decode(&read_host_prefix(addr));
    // Before nvshmem_init the state is all zeros (it lives in .bss and NVSHMEM fills it at init):
    // the version can only be checked once it is set; `read_fields` checks it at every query.
    if fields.version != 0 {
        state_layout::check_version(fields.version, symbol_size)
            .map_err(|m| Error::new(Status::UnsupportedLayout, format!("{what} at 0x{addr:x}: {m}")))?;
    }
    Ok((StateRef::Host { addr, symbol_size }, fields.version))
}

/// The note after "not exported by <file>" in the dlsym step's reason; the doctor replaces it
/// with what the file's symbol tables say (LOCAL in .symtab, stripped, absent).
pub const NOT_EXPORTED: &str = " (dlsym cannot see it)";

fn step_dlsym(lib: &LoadedLibrary) -> Result<(StateRef, u32, String)> {
    let state_exported = lib.exports_state();
    let note =
        if state_exported { "nvshmemi_state is exported but its layout is private: not read" } else { "nvshmemi_state is not exported" };
    let p = lib.exported_device_state();
    if p == 0 {
        crate::fail!(StepUnavailable, "nvshmemi_device_state is not exported by {}{NOT_EXPORTED}; {note}", lib.path.display());
    }
    let size = elf::lookup(&lib.path, &["nvshmemi_device_state"]).ok().and_then(|l| l.symbols[0]).map(|s| s.size as usize);
    let (state, version) = host_state(lib, p, size, "dlsym(nvshmemi_device_state)")?;
    Ok((state, version, format!("dlsym(nvshmemi_device_state) = 0x{p:x}; {note}")))
}

fn step_symtab(lib: &LoadedLibrary) -> Result<(StateRef, u32, String)> {
    let found = elf::lookup(&lib.path, &["nvshmemi_device_state"]).map_err(|m| Error::new(Status::StepUnavailable, m))?;
    if !found.has_symtab {
        crate::fail!(StepUnavailable, "{} has no .symtab (stripped)", lib.path.display());
    }
    let Some(sym) = found.symbols[0] else {
        crate::fail!(StepUnavailable, "nvshmemi_device_state is not in the .symtab of {}", lib.path.display());
    };
    let addr = lib.load_bias.wrapping_add(sym.value as usize);
    let (state, version) = host_state(lib, addr, Some(sym.size as usize), ".symtab nvshmemi_device_state")?;
    Ok((
        state,
        version,
        format!(
            ".symtab nvshmemi_device_state: st_value 0x{:x}, st_size {}, address 0x{addr:x}, version 0x{version:x}",
            sym.value, sym.size
        ),
    ))
}

/// The PTX module of step 3: the two globals `nvshmemx_cumodule_init` fills.
pub fn cumodule_ptx(major: i32, minor: i32, patch: i32) -> String {
    let bytes = |v: i32| v.to_le_bytes().iter().map(|b| b.to_string()).collect::<Vec<_>>().join(",");
    format!(
        ".version 6.0\n.target sm_50\n.address_size 64\n\
         .visible .const .align 8 .b8 nvshmemi_device_state_d[{CUMODULE_STATE_BYTES}];\n\
         .visible .const .align 4 .b8 nvshmemi_device_lib_version_d[12] = {{{},{},{}}};\n",
        bytes(major),
        bytes(minor),
        bytes(patch.max(0))
    )
}

/// Room for the state in the step-3 module (the 3.x states are 776 to 848 bytes).
pub const CUMODULE_STATE_BYTES: usize = 8192;

fn read_device_prefix(addr: usize) -> Result<[u8; PREFIX_LEN]> {
    let mut out = [0u8; PREFIX_LEN];
    cuda::copy_to_host(&mut out, addr).map_err(|m| Error::new(Status::CudaError, m))?;
    Ok(out)
}

fn step_cumodule(lib: &LoadedLibrary) -> Result<(StateRef, u32, String)> {
    if lib.api.cumodule_init.is_none() {
        crate::fail!(StepUnavailable, "nvshmemx_cumodule_init is not exported by {}", lib.path.display());
    };
    if !cuda::driver_available() {
        crate::fail!(StepUnavailable, "the CUDA driver (libcuda.so) is not loadable: the public route needs a GPU");
    }
    if !lib.is_initialized() {
        crate::fail!(NotInitialized, "nvshmemx_cumodule_init needs an initialised NVSHMEM");
    }
    let mut cached = CUMODULE.lock();
    let state = match &*cached {
        Some((p, b, s)) if *p == lib.path && *b == lib.load_bias => *s,
        _ => {
            if !cuda::has_current_context().map_err(|m| Error::new(Status::CudaError, m))? {
                crate::fail!(CudaError, "no current CUDA context on this thread (the public route loads a module)");
            }
            let Some((major, minor, patch)) = lib.version() else {
                crate::fail!(
                    StepUnavailable,
                    "nvshmem_info_get_name gives no release version for the module's nvshmemi_device_lib_version_d"
                );
            };
            let module = cuda::Module::load_ptx(&cumodule_ptx(major, minor, patch)).map_err(|m| Error::new(Status::CudaError, m))?;
            let rc = lib.cumodule_init(&module).unwrap_or(-1);
            if rc != 0 {
                crate::fail!(StepUnavailable, "nvshmemx_cumodule_init returned {rc}");
            }
            let (addr, size) = module.global(c"nvshmemi_device_state_d").map_err(|m| Error::new(Status::CudaError, m))?;
            // NVSHMEM now holds the module: it must outlive NVSHMEM (see CUMODULE).
            std::mem::forget(module);
            let s = StateRef::Device { addr, symbol_size: size };
            *cached = Some((lib.path.clone(), lib.load_bias, s));
            s
        }
    };
    drop(cached);
    let fields = StateFields::decode(&read_device_prefix(state.address())?);
    let claimed = state_layout::check_version(fields.version, None)
        .map_err(|m| Error::new(Status::UnsupportedLayout, format!("nvshmemi_device_state_d: {m}")))?;
    if claimed > CUMODULE_STATE_BYTES {
        crate::fail!(UnsupportedLayout, "the state claims {claimed} bytes, more than the module's {CUMODULE_STATE_BYTES}");
    }
    Ok((
        state,
        fields.version,
        format!("nvshmemx_cumodule_init filled nvshmemi_device_state_d at device 0x{:x}, version 0x{:x}", state.address(), fields.version),
    ))
}

fn run_step(lib: &LoadedLibrary, step: Step) -> Result<(StateRef, u32, String)> {
    match step {
        Step::Dlsym => step_dlsym(lib),
        Step::Symtab => step_symtab(lib),
        Step::Cumodule => step_cumodule(lib),
    }
}

/// Runs the selected step(s) on `lib` without using any cache. `which` = None tries all.
pub fn resolve_in(lib: &'static LoadedLibrary, which: Option<Step>) -> std::result::Result<Resolution, (Error, Vec<StepOutcome>)> {
    let steps: Vec<Step> = which.map_or(Step::ALL.to_vec(), |s| vec![s]);
    let mut outcomes = Vec::new();
    for step in steps {
        let r = run_step(lib, step);
        let outcome = StepOutcome::of(step, &r);
        log::debug!("resolution step {}: {}: {}", step.name(), outcome.status.name(), outcome.detail);
        outcomes.push(outcome);
        if let Ok((state, version_field, _)) = r {
            return Ok(Resolution { lib, source: step.into(), state, version_field, steps: outcomes });
        }
    }
    let message = outcomes.iter().map(StepOutcome::label).collect::<Vec<_>>().join("; ");
    Err((Error::new(failed_status(&outcomes), format!("no resolution step found the NVSHMEM state: {message}")), outcomes))
}

/// The loaded NVSHMEM library, or `NotLoaded`.
pub fn loaded_library() -> Result<&'static LoadedLibrary> {
    host_library::loaded().ok_or_else(|| {
        Error::new(Status::NotLoaded, "no libnvshmem_host.so is loaded in this process (and no object exports nvshmemx_init_status)")
    })
}

/// The cached resolution for the library loaded now (re-resolving if it changed).
pub fn resolve() -> Result<Arc<Resolution>> {
    resolve_loaded(loaded_library()?)
}

/// The cached resolution for `lib`, the library found loaded by the caller (one search per query).
fn resolve_loaded(lib: &'static LoadedLibrary) -> Result<Arc<Resolution>> {
    let which = selected()?;
    let mut cached = RESOLVED.lock();
    if let Some(r) = &*cached {
        if r.lib.path == lib.path && r.lib.load_bias == lib.load_bias && which.is_none_or(|s| Source::from(s) == r.source) {
            return Ok(r.clone());
        }
    }
    match resolve_in(lib, which) {
        Ok(r) => {
            *LAST_STEPS.lock() = r.steps.clone();
            let r = Arc::new(r);
            *cached = Some(r.clone());
            Ok(r)
        }
        Err((e, outcomes)) => {
            *LAST_STEPS.lock() = outcomes;
            Err(e)
        }
    }
}

/// Reads the stable prefix of the state, live.
pub fn read_fields(r: &Resolution) -> Result<StateFields> {
    let mut f = match r.state {
        StateRef::Host { addr, symbol_size } => {
            let f = StateFields::decode(&read_host_prefix(addr));
            // Called after the init check, so a zero version here is a layout problem too.
            state_layout::check_version(f.version, symbol_size)
                .map_err(|m| Error::new(Status::UnsupportedLayout, format!("state at 0x{addr:x} changed: {m}")))?;
            f
        }
        StateRef::Device { addr, .. } => {
            let f = StateFields::decode(&read_device_prefix(addr)?);
            state_layout::check_version(f.version, None).map_err(|m| Error::new(Status::UnsupportedLayout, m))?;
            f
        }
    };
    if let Some(skew) = debug_heap_base_skew()? {
        f.heap_base = f.heap_base.wrapping_add_signed(skew);
    }
    Ok(f)
}

/// Test knob: `UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW=<bytes>` shifts the heap base read, to
/// show that a wrong layout is caught by validation (docs/robustness.md). Never set it in a job.
fn debug_heap_base_skew() -> Result<Option<isize>> {
    env::debug_heap_base_skew().map_err(|bad| bad_env(bad, ""))
}

/// Checks the fields against the public API: initialised, PE and PE count as reported by
/// `nvshmem_my_pe`/`nvshmem_n_pes`, and `nvshmem_ptr(., my_pe)` non-NULL exactly on the heap's
/// first and last byte and NULL just outside it.
pub fn validate(lib: &LoadedLibrary, f: &StateFields) -> Result<()> {
    if !lib.is_initialized() {
        crate::fail!(NotInitialized, "nvshmemx_init_status() = {:?}: NVSHMEM is not initialised (or finalised)", lib.init_status());
    }
    if lib.api.ptr.is_none() {
        crate::fail!(ValidationFailed, "nvshmem_ptr is not exported: cannot validate");
    }
    let (pe, npes) = (lib.my_pe(), lib.n_pes());
    if pe.is_some_and(|p| p != f.mype) || npes.is_some_and(|n| n != f.npes) {
        crate::fail!(ValidationFailed, "state says PE {} of {} but nvshmem_my_pe/nvshmem_n_pes say {:?} of {:?}", f.mype, f.npes, pe, npes);
    }
    if f.npes <= 0 || f.mype < 0 || f.mype >= f.npes {
        crate::fail!(ValidationFailed, "state says PE {} of {}", f.mype, f.npes);
    }
    let (base, size) = (f.heap_base, f.heap_size);
    if base == 0 || size == 0 || base.checked_add(size).is_none() {
        crate::fail!(ValidationFailed, "state says heap [0x{base:x}, +0x{size:x}), which is not a valid range");
    }
    let me = f.mype as c_int;
    let q = |a: usize| lib.nvshmem_ptr(a, me).unwrap_or(0);
    let checks = [
        (base, q(base) == base, "nvshmem_ptr(base) == base"),
        (base - 1, q(base - 1) == 0, "nvshmem_ptr(base - 1) == NULL"),
        (base + size - 1, q(base + size - 1) != 0, "nvshmem_ptr(base + size - 1) != NULL"),
        (base + size, q(base + size) == 0, "nvshmem_ptr(base + size) == NULL"),
    ];
    for (addr, ok, what) in checks {
        if !ok {
            crate::fail!(ValidationFailed, "heap [0x{base:x}, 0x{:x}) of PE {me} failed the check {what} at 0x{addr:x}", base + size);
        }
    }
    Ok(())
}

/// Finds, reads and validates the heap now: one search for the loaded library, one read of the
/// state, validated; every field the callers use (`peer_heap_base_remote` too) comes from it.
pub fn query_live() -> Result<(Heap, StateFields)> {
    // The variables a query reads, first: a bad value is said before anything else.
    selected()?;
    debug_heap_base_skew()?;
    let lib = loaded_library()?;
    if !lib.is_initialized() {
        crate::fail!(
            NotInitialized,
            "{}: nvshmemx_init_status() = {:?}: NVSHMEM is not initialised (or finalised)",
            lib.path.display(),
            lib.init_status()
        );
    }
    let r = resolve_loaded(lib)?;
    let fields = read_fields(&r)?;
    validate(r.lib, &fields)?;
    let mapped_size = cuda::mapped_extent(fields.heap_base, fields.heap_size).unwrap_or_else(|m| {
        log::warn!("mapped extent unknown: {m}");
        0
    });
    let device = cuda::device_of(fields.heap_base).unwrap_or(-1);
    let heap = Heap {
        base: fields.heap_base,
        size: fields.heap_size,
        mapped_size,
        my_pe: fields.mype,
        n_pes: fields.npes,
        device,
        version: r.lib.version().unwrap_or((-1, -1, -1)),
        source: r.source,
    };
    Ok((heap, fields))
}

/// Every PE's heap base, read from `peer_heap_base_remote` (a device array of `n_pes` pointers) of
/// a validated read of the state.
pub fn peer_heap_bases(f: &StateFields, n_pes: usize) -> Result<Vec<usize>> {
    if f.peer_heap_base_remote == 0 {
        crate::fail!(UnsupportedLayout, "peer_heap_base_remote is NULL");
    }
    let mut bytes = vec![0u8; n_pes * 8];
    cuda::copy_to_host(&mut bytes, f.peer_heap_base_remote).map_err(|m| Error::new(Status::CudaError, m))?;
    Ok(bytes.chunks_exact(8).map(|b| usize::from_ne_bytes(b.try_into().expect("8 bytes"))).collect())
}

/// Resolves where the state is, at load time, when NVSHMEM is already in the process.
pub fn resolve_at_load() {
    if let Some(lib) = host_library::loaded() {
        if let Err(e) = resolve_loaded(lib) {
            log::debug!("load-time resolution: {}", e.message);
        }
    }
}

/// What `upcxx_extra_nvshmem_locate` reports: where one step (or the first that works) finds the
/// state. Needs no initialised NVSHMEM for steps 1 and 2.
#[derive(Clone, Debug)]
pub struct Location {
    pub source: Source,
    pub library: PathBuf,
    pub state: StateRef,
    pub version_field: u32,
    pub steps: Vec<StepOutcome>,
}

pub fn locate(which: Option<Step>) -> Result<Location> {
    let lib = loaded_library()?;
    match resolve_in(lib, which) {
        Ok(r) => {
            Ok(Location { source: r.source, library: r.lib.path.clone(), state: r.state, version_field: r.version_field, steps: r.steps })
        }
        Err((e, _)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_declares_both_symbols() {
        let p = cumodule_ptx(3, 4, 5);
        assert!(p.contains("nvshmemi_device_state_d[8192]"));
        assert!(p.contains("nvshmemi_device_lib_version_d[12] = {3,0,0,0,4,0,0,0,5,0,0,0}"));
    }

    #[test]
    fn selection_and_provenance() {
        assert_eq!(from_setting(SourceSetting::Symtab), Some(Step::Symtab));
        assert_eq!(from_setting(SourceSetting::Auto), None);
        for s in [SourceSetting::Dlsym, SourceSetting::Symtab, SourceSetting::Cumodule] {
            // The variable's numbers are the C enum's.
            assert_eq!(from_setting(s).map(|st| Source::from(st) as i32), Some(s as i32));
        }
        assert_eq!(Source::from_u32(3), Some(Source::Cumodule));
        assert_eq!(Source::from_u32(9), None);
        assert_eq!(selection(0).unwrap(), None);
        assert_eq!(selection(2).unwrap(), Some(Step::Symtab));
        assert_eq!(selection(4).unwrap_err().status, Status::InvalidArgument);
        assert_eq!(selection(-1).unwrap_err().status, Status::InvalidArgument);
        for s in Step::ALL {
            assert_eq!(selection(Source::from(s) as i32).unwrap(), Some(s));
        }
    }
}
