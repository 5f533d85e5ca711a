//! The CUDA driver: the one module that calls it (a test checks that no other does). The few
//! calls this library makes, through cudarc with dynamic loading: a build and a process without
//! a GPU or `libcuda.so` work, and these calls then report "no driver".

use cudarc::driver::sys;
use std::ffi::{CStr, CString, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Is `libcuda` loadable in this process? (cached)
#[allow(unsafe_code)]
pub fn driver_available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the driver library.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

fn check(r: sys::CUresult, what: &str) -> Result<(), String> {
    if r == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(failed(r, what)) }
}

/// "`what` failed: " and the driver's description of `r`.
#[allow(unsafe_code)]
fn failed(r: sys::CUresult, what: &str) -> String {
    let mut s: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorString writes a static string pointer or leaves it NULL.
    let name = unsafe {
        if sys::cuGetErrorString(r, &mut s) == sys::CUresult::CUDA_SUCCESS && !s.is_null() {
            CStr::from_ptr(s).to_string_lossy().into_owned()
        } else {
            format!("{r:?}")
        }
    };
    format!("{what} failed: {name}")
}

fn need_driver() -> Result<(), String> {
    if driver_available() { Ok(()) } else { Err("the CUDA driver (libcuda.so) is not loadable in this process".into()) }
}

/// Is a CUDA context current on this thread?
#[allow(unsafe_code)]
pub fn has_current_context() -> Result<bool, String> {
    need_driver()?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes one pointer.
    check(unsafe { sys::cuCtxGetCurrent(&mut ctx) }, "cuCtxGetCurrent")?;
    Ok(!ctx.is_null())
}

/// The CUDA device ordinal that owns `ptr`, falling back to the current context's device.
#[allow(unsafe_code)]
pub fn device_of(ptr: usize) -> Result<i32, String> {
    need_driver()?;
    let mut ordinal: i32 = -1;
    // SAFETY: DEVICE_ORDINAL writes an int.
    let r = unsafe {
        sys::cuPointerGetAttribute(
            &mut ordinal as *mut i32 as *mut c_void,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr as sys::CUdeviceptr,
        )
    };
    if r == sys::CUresult::CUDA_SUCCESS && ordinal >= 0 {
        return Ok(ordinal);
    }
    let mut dev: sys::CUdevice = 0;
    // SAFETY: writes one int.
    check(unsafe { sys::cuCtxGetDevice(&mut dev) }, "cuCtxGetDevice")?;
    Ok(dev)
}

/// How much of `[base, base + reserved)` is mapped, walking `cuMemGetAddressRange` chunk by chunk
/// from `base` until the first gap.
#[allow(unsafe_code)]
pub fn mapped_extent(base: usize, reserved: usize) -> Result<usize, String> {
    need_driver()?;
    let mut extent = 0usize;
    while extent < reserved {
        let (mut cbase, mut csize): (sys::CUdeviceptr, usize) = (0, 0);
        // SAFETY: writes two values; an unmapped address returns an error, not a fault.
        let r = unsafe { sys::cuMemGetAddressRange_v2(&mut cbase, &mut csize, (base + extent) as sys::CUdeviceptr) };
        if r != sys::CUresult::CUDA_SUCCESS || csize == 0 {
            if extent == 0 {
                check(r, "cuMemGetAddressRange at the heap base")?;
            }
            break;
        }
        let end = (cbase as usize).saturating_add(csize);
        if end <= base + extent {
            break;
        }
        extent = (end - base).min(reserved);
    }
    Ok(extent)
}

/// Copies `dst.len()` bytes from device address `src` into host memory.
#[allow(unsafe_code)]
pub fn copy_to_host(dst: &mut [u8], src: usize) -> Result<(), String> {
    need_driver()?;
    // SAFETY: dst is a valid host buffer of the given length.
    check(unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, src as sys::CUdeviceptr, dst.len()) }, "cuMemcpyDtoH")
}

/// A loaded CUDA module (unloaded on drop).
#[derive(Debug)]
pub struct Module(sys::CUmodule);
// SAFETY: CUmodule handles may be used from any thread of the context's process.
#[allow(unsafe_code)]
unsafe impl Send for Module {}
#[allow(unsafe_code)]
unsafe impl Sync for Module {}

