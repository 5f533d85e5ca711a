//! The CUDA driver: the one module that calls it (a test checks that no other does). The few
//! calls this library makes, through cudarc with dynamic loading: a build and a process without
//! a GPU or `libcuda.so` work, and these calls then report "no driver".

use cudarc::driver::sys;
use std::ffi::{CStr, CString, c_void};
use std::sync::OnceLock;

/// Is `libcuda` loadable in this process? (cached)
#[allow(unsafe_code)]
pub fn driver_available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the driver library.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

#[allow(unsafe_code)]
fn check(r: sys::CUresult, what: &str) -> Result<(), String> {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut s: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorString writes a static string pointer or leaves it NULL.
    let name = unsafe {
        if sys::cuGetErrorString(r, &mut s) == sys::CUresult::CUDA_SUCCESS && !s.is_null() {
            CStr::from_ptr(s).to_string_lossy().into_owned()
        } else {
            format!("{r:?}")
        }
    };
    Err(format!("{what} failed: {name}"))
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
/// blocks one descriptor gets: a lone 256 KiB copy is 64 blocks.
const BATCH_BYTES_PER_BLOCK: usize = BATCH_THREADS as usize * 16;
const BATCH_MAX_BLOCKS: usize = 64;

/// One copy of a batch: `bytes` from device address `src` to device address `dst`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchCopy {
    pub src: usize,
    pub dst: usize,
    pub bytes: usize,
}

/// The batch kernel loaded into one context.
struct BatchKernel {
    ctx: usize,
    _module: Module,
    function: sys::CUfunction,
}
// SAFETY: a CUfunction may be launched from any thread of its context's process.
#[allow(unsafe_code)]
unsafe impl Send for BatchKernel {}

/// The contexts the kernel was loaded into (a process has one per GPU it uses).
static BATCH_KERNELS: std::sync::Mutex<Vec<BatchKernel>> = std::sync::Mutex::new(Vec::new());

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
            let mut dev: sys::CUdevice = -1;
            // SAFETY: writes one int.
            if unsafe { sys::cuCtxGetDevice(&mut dev) } == sys::CUresult::CUDA_SUCCESS && dev == device {
                return Ok((OnDevice { pushed: false }, ctx as usize));
            }
        }
        let mut cu_dev: sys::CUdevice = 0;
        // SAFETY: writes one int.
        check(unsafe { sys::cuDeviceGet(&mut cu_dev, device) }, "cuDeviceGet")?;
        // SAFETY: writes one pointer; the primary context stays retained for the process.
        check(unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, cu_dev) }, "cuDevicePrimaryCtxRetain")?;
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

/// Enqueues the first `count` copies of `batch` (1 to [`BATCH_MAX`], each between device
/// addresses this process maps) on `stream` of `device` as one kernel launch, after the work
/// queued there so far. `batch` is the kernel's parameter as it is passed (the rest of it unused).
/// On an error nothing was enqueued.
#[allow(unsafe_code)]
pub fn copy_batch(device: i32, stream: usize, batch: &mut [BatchCopy; BATCH_MAX], count: usize) -> Result<(), String> {
    // The caller checks `count` (the C ABI says why it refuses one); the kernel reads `count`
    // descriptors, so this is a bound of memory safety, not a message.
    assert!((1..=BATCH_MAX).contains(&count), "a batch holds 1 to {BATCH_MAX} copies, not {count}");
    need_driver()?;
    let (_on, ctx) = OnDevice::enter(device)?;
    let mut kernels = BATCH_KERNELS.lock().unwrap_or_else(|p| p.into_inner());
    let function = match kernels.iter().find(|k| k.ctx == ctx) {
        Some(k) => k.function,
        None => {
            let module = Module::load_ptx(BATCH_PTX)?;
            let mut function: sys::CUfunction = std::ptr::null_mut();
            // SAFETY: a module just loaded and a NUL-terminated name.
            check(
                unsafe { sys::cuModuleGetFunction(&mut function, module.0, c"uxn_copy_batch".as_ptr()) },
                "cuModuleGetFunction(uxn_copy_batch)",
            )?;
            kernels.push(BatchKernel { ctx, _module: module, function });
            function
        }
    };
    let largest = batch[..count].iter().map(|c| c.bytes).max().unwrap_or(0);
    let blocks = largest.div_ceil(BATCH_BYTES_PER_BLOCK).clamp(1, BATCH_MAX_BLOCKS) as u32;
    let mut args = [batch.as_mut_ptr() as *mut c_void];
    // SAFETY: the kernel takes one parameter of BATCH_MAX descriptors, which `args[0]` points to
    // (the driver copies it at the launch); `stream` is a stream of this context.
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
        kernels.retain(|k| k.ctx != ctx);
    }
    check(r, "cuLaunchKernel(uxn_copy_batch)")
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
