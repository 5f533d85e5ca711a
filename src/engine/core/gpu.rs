//! The GPU the engine runs over ([`Gpu`]), a copy as the engine is asked for it ([`CopyReq`]), and
//! the outcomes it gives ([`Code`], [`Settled`], [`Counts`]).

use crate::error::{Error, Result, Status};

/// A CUDA driver result's number (`CUresult`): 0 success.
pub type Code = i32;
/// `CUDA_SUCCESS`.
pub const SUCCESS: Code = 0;
/// `CUDA_ERROR_NOT_READY`: a poll's "not yet".
pub const NOT_READY: Code = 600;
/// `CUDA_ERROR_UNKNOWN`: the outcome of a ticket never issued.
pub const UNKNOWN: Code = 999;

/// A stream or an event as the GPU binding names it (`CUstream`, `CUevent`); 0 is no event, and
/// as a stream the legacy default stream.
pub type Handle = usize;

/// One copy of a batch, as the batch kernel reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    pub src: usize,
    pub dst: usize,
    pub bytes: usize,
}

/// A completion word a launch of the batch kernel writes itself once all its copies landed:
/// `counter`, a zeroed word of device memory the launch alone uses (left zeroed); `word`, the
/// device address of a mapped word; `value`, what is stored there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signal {
    pub counter: usize,
    pub word: usize,
    pub value: u32,
}

/// The CUDA operations the engine uses. `ctx`: `Some(device)` runs the call in that device's
/// context, `None` in the calling thread's. Errors are driver results ([`Code`]).
pub trait Gpu: Send + Sync {
    /// The most copies one launch of the batch kernel moves (its parameter's size).
    const BATCH_MAX: usize;
    /// How many fork() children deep this process is (0 in the process that started).
    fn fork_generation(&self) -> u32;
    fn stream_create(&self, device: i32) -> std::result::Result<Handle, Code>;
    fn stream_destroy(&self, device: i32, s: Handle);
    fn event_create(&self, ctx: Option<i32>) -> std::result::Result<Handle, Code>;
    fn event_destroy(&self, e: Handle);
    fn event_record(&self, e: Handle, s: Handle, ctx: Option<i32>) -> std::result::Result<(), Code>;
    /// `Err(NOT_READY)` while the work before `e` runs.
    fn event_query(&self, e: Handle) -> std::result::Result<(), Code>;
    fn event_synchronize(&self, e: Handle) -> std::result::Result<(), Code>;
    fn stream_synchronize(&self, s: Handle, ctx: Option<i32>) -> std::result::Result<(), Code>;
    fn stream_wait_event(&self, s: Handle, e: Handle, ctx: Option<i32>) -> std::result::Result<(), Code>;
    fn memcpy_async(&self, dst: usize, src: usize, bytes: usize, s: Handle, ctx: Option<i32>) -> std::result::Result<(), Code>;
    /// One kernel launch that moves every copy of `batch` (1 to [`Gpu::BATCH_MAX`]) and, with
    /// `signal`, then writes its completion word; on an error nothing was enqueued, and the text
    /// says why.
    fn launch_batch(&self, device: i32, s: Handle, batch: &[Desc], signal: Option<Signal>) -> std::result::Result<(), String>;
    /// The device `s` belongs to (the calling thread's for 0 and the special handles), or -1.
    fn stream_device(&self, s: Handle) -> i32;
    /// `Ok(None)`: not captured; `Ok(Some(invalidated))`: captured; `Err`: the driver cannot say.
    fn stream_capturing(&self, s: Handle) -> std::result::Result<Option<bool>, Code>;
    fn device_count(&self) -> i32;
    /// A word of host memory mapped for the GPU: (host address, device address), kept for the
    /// process's life.
    fn mapped_word(&self, device: i32) -> std::result::Result<(usize, usize), Code>;
    /// `words` zeroed 32-bit words of host memory mapped for every device: (host address, device
    /// address, the same in every context), kept for the process's life.
    fn mapped_words(&self, device: i32, words: usize) -> std::result::Result<(usize, usize), Code>;
    /// `words` zeroed 32-bit words of `device`'s memory (launch counters, see [`Signal`]): their
    /// device address, kept for the process's life.
    fn device_words(&self, device: i32, words: usize) -> std::result::Result<usize, Code>;
    /// Enqueues on `s` a store of `value` into the word at device address `addr`, done when the
    /// stream reaches it (after its earlier work completed).
    fn stream_write_value32(&self, s: Handle, addr: usize, value: u32, ctx: Option<i32>) -> std::result::Result<(), Code>;
    /// `Err(NOT_READY)` while work queued on `s` runs; any other error is a fault of the context.
    fn stream_query(&self, s: Handle, ctx: Option<i32>) -> std::result::Result<(), Code>;
    /// The work queued on `s` after this waits until the word at device address `addr` is at
    /// least `value` (wrapping order).
    fn stream_wait_value32(&self, device: i32, s: Handle, addr: usize, value: u32) -> std::result::Result<(), String>;
    /// "CUDA_ERROR_UNKNOWN: unknown error".
    fn result_name(&self, c: Code) -> String;
}

/// [`Engine::copy`]'s flags.
/// Both ends are device memory (heap memory): a small copy may join the batch.
pub const DEVICE_ENDS: u32 = 1;
/// Ordered after the work queued on the given stream before the call.
pub const AFTER_STREAM: u32 = 2;
/// On the given stream's order (`copy_on_stream`): after its earlier work, before its later work.
pub const ON_STREAM: u32 = 4;

/// One copy to issue.
#[derive(Clone, Copy, Debug)]
pub struct CopyReq {
    pub dst: usize,
    pub src: usize,
    pub bytes: usize,
    /// The ranks named in messages (-1: not known).
    pub src_rank: i32,
    pub dst_rank: i32,
    pub flags: u32,
    /// The caller's stream, for [`AFTER_STREAM`] and [`ON_STREAM`].
    pub stream: Handle,
}

/// How a ticket's outcome is settled ([`Engine::complete`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The copy landed (or the wait's work is done).
    Landed,
    /// It failed; the engine is open: the caller redoes it another way.
    Redo,
    /// It failed and is only reported (a wait, or the engine is closed).
    Report,
}

/// The copy counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Copies issued (batched or not, on the engine's stream or a caller's).
    pub fast: usize,
    /// Of `fast`, those a batch's kernel launch moved.
    pub batched: usize,
}

/// `Err(StreamCapture)` when `s` is being captured into a CUDA graph (or the driver cannot say):
/// the engine's completions follow events of work a graph only runs when it is launched.
pub fn check_stream<G: Gpu>(gpu: &G, s: Handle) -> Result<()> {
    let why = match gpu.stream_capturing(s) {
        Ok(None) => return Ok(()),
        Ok(Some(false)) => "CU_STREAM_CAPTURE_STATUS_ACTIVE".to_string(),
        Ok(Some(true)) => "CU_STREAM_CAPTURE_STATUS_INVALIDATED".to_string(),
        Err(c) => gpu.result_name(c),
    };
    Err(Error::new(
        Status::StreamCapture,
        format!(
            "the stream is being captured into a CUDA graph ({why}); a completion would follow work that runs only when \
             the graph is launched: call it outside the capture (on the stream the graph is launched on, after \
             cudaGraphLaunch)"
        ),
    ))
}