impl Module {
    /// Loads PTX text into the current context.
    #[allow(unsafe_code)]
    pub fn load_ptx(ptx: &str) -> Result<Module, String> {
        need_driver()?;
        let text = CString::new(ptx).map_err(|_| "PTX text contains NUL".to_string())?;
        let mut m: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: text is a NUL-terminated PTX image.
        check(unsafe { sys::cuModuleLoadData(&mut m, text.as_ptr() as *const c_void) }, "cuModuleLoadData")?;
        Ok(Module(m))
    }

    /// The `CUmodule` handle, for an API that takes one (`nvshmemx_cumodule_init`).
    pub fn raw(&self) -> *mut c_void {
        self.0 as *mut c_void
    }

    /// `(device address, size)` of a global of this module.
    #[allow(unsafe_code)]
    pub fn global(&self, name: &CStr) -> Result<(usize, usize), String> {
        let (mut ptr, mut size): (sys::CUdeviceptr, usize) = (0, 0);
        // SAFETY: valid module and name.
        check(unsafe { sys::cuModuleGetGlobal_v2(&mut ptr, &mut size, self.0, name.as_ptr()) }, "cuModuleGetGlobal")?;
        Ok((ptr as usize, size))
    }
}

impl Drop for Module {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if !self.0.is_null() && driver_available() {
            // SAFETY: unloads the module we loaded; errors at teardown are ignored.
            unsafe { sys::cuModuleUnload(self.0) };
        }
    }
}

/// The kernel of the batched copies (`cuda/batch_copy.cu`, its PTX made by
/// `scripts/gen-batch-ptx.sh`): JIT-compiled by the driver once per context.
const BATCH_PTX: &str = include_str!("cuda/batch_copy.ptx");
/// The most copies one launch moves: the kernel's parameter is this many descriptors (3 KiB,
/// within every CUDA release's 4 KiB parameter limit).
pub const BATCH_MAX: usize = 128;
/// Threads per block of the batch kernel; each block moves 16 bytes per thread per step.
const BATCH_THREADS: u32 = 256;
/// A descriptor's bytes per block of the x dimension (one 16-byte step per thread), and the most
/// blocks one descriptor gets: a lone 256 KiB copy is 64 blocks, one of 2 MiB or more 512 (each
/// thread then keeps four 16-byte loads in flight).
const BATCH_BYTES_PER_BLOCK: usize = BATCH_THREADS as usize * 16;
const BATCH_MAX_BLOCKS: usize = 512;

/// One copy of a batch: `bytes` from device address `src` to device address `dst`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchCopy {
    pub src: usize,
    pub dst: usize,
    pub bytes: usize,
}

/// A completion word a launch of the batch kernel writes once all its copies landed
/// (`uxn_signal` of batch_copy.cu): `counter` a zeroed word of device memory this launch alone
/// uses (the kernel leaves it zeroed), `word` the device address of a word of mapped host memory,
/// `value` what the kernel stores there.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Signal {
    pub counter: usize,
    pub word: usize,
    pub value: u32,
}

/// The batch kernels of one context.
#[derive(Clone, Copy)]
struct Kernels {
    /// uxn_copy_batch: a batch's copies.
    batch: sys::CUfunction,
    /// uxn_copy_batch_signal: a batch's copies, then its completion word.
    batch_signal: sys::CUfunction,
    /// uxn_copy_one: one copy (a 24-byte parameter).
    one: sys::CUfunction,
    /// uxn_copy_one_signal: one copy, then its completion word (a 48-byte parameter).
    one_signal: sys::CUfunction,
}

/// The batch kernels loaded into one context.
struct BatchKernel {
    ctx: usize,
    _module: Module,
    kernels: Kernels,
}
// SAFETY: a CUfunction may be launched from any thread of its context's process.
#[allow(unsafe_code)]
unsafe impl Send for BatchKernel {}

/// The contexts the kernel was loaded into (a process has one per GPU it uses).
static BATCH_KERNELS: std::sync::Mutex<Vec<BatchKernel>> = std::sync::Mutex::new(Vec::new());
/// Raised at every change of [`BATCH_KERNELS`]: a thread's [`LAST_KERNELS`] is good while it
/// holds the generation it was read in.
static KERNELS_GENERATION: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    /// The kernels this thread launched last: (context, kernels, [`KERNELS_GENERATION`] then).
    /// A launch in the same context finds them without the lock.
    static LAST_KERNELS: std::cell::Cell<Option<(usize, Kernels, usize)>> = const { std::cell::Cell::new(None) };
}

