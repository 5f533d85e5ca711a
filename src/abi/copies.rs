//! Copies on CUDA streams: a batch of device copies as one kernel launch (`copy_batch`), and a
//! stream that waits on the GPU for a word to reach a value (`stream_wait_value32`).

use super::marshal::nonnull;
use crate::error::{Error, Status};
use std::ffi::{c_int, c_void};
use upcxx_extra_nvshmem_macros::export;

/// One copy of a batch (`upcxx_extra_nvshmem_copy_batch`): `bytes` from `src` to `dst`, both
/// device memory this process maps (its own, or a peer's heap through NVSHMEM's P2P mapping).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CopyDesc {
    /// First byte read.
    pub src: *const c_void,
    /// First byte written.
    pub dst: *mut c_void,
    /// Bytes copied (0: nothing).
    pub bytes: usize,
}

/// The limits of `upcxx_extra_nvshmem_copy_batch` (C: `UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyBatch {
    /// The most copies one call moves.
    Max = 128,
}
const _: () = assert!(CopyBatch::Max as usize == crate::cuda::BATCH_MAX);
const BATCH_MAX: usize = CopyBatch::Max as usize;

/// Enqueues `count` copies (1 to `UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX`) on CUDA stream `stream` of
/// device `device` as one kernel launch: ordered after the work queued on `stream` so far, before
/// what is queued after; the copies of one batch run concurrently (their ranges must not overlap
/// each other's destinations). The library's kernel is JIT-compiled for the GPU by the driver at
/// the first call in each context (CUDA 12.0 or later). `stream` is a `cudaStream_t` of `device`
/// (NULL: its legacy default stream). The C++ layer's `nvshmem_heap::copy` batches its small copies
/// through this; a C program may call it too.
///
/// Statuses: OK (enqueued; CUDA reports the copies' outcome on the stream, as for a
/// `cudaMemcpyAsync`); NULL_ARGUMENT (`copies`, or an end of a copy with `bytes` > 0);
/// INVALID_ARGUMENT (`count` 0 or above the maximum); CUDA_ERROR (no driver, the device's
/// context, or loading or launching the kernel failed: nothing was enqueued). The last error
/// names the device and the failing driver call. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_copy_batch(
    device: c_int,
    stream: *mut c_void,
    copies: *const CopyDesc,
    count: usize,
) -> Status {
    nonnull(copies, "copies")?;
    if count == 0 || count > BATCH_MAX {
        crate::fail!(InvalidArgument, "count is {count} (a batch holds 1 to {BATCH_MAX} copies)");
    }
    // SAFETY: the caller passes `count` descriptors.
    let given = unsafe { std::slice::from_raw_parts(copies, count) };
    for (i, c) in given.iter().enumerate() {
        if c.bytes > 0 && (c.src.is_null() || c.dst.is_null()) {
            crate::fail!(NullArgument, "copies[{i}] has a NULL end and {} bytes", c.bytes);
        }
    }
    let batch = given.iter().map(|c| crate::cuda::BatchCopy { src: c.src as usize, dst: c.dst as usize, bytes: c.bytes });
    crate::cuda::copy_batch(device, stream as usize, batch, None)
        .map_err(|m| Error::new(Status::CudaError, format!("device {device}: {m}")))
}

/// Makes CUDA stream `stream` of device `device` wait, on the GPU, until the 32-bit word at `addr`
/// is at least `value` in wrapping order (`(int32_t)(*addr - value) >= 0`): the work queued on
/// `stream` after this call runs once a host thread has written such a value (or another stream
/// has). `addr` is host memory mapped for the device (`cudaHostAlloc(..., cudaHostAllocMapped)`;
/// its device address) or device memory. Nothing waits on the host. The C++ layer's
/// `heap.copy_on_stream` makes a stream wait this way for a copy that `upcxx::copy` moves (its
/// completion, run at UPC++ progress, writes the word); a C program may call it too. A word
/// nobody writes leaves the stream waiting for ever: write it on every path.
///
/// Statuses: OK (enqueued); NULL_ARGUMENT (`addr`); CUDA_ERROR (no driver, the device's context,
/// or `cuStreamWaitValue32` failed: nothing was enqueued; the last error names the device and
/// the call). Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_stream_wait_value32(device: c_int, stream: *mut c_void, addr: *const c_void, value: u32) -> Status {
    nonnull(addr, "addr")?;
    crate::cuda::stream_wait_value32(device, stream as usize, addr as usize, value)
        .map_err(|m| Error::new(Status::CudaError, format!("device {device}: {m}")))
}
