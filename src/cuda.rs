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