/// The primary context (the CUDA runtime's) of each device ordinal below [`PRIMARY_SLOTS`] that
/// this process has retained, 0 before: a retained primary context keeps its handle, and this
/// process never releases one. What lets a call on the engine's device skip asking the driver
/// which device the current context, or a stream's, belongs to ([`OnDevice::enter`],
/// [`stream_device`]: one driver call each instead of two and four).
const PRIMARY_SLOTS: usize = 64;
static PRIMARY: [AtomicUsize; PRIMARY_SLOTS] = [const { AtomicUsize::new(0) }; PRIMARY_SLOTS];
/// One more than the highest ordinal in [`PRIMARY`].
static PRIMARY_END: AtomicUsize = AtomicUsize::new(0);

/// `device`'s primary context, retained (once per process and device for the ordinals
/// [`PRIMARY`] keeps); on an error, the driver's result and the call that gave it.
#[allow(unsafe_code)]
fn primary_context(device: i32) -> Result<sys::CUcontext, (sys::CUresult, &'static str)> {
    let slot = usize::try_from(device).ok().filter(|&d| d < PRIMARY_SLOTS);
    if let Some(d) = slot {
        let known = PRIMARY[d].load(Ordering::Acquire);
        if known != 0 {
            return Ok(known as sys::CUcontext);
        }
    }
    let ok = |r: sys::CUresult, what| if r == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err((r, what)) };
    let mut cu_dev: sys::CUdevice = 0;
    // SAFETY: writes one int.
    ok(unsafe { sys::cuDeviceGet(&mut cu_dev, device) }, "cuDeviceGet")?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes one pointer; the primary context stays retained for the process.
    ok(unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, cu_dev) }, "cuDevicePrimaryCtxRetain")?;
    if let Some(d) = slot {
        PRIMARY[d].store(ctx as usize, Ordering::Release);
        PRIMARY_END.fetch_max(d + 1, Ordering::AcqRel);
    }
    Ok(ctx)
}

/// The device whose primary context is `ctx`, when this process has retained it (never for a
/// null `ctx`: the slots not filled hold 0).
fn primary_device(ctx: usize) -> Option<i32> {
    if ctx == 0 {
        return None;
    }
    let end = PRIMARY_END.load(Ordering::Acquire);
    PRIMARY[..end].iter().position(|p| p.load(Ordering::Acquire) == ctx).and_then(|d| i32::try_from(d).ok())
}

/// Makes `device`'s primary context (the CUDA runtime's) current while it lives, unless the
/// current context is already one of `device`.
struct OnDevice {
    pushed: bool,
}
impl OnDevice {
    #[allow(unsafe_code)]
    fn enter(device: i32) -> Result<(OnDevice, usize), String> {
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one pointer.
        check(unsafe { sys::cuCtxGetCurrent(&mut ctx) }, "cuCtxGetCurrent")?;
        if !ctx.is_null() {
            // The usual case, the thread's current context is `device`'s primary one: known
            // without asking the driver.
            if primary_device(ctx as usize) == Some(device) {
                return Ok((OnDevice { pushed: false }, ctx as usize));
            }
            let mut dev: sys::CUdevice = -1;
            // SAFETY: writes one int.
            if unsafe { sys::cuCtxGetDevice(&mut dev) } == sys::CUresult::CUDA_SUCCESS && dev == device {
                // Retained once, so that the next call on this device knows it.
                let _ = primary_context(device);
                return Ok((OnDevice { pushed: false }, ctx as usize));
            }
        }
        let ctx = primary_context(device).map_err(|(r, what)| failed(r, what))?;
        // SAFETY: a context this process retained.
        check(unsafe { sys::cuCtxPushCurrent_v2(ctx) }, "cuCtxPushCurrent")?;
        Ok((OnDevice { pushed: true }, ctx as usize))
    }
}
impl Drop for OnDevice {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.pushed {
            let mut ctx: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: pops the context enter() pushed.
            unsafe { sys::cuCtxPopCurrent_v2(&mut ctx) };
        }
    }
}

/// The batch kernel of context `ctx` (current), loaded on first use. Loading a module may wait
/// for the work queued in the context (a PTX module is compiled and its function loaded then),
/// so [`load_batch_kernel`] does it before any copy is queued.
#[allow(unsafe_code)]
fn batch_kernels(ctx: usize) -> Result<Kernels, String> {
    if let Some((c, k, g)) = LAST_KERNELS.get()
        && c == ctx
        && g == KERNELS_GENERATION.load(Ordering::Acquire)
    {
        return Ok(k);
    }
    let mut loaded = BATCH_KERNELS.lock().unwrap_or_else(|p| p.into_inner());
    let generation = KERNELS_GENERATION.load(Ordering::Acquire);
    if let Some(k) = loaded.iter().find(|k| k.ctx == ctx) {
        LAST_KERNELS.set(Some((ctx, k.kernels, generation)));
        return Ok(k.kernels);
    }
    let module = Module::load_ptx(BATCH_PTX)?;
    let get = |name: &CStr| -> Result<sys::CUfunction, String> {
        let mut function: sys::CUfunction = std::ptr::null_mut();
        let what = name.to_string_lossy();
        // SAFETY: a module just loaded and a NUL-terminated name.
        check(unsafe { sys::cuModuleGetFunction(&mut function, module.0, name.as_ptr()) }, &format!("cuModuleGetFunction({what})"))?;
        // Under lazy loading (CUDA_MODULE_LOADING=LAZY, CUDA 12's default) the function itself is
        // loaded at its first launch, which then waits for the context's queued work: load it now.
        let mut threads: std::ffi::c_int = 0;
        // SAFETY: writes one int of a function just got.
        check(
            unsafe { sys::cuFuncGetAttribute(&mut threads, sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function) },
            &format!("cuFuncGetAttribute({what})"),
        )?;
        Ok(function)
    };
    let kernels = Kernels {
        batch: get(c"uxn_copy_batch")?,
        batch_signal: get(c"uxn_copy_batch_signal")?,
        one: get(c"uxn_copy_one")?,
        one_signal: get(c"uxn_copy_one_signal")?,
    };
    loaded.push(BatchKernel { ctx, _module: module, kernels });
    LAST_KERNELS.set(Some((ctx, kernels, generation)));
    Ok(kernels)
}

/// Loads the batch kernel into `device`'s primary context now, so that the first batched copy or
/// `copy_batch_on_stream` never waits for work queued on the device (a module load may).
pub fn load_batch_kernel(device: i32) -> Result<(), String> {
    need_driver()?;
    let (_on, ctx) = OnDevice::enter(device)?;
    batch_kernels(ctx).map(|_| ())
}

/// Enqueues `copies` (1 to [`BATCH_MAX`], each between device addresses this process maps) on
/// `stream` of `device` as one kernel launch, after the work queued there so far: one copy by a
/// kernel whose parameter is that copy (24 bytes, 48 with a signal), more by the batch kernel,
/// whose parameter is [`BATCH_MAX`] descriptors (3 KiB). With `signal`, the same launch then
/// writes its completion word (see [`Signal`]). On an error nothing was enqueued.
#[allow(unsafe_code)]
pub fn copy_batch<I>(device: i32, stream: usize, copies: I, signal: Option<Signal>) -> Result<(), String>
where
    I: IntoIterator<Item = BatchCopy>,
    I::IntoIter: ExactSizeIterator,
{
    // The caller checks the count (the C ABI says why it refuses one); the kernel reads `count`
    // descriptors, so this is a bound of memory safety, not a message.
    let mut copies = copies.into_iter();
    let count = copies.len();
    assert!((1..=BATCH_MAX).contains(&count), "a batch holds 1 to {BATCH_MAX} copies, not {count}");
    need_driver()?;
    let (_on, ctx) = OnDevice::enter(device)?;
    let kernels = batch_kernels(ctx)?;
    let mut sig = signal.unwrap_or_default();
    let mut one: BatchCopy;
    let mut batch: [BatchCopy; BATCH_MAX]; // filled for a batch only (3 KiB: not for one copy)
    let ((function, name), param, largest) = if count == 1 {
        one = copies.next().unwrap_or_default();
        let function = if signal.is_some() { (kernels.one_signal, "uxn_copy_one_signal") } else { (kernels.one, "uxn_copy_one") };
        (function, (&mut one as *mut BatchCopy).cast::<c_void>(), one.bytes)
    } else {
        batch = [BatchCopy::default(); BATCH_MAX];
        let mut largest = 0;
        for (b, c) in batch.iter_mut().zip(copies) {
            largest = largest.max(c.bytes);
            *b = c;
        }
        let function = if signal.is_some() { (kernels.batch_signal, "uxn_copy_batch_signal") } else { (kernels.batch, "uxn_copy_batch") };
        (function, batch.as_mut_ptr().cast::<c_void>(), largest)
    };
    let blocks = largest.div_ceil(BATCH_BYTES_PER_BLOCK).clamp(1, BATCH_MAX_BLOCKS) as u32;
    let mut args = [param, (&mut sig as *mut Signal).cast::<c_void>()];
    // SAFETY: a one-copy kernel's first parameter is one descriptor, a batch kernel's BATCH_MAX
    // descriptors, which `args[0]` points to; a signalling kernel's second is the `Signal`
    // `args[1]` points to (the driver copies them at the launch; the others read only the
    // first); `stream` is a stream of this context.
    let r = unsafe {
        sys::cuLaunchKernel(
            function,
            blocks,
            count as u32,
            1,
            BATCH_THREADS,
            1,
            1,
            0,
            stream as sys::CUstream,
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        // The context may have been reset (its modules with it): load again next time.
        let mut loaded = BATCH_KERNELS.lock().unwrap_or_else(|p| p.into_inner());
        loaded.retain(|k| k.ctx != ctx);
        KERNELS_GENERATION.fetch_add(1, Ordering::AcqRel); // every thread's LAST_KERNELS with it
        drop(loaded);
        return Err(failed(r, &format!("cuLaunchKernel({name})")));
    }
    Ok(())
}

/// Enqueues on `stream` of `device` a wait, on the GPU, until the 32-bit word at `addr` (host
/// memory mapped for the device, or device memory) is at least `value` in wrapping order
/// (`cuStreamWaitValue32`, `CU_STREAM_WAIT_VALUE_GEQ`): the work queued on `stream` after it runs
/// once a host thread (or another stream) has written such a value. On an error nothing was
/// enqueued.
#[allow(unsafe_code)]
pub fn stream_wait_value32(device: i32, stream: usize, addr: usize, value: u32) -> Result<(), String> {
    need_driver()?;
    let (_on, _ctx) = OnDevice::enter(device)?;
    // SAFETY: `stream` is a stream of this context (or a special handle), `addr` a word the GPU
    // reads; the driver checks both and returns an error rather than faulting.
    check(
        unsafe {
            sys::cuStreamWaitValue32_v2(
                stream as sys::CUstream,
                addr as sys::CUdeviceptr,
                value,
                sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as std::ffi::c_uint,
            )
        },
        "cuStreamWaitValue32",
    )
}

// ---- The copy engine's calls (crate::engine::gpu). Each returns the driver's result as its
// number (CUresult: 0 success, 600 not ready): the engine keeps outcomes as numbers and names
// them only in messages (`result_name`). `ctx`: `Some(device)` runs the call in that device's
// primary context (made current for the call when another is), `None` in the calling thread's
// current context (device 0's primary context when the thread has none, as the CUDA runtime
// does).

/// A driver result's number.
pub type Code = i32;
/// `CUDA_ERROR_NOT_INITIALIZED`: what a call reports here when the driver is not loadable.
pub const NOT_INITIALIZED: Code = sys::CUresult::CUDA_ERROR_NOT_INITIALIZED as Code;

fn code(r: sys::CUresult) -> Code {
    r as Code
}

/// "CUDA_ERROR_UNKNOWN: unknown error" for a result the driver returned (only those: a number
/// that is not a value of the driver's enum must not reach it).
#[allow(unsafe_code)]
pub fn result_name(c: Code) -> String {
    if !driver_available() {
        return "CUDA_ERROR_NOT_INITIALIZED: the CUDA driver (libcuda.so) is not loadable in this process".into();
    }
    // SAFETY: `c` is a result the driver returned (the engine names no other): a value of the enum.
    let r: sys::CUresult = unsafe { std::mem::transmute::<i32, sys::CUresult>(c) };
    let (mut name, mut text): (*const std::ffi::c_char, *const std::ffi::c_char) = (std::ptr::null(), std::ptr::null());
    // SAFETY: each writes a static string pointer or leaves it NULL.
    unsafe {
        let _ = sys::cuGetErrorName(r, &mut name);
        let _ = sys::cuGetErrorString(r, &mut text);
    }
    let s = |p: *const std::ffi::c_char| {
        // SAFETY: a static NUL-terminated string of the driver, or NULL.
        if p.is_null() { None } else { Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()) }
    };
    match (s(name), s(text)) {
        (Some(n), Some(t)) => format!("{n}: {t}"),
        (Some(n), None) => n,
        _ => format!("CUDA error {c}"),
    }
}

/// Runs `f` in the context `ctx` names (see above).
fn in_ctx<T>(ctx: Option<i32>, f: impl FnOnce() -> Result<T, Code>) -> Result<T, Code> {
    if !driver_available() {
        return Err(NOT_INITIALIZED);
    }
    match ctx {
        Some(device) => {
            let (_on, _) = OnDevice::enter(device).map_err(|_| code(sys::CUresult::CUDA_ERROR_INVALID_CONTEXT))?;
            f()
        }
        None => {
            let has = has_current_context().unwrap_or(false);
            let _on = if has { None } else { Some(OnDevice::enter(0).map_err(|_| code(sys::CUresult::CUDA_ERROR_INVALID_CONTEXT))?.0) };
            f()
        }
    }
}

fn ok(r: sys::CUresult) -> Result<(), Code> {
    if r == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(code(r)) }
}

/// A non-blocking stream of `device`.
#[allow(unsafe_code)]
pub fn stream_create(device: i32) -> Result<usize, Code> {
    in_ctx(Some(device), || {
        let mut s: sys::CUstream = std::ptr::null_mut();
        // SAFETY: writes one handle.
        ok(unsafe { sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as std::ffi::c_uint) })?;
        Ok(s as usize)
    })
}

/// Destroys a stream this process made (the driver releases it once its work is done).
#[allow(unsafe_code)]
pub fn stream_destroy(device: i32, s: usize) {
    let _ = in_ctx(Some(device), || {
        // SAFETY: a stream this process created and has not destroyed.
        ok(unsafe { sys::cuStreamDestroy_v2(s as sys::CUstream) })
    });
}

/// An event without timing.
#[allow(unsafe_code)]
pub fn event_create(ctx: Option<i32>) -> Result<usize, Code> {
    in_ctx(ctx, || {
        let mut e: sys::CUevent = std::ptr::null_mut();
        // SAFETY: writes one handle.
        ok(unsafe { sys::cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as std::ffi::c_uint) })?;
        Ok(e as usize)
    })
}

/// Destroys an event this process made (the driver releases it once what waits on it is done).
#[allow(unsafe_code)]
pub fn event_destroy(e: usize) {
    if driver_available() {
        // SAFETY: an event this process created and has not destroyed.
        let _ = unsafe { sys::cuEventDestroy_v2(e as sys::CUevent) };
    }
}

/// Records `e` on `s`.
#[allow(unsafe_code)]
pub fn event_record(e: usize, s: usize, ctx: Option<i32>) -> Result<(), Code> {
    // SAFETY: an event of this process; the driver checks the stream handle.
    in_ctx(ctx, || ok(unsafe { sys::cuEventRecord(e as sys::CUevent, s as sys::CUstream) }))
}

/// `Ok` once the work before `e` is done, `Err(NOT_READY)` before, or the error it reports.
#[allow(unsafe_code)]
pub fn event_query(e: usize) -> Result<(), Code> {
    if !driver_available() {
        return Err(NOT_INITIALIZED);
    }
    // SAFETY: an event of this process.
    ok(unsafe { sys::cuEventQuery(e as sys::CUevent) })
}

/// Waits for the work before `e`.
#[allow(unsafe_code)]
pub fn event_synchronize(e: usize) -> Result<(), Code> {
    if !driver_available() {
        return Err(NOT_INITIALIZED);
    }
    // SAFETY: an event of this process.
    ok(unsafe { sys::cuEventSynchronize(e as sys::CUevent) })
}

/// Waits for the work queued on `s`.
#[allow(unsafe_code)]
pub fn stream_synchronize(s: usize, ctx: Option<i32>) -> Result<(), Code> {
    // SAFETY: the driver checks the stream handle.
    in_ctx(ctx, || ok(unsafe { sys::cuStreamSynchronize(s as sys::CUstream) }))
}

/// `Ok` when the work queued on `s` is done, `Err(NOT_READY)` before, or its error.
#[allow(unsafe_code)]
pub fn stream_query(s: usize, ctx: Option<i32>) -> Result<(), Code> {
    // SAFETY: the driver checks the stream handle.
    in_ctx(ctx, || ok(unsafe { sys::cuStreamQuery(s as sys::CUstream) }))
}

/// The work queued on `s` from now on waits for `e`.
#[allow(unsafe_code)]
pub fn stream_wait_event(s: usize, e: usize, ctx: Option<i32>) -> Result<(), Code> {
    // SAFETY: an event of this process; the driver checks the stream handle.
    in_ctx(ctx, || ok(unsafe { sys::cuStreamWaitEvent(s as sys::CUstream, e as sys::CUevent, 0) }))
}

/// Enqueues on `s` a store of `value` into the 32-bit word at device address `addr` (mapped host
/// memory), done when the stream reaches it (`cuStreamWriteValue32`, default flags: the stream's
/// earlier work is complete and visible first).
#[allow(unsafe_code)]
pub fn stream_write_value32(s: usize, addr: usize, value: u32, ctx: Option<i32>) -> Result<(), Code> {
    // SAFETY: the driver checks the stream handle and the address.
    in_ctx(ctx, || ok(unsafe { sys::cuStreamWriteValue32_v2(s as sys::CUstream, addr as sys::CUdeviceptr, value, 0) }))
}

/// Enqueues a copy of `bytes` from `src` to `dst` (any memory the driver reaches: unified
/// addressing) on `s`.
#[allow(unsafe_code)]
pub fn memcpy_async(dst: usize, src: usize, bytes: usize, s: usize, ctx: Option<i32>) -> Result<(), Code> {
    // SAFETY: the caller names memory it owns; the driver checks the addresses it can.
    in_ctx(ctx, || ok(unsafe { sys::cuMemcpyAsync(dst as sys::CUdeviceptr, src as sys::CUdeviceptr, bytes, s as sys::CUstream) }))
}

/// The device a stream belongs to (0, `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`: the calling
/// thread's current context's), or -1 when the driver cannot say.
#[allow(unsafe_code)]
pub fn stream_device(s: usize) -> i32 {
    // The usual case, a stream of a primary context this process retained: one driver call.
    if driver_available() {
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one handle; the driver checks the stream handle (a special handle
        // without a current context is an error, answered below).
        if unsafe { sys::cuStreamGetCtx(s as sys::CUstream, &mut ctx) } == sys::CUresult::CUDA_SUCCESS
            && let Some(d) = primary_device(ctx as usize)
        {
            return d;
        }
    }
    in_ctx(None, || {
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one handle; the driver checks the stream handle.
        ok(unsafe { sys::cuStreamGetCtx(s as sys::CUstream, &mut ctx) })?;
        let mut current: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one handle.
        if unsafe { sys::cuCtxGetCurrent(&mut current) } == sys::CUresult::CUDA_SUCCESS && current == ctx {
            let mut dev: sys::CUdevice = -1;
            // SAFETY: writes one int (the stream's context is the current one).
            ok(unsafe { sys::cuCtxGetDevice(&mut dev) })?;
            return Ok(dev);
        }
        // SAFETY: a context of this process, made current for the query and popped after.
        ok(unsafe { sys::cuCtxPushCurrent_v2(ctx) })?;
        let mut dev: sys::CUdevice = -1;
        // SAFETY: writes one int.
        let r = unsafe { sys::cuCtxGetDevice(&mut dev) };
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: pops the context pushed above.
        let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
        ok(r)?;
        Ok(dev)
    })
    .unwrap_or(-1)
}

/// Whether `s` is being captured into a graph: `Ok(None)` no, `Ok(Some(invalidated))` yes, or
/// the error of the query (the legacy stream during another stream's global capture).
#[allow(unsafe_code)]
pub fn stream_capturing(s: usize) -> Result<Option<bool>, Code> {
    in_ctx(None, || {
        let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: writes one enum; the driver checks the stream handle.
        ok(unsafe { sys::cuStreamIsCapturing(s as sys::CUstream, &mut st) })?;
        Ok(match st {
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => None,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => Some(false),
            _ => Some(true),
        })
    })
}

/// The number of CUDA devices.
#[allow(unsafe_code)]
pub fn device_count() -> Result<i32, Code> {
    if !driver_available() {
        return Err(NOT_INITIALIZED);
    }
    // SAFETY: initialising the driver twice is harmless.
    ok(unsafe { sys::cuInit(0) })?;
    let mut n = 0;
    // SAFETY: writes one int.
    ok(unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(n)
}

/// The device of the context current on this thread, if any.
#[allow(unsafe_code)]
pub fn current_device() -> Option<i32> {
    if !has_current_context().unwrap_or(false) {
        return None;
    }
    let mut dev: sys::CUdevice = -1;
    // SAFETY: writes one int.
    (unsafe { sys::cuCtxGetDevice(&mut dev) } == sys::CUresult::CUDA_SUCCESS && dev >= 0).then_some(dev)
}

/// Makes `device`'s primary context (the CUDA runtime's for that device) current on this thread,
/// creating it when needed: what `cudaSetDevice(device); cudaFree(0)` does.
#[allow(unsafe_code)]
pub fn use_device(device: i32) -> Result<(), Code> {
    if !driver_available() {
        return Err(NOT_INITIALIZED);
    }
    // SAFETY: initialising the driver twice is harmless.
    ok(unsafe { sys::cuInit(0) })?;
    let ctx = primary_context(device).map_err(|(r, _)| code(r))?;
    // SAFETY: a context this process retained.
    ok(unsafe { sys::cuCtxSetCurrent(ctx) })
}

/// A 64-byte block of host memory mapped for every device: (host address, device address). Kept
/// for the life of the process.
pub fn mapped_host_word(device: i32) -> Result<(usize, usize), Code> {
    mapped_host_block(device, 64)
}

/// A zeroed block of `bytes` of device memory of `device` (the batch kernel's launch counters, see
/// [`Signal`]): its device address. Kept for the life of the process. Zeroed through a stream of
/// its own that no other stream waits for or is waited for by (a synchronous memset would wait
/// for the work queued on the legacy stream, which a stream operation must never do).
#[allow(unsafe_code)]
pub fn device_zeroed(device: i32, bytes: usize) -> Result<usize, Code> {
    in_ctx(Some(device), || {
        let mut d: sys::CUdeviceptr = 0;
        // SAFETY: writes one address.
        ok(unsafe { sys::cuMemAlloc_v2(&mut d, bytes) })?;
        let zeros = vec![0u8; bytes];
        let zeroed = (|| {
            let mut s: sys::CUstream = std::ptr::null_mut();
            // SAFETY: writes one handle.
            ok(unsafe { sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as std::ffi::c_uint) })?;
            // SAFETY: `bytes` of device memory just allocated and of `zeros`, which outlives the
            // copy (the stream is synchronized before it is dropped).
            let r = ok(unsafe { sys::cuMemcpyHtoDAsync_v2(d, zeros.as_ptr().cast(), bytes, s) })
                // SAFETY: the stream just made.
                .and_then(|()| ok(unsafe { sys::cuStreamSynchronize(s) }));
            // SAFETY: the stream just made, its one copy done (or never enqueued).
            let _ = unsafe { sys::cuStreamDestroy_v2(s) };
            r
        })();
        if let Err(c) = zeroed {
            // SAFETY: the allocation above, not yet shared.
            let _ = unsafe { sys::cuMemFree_v2(d) };
            return Err(c);
        }
        Ok(d as usize)
    })
}

/// A zeroed block of `bytes` of host memory mapped for every device (portable: with unified
/// addressing its device address is the same in every context): (host address, device address).
/// Kept for the life of the process.
#[allow(unsafe_code)]
pub fn mapped_host_block(device: i32, bytes: usize) -> Result<(usize, usize), Code> {
    in_ctx(Some(device), || {
        let mut p: *mut c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: writes one pointer.
        ok(unsafe { sys::cuMemHostAlloc(&mut p, bytes, flags) })?;
        // SAFETY: `p` is `bytes` of host memory just allocated, not yet shared.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
        let mut d: sys::CUdeviceptr = 0;
        // SAFETY: `p` is mapped host memory of this process.
        ok(unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0) })?;
        Ok((p as usize, d as usize))
    })
}

#[cfg(test)]
mod tests {
    use super::{BATCH_MAX, BATCH_PTX, BatchCopy, Signal};

    /// The kernels' parameters, as the PTX declares them, are what the launches pass.
    #[test]
    fn ptx_parameters_match_the_launch() {
        let batch = BATCH_MAX * std::mem::size_of::<BatchCopy>();
        for want in [
            format!(".param .align 8 .b8 uxn_copy_batch_param_0[{batch}]"),
            format!(".param .align 8 .b8 uxn_copy_batch_signal_param_0[{batch}]"),
            format!(".param .align 8 .b8 uxn_copy_batch_signal_param_1[{}]", std::mem::size_of::<Signal>()),
            format!(".param .align 8 .b8 uxn_copy_one_param_0[{}]", std::mem::size_of::<BatchCopy>()),
            format!(".param .align 8 .b8 uxn_copy_one_signal_param_0[{}]", std::mem::size_of::<BatchCopy>()),
            format!(".param .align 8 .b8 uxn_copy_one_signal_param_1[{}]", std::mem::size_of::<Signal>()),
        ] {
            assert!(BATCH_PTX.contains(&want), "batch_copy.ptx declares no `{want}`");
        }
    }
}
