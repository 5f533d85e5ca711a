//! The copy engine's C ABI (`upcxx_extra_nvshmem_engine_*`) and the stream and device calls its
//! users need: marshalling only; the engine is `crate::engine`.
//!
//! An engine copies between addresses this process reaches (its own device memory, NVSHMEM's
//! mapping of a peer's heap, host memory the driver maps) on a private stream of one device.
//! Every copy returns a ticket; `engine_poll` tells when it landed (or how it failed), and
//! `engine_complete` settles it once. Small copies with device memory at both ends are batched:
//! one kernel launch moves up to `UPCXX_EXTRA_NVSHMEM_COPY_BATCH_MAX` of them, at the next poll,
//! `engine_flush`, or copy that is not batched. The C++ layer's `nvshmem_heap::copy` is built on
//! it; `examples/engine_copy.c` uses it from C.

use super::marshal::nonnull;
use crate::engine::core::{self, CopyReq, NOT_READY};
use crate::engine::{CudaEngine, Driver, Settled};
use crate::error::{Error, Result, Status};
use std::ffi::{c_int, c_void};
use upcxx_extra_nvshmem_macros::export;

/// A copy engine (opaque): made by `upcxx_extra_nvshmem_engine_new`, released by
/// `upcxx_extra_nvshmem_engine_free`.
// As rustls-ffi's handles: a pointer to it is a `Box<CudaEngine>` cast, and only this module
// casts it back.
pub struct EngineHandle {
    _private: [u8; 0],
}

/// The flags of an engine copy (`upcxx_extra_nvshmem_engine_copy_t::flags`), or-ed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineFlag {
    /// Both ends are device memory (the engine's device or a peer's heap): a copy of at most the
    /// batch size (`engine_batch_bytes`) joins the batch.
    DeviceEnds = 1,
    /// Ordered after the work queued on `stream` before the call (the engine's stream waits for
    /// an event recorded there, on the GPU).
    AfterStream = 2,
    /// In `stream`'s order: after its earlier work, and its later work waits for the copy (on
    /// `stream` itself when `stream` belongs to the engine's device). Not with AFTER_STREAM.
    OnStream = 4,
}
const _: () = assert!(
    EngineFlag::DeviceEnds as u32 == core::DEVICE_ENDS
        && EngineFlag::AfterStream as u32 == core::AFTER_STREAM
        && EngineFlag::OnStream as u32 == core::ON_STREAM
);

/// Every bit an `EngineFlag` names.
const KNOWN_FLAGS: u32 = EngineFlag::DeviceEnds as u32 | EngineFlag::AfterStream as u32 | EngineFlag::OnStream as u32;

/// Refuses a copy whose flags carry a bit no `EngineFlag` names (INVALID_ARGUMENT, the message
/// naming the bits): a caller built against another header, or a bit set by mistake, is told
/// rather than ignored.
fn known_flags(flags: u32, what: &str) -> Result<()> {
    let unknown = flags & !KNOWN_FLAGS;
    if unknown != 0 {
        crate::fail!(
            InvalidArgument,
            "{what} has flags {flags:#x} with unknown bits {unknown:#x} (known: DEVICE_ENDS 0x1, AFTER_STREAM 0x2, \
             ON_STREAM 0x4)"
        );
    }
    Ok(())
}

/// One copy for `upcxx_extra_nvshmem_engine_copy`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EngineCopy {
    /// First byte written.
    pub dst: *mut c_void,
    /// First byte read.
    pub src: *const c_void,
    /// Bytes copied (0: nothing, the ticket lands with the copies before it).
    pub bytes: usize,
    /// The ranks (or PEs) of the two ends, named in error messages only (-1: unknown).
    pub src_rank: c_int,
    pub dst_rank: c_int,
    /// `upcxx_extra_nvshmem_engine_flag_t` values, or-ed.
    pub flags: u32,
    /// The caller's `cudaStream_t` / `CUstream` for AFTER_STREAM and ON_STREAM (NULL: the legacy
    /// default stream); ignored otherwise.
    pub stream: *mut c_void,
}

impl EngineCopy {
    fn req(&self) -> CopyReq {
        CopyReq {
            dst: self.dst as usize,
            src: self.src as usize,
            bytes: self.bytes,
            src_rank: self.src_rank,
            dst_rank: self.dst_rank,
            flags: self.flags,
            stream: self.stream as usize,
        }
    }
}

/// The results `upcxx_extra_nvshmem_engine_poll` names (`*result`, an `int`): LANDED, NOT_READY,
/// or the driver's error for the copy (a `CUresult`; UNKNOWN among them). Each is the CUDA
/// driver's number, so a `CUresult` compares with them as it is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnginePoll {
    /// `CUDA_SUCCESS` (0): the copy landed (a wait: the work waited for is done).
    Landed = 0,
    /// `CUDA_ERROR_NOT_READY` (600): not over yet; poll again.
    NotReady = 600,
    /// `CUDA_ERROR_UNKNOWN` (999): a ticket the engine never issued or already settled on a
    /// caller's stream, or a copy that failed with no error of its own from the driver.
    Unknown = 999,
}
// The engine's own numbers (one definition each): the header's enum is tied to them here.
const _: () = assert!(
    EnginePoll::Landed as core::Code == core::SUCCESS
        && EnginePoll::NotReady as core::Code == NOT_READY
        && EnginePoll::Unknown as core::Code == core::UNKNOWN
);

/// How `upcxx_extra_nvshmem_engine_complete` settled a ticket.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineSettled {
    /// The copy landed (a wait: the stream's work is done).
    Landed = 0,
    /// The copy failed and the engine is open: redo it another way (the C++ layer redoes it
    /// through `upcxx::copy`); the failure is kept for `engine_take_error`.
    Redo = 1,
    /// It failed and is only reported: a wait, or the engine is closed.
    Report = 2,
}

/// What the environment asks of the C++ layer's copies (`upcxx_extra_nvshmem_copy_policy`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyPolicy {
    /// Every copy with a heap end is `upcxx::copy` (`UPCXX_EXTRA_NVSHMEM_COPY=upcxx`).
    pub upcxx_only: bool,
    /// The largest copy batched (0: none): `UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES`, 0 with
    /// `UPCXX_EXTRA_NVSHMEM_COPY=unbatched`, else `UPCXX_EXTRA_NVSHMEM_COPY_DEFAULT_BATCH_BYTES`.
    pub batch_bytes: usize,
}

/// The defaults of `upcxx_extra_nvshmem_copy_policy` (C: `UPCXX_EXTRA_NVSHMEM_COPY_DEFAULT_BATCH_BYTES`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDefault {
    /// The largest copy batched when `UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES` is unset: above it a
    /// copy engine beats a kernel on one lone copy.
    BatchBytes = 262144,
}
const _: () = assert!(CopyDefault::BatchBytes as usize == crate::env::DEFAULT_COPY_BATCH_BYTES);

/// The copy counts of an engine.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineCounts {
    /// Copies issued (batched or not).
    pub fast: usize,
    /// Of `fast`, those a batch's kernel launch moved.
    pub batched: usize,
    /// Tickets parked with the engine's watcher (`engine_park`) whose wake has not taken them yet.
    pub parked: usize,
}

/// What the engine's watcher calls once a parked ticket is over (`engine_park`), with the `ctx`
/// given there: true when it took the ticket, false when it could not now (it is called again a
/// little later). It runs on the watcher's thread (or the thread of `engine_free`), must return
/// (no exception, no longjmp) and must not call the engine: it hands the ticket to the thread
/// that polls and completes it (the C++ layer queues an LPC on the initiator persona).
pub type EngineWake = Option<extern "C" fn(ctx: *mut c_void) -> bool>;

/// A caller's context pointer, handed to the watcher's thread.
struct Ctx(*mut c_void);
// SAFETY: the caller of engine_park hands `ctx` to the watcher's thread (its contract).
#[allow(unsafe_code)]
unsafe impl Send for Ctx {}

/// The engine behind a handle, or NULL_ARGUMENT.
fn engine<'a>(e: *const EngineHandle) -> Result<&'a CudaEngine> {
    nonnull(e, "engine")?;
    // SAFETY: a handle from engine_new (a Box<CudaEngine> cast), not freed (the caller's contract).
    #[allow(unsafe_code)]
    Ok(unsafe { &*(e as *const CudaEngine) })
}

fn write<T>(out: *mut T, v: T) {
    // SAFETY: the caller checked `out` (nonnull) and passes memory for one T.
    #[allow(unsafe_code)]
    unsafe {
        out.write(v)
    }
}

/// A copy engine for copies on CUDA device `device`, batching copies of up to `batch_bytes`
/// (0: none). Makes no CUDA object until the first copy (then a non-blocking stream of
/// `device`, in its primary context: the CUDA runtime's). The environment's knobs
/// (`UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES`, docs/copy.md) are read by
/// `upcxx_extra_nvshmem_copy_policy`, not here: pass its `batch_bytes`.
///
/// Statuses: OK; NULL_ARGUMENT (`out`); INVALID_ARGUMENT (`device` negative). Thread safety: any
/// thread; the engine may be used from any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_new(device: c_int, batch_bytes: usize, out: *mut *mut EngineHandle) -> Status {
    nonnull(out, "out")?;
    if device < 0 {
        crate::fail!(InvalidArgument, "device is {device}");
    }
    Driver::prepare(device);
    let h: Box<CudaEngine> = Box::new(CudaEngine::new(device, batch_bytes));
    write(out, Box::into_raw(h) as *mut EngineHandle);
    Ok(())
}

/// The copy policy the environment asks for, read at each call: `UPCXX_EXTRA_NVSHMEM_COPY`
/// (`fast`, the default; `unbatched`; `upcxx`; lower case) and
/// `UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES` (decimal digits only; default
/// `UPCXX_EXTRA_NVSHMEM_COPY_DEFAULT_BATCH_BYTES`; set to the empty string it is refused). The C++
/// layer asks once per `nvshmem_heap`, when it is built (docs/copy.md).
///
/// Statuses: OK; NULL_ARGUMENT (`out`); INVALID_ARGUMENT (a variable set to a value it does not
/// take, `UPCXX_EXTRA_NVSHMEM_COPY` checked first: the last error names the variable, its value
/// and what it takes; `*out` is not written). Thread safety: any thread; no thread may change the
/// environment meanwhile.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_copy_policy(out: *mut CopyPolicy) -> Status {
    nonnull(out, "out")?;
    let p = crate::env::copy_setting().map_err(|e| Error::new(Status::InvalidArgument, e.to_string()))?;
    write(out, CopyPolicy { upcxx_only: p.upcxx_only, batch_bytes: p.batch_bytes });
    Ok(())
}

/// Closes the engine, waits until every copy issued has landed, releases its stream and events,
/// and frees it (`engine_drain`, then the handle). In a fork() child of the process that made
/// it, only forgets it (the parent's CUDA objects are not the child's). NULL is ignored.
/// Thread safety: no other call on this engine may run or follow.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_free(e: *mut EngineHandle) {
    if !e.is_null() {
        // SAFETY: a handle from engine_new (a Box<CudaEngine> cast), freed once (the caller's contract).
        #[allow(unsafe_code)]
        let h = unsafe { Box::from_raw(e as *mut CudaEngine) };
        if h.forked() {
            std::mem::forget(h);
        }
    }
}

/// Issues one copy; `*ticket` names it for `engine_poll` and `engine_complete`. Nothing waits:
/// the copy runs on the engine's stream (or the caller's, ON_STREAM) after the copies before it.
///
/// Statuses: OK; NULL_ARGUMENT (`engine`, `copy`, `ticket`, or an end of a copy of > 0 bytes);
/// INVALID_ARGUMENT (AFTER_STREAM with ON_STREAM, or a flag bit no
/// `upcxx_extra_nvshmem_engine_flag_t` names); CUDA_ERROR (the driver refused the copy: nothing
/// was copied; the last error names the bytes, the ranks and the driver's error);
/// STREAM_CAPTURE (ON_STREAM or AFTER_STREAM on a stream being captured into a CUDA graph);
/// ENGINE_CLOSED; FORKED. On an error there is no ticket. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_copy(e: *const EngineHandle, copy: *const EngineCopy, ticket: *mut u64) -> Status {
    let eng = engine(e)?;
    nonnull(copy, "copy")?;
    nonnull(ticket, "ticket")?;
    // SAFETY: checked above; the caller passes one descriptor.
    #[allow(unsafe_code)]
    let c = unsafe { *copy };
    if c.bytes > 0 && (c.src.is_null() || c.dst.is_null()) {
        crate::fail!(NullArgument, "the copy of {} bytes has a NULL end (src {:p}, dst {:p})", c.bytes, c.src, c.dst);
    }
    known_flags(c.flags, "the copy")?;
    write(ticket, eng.copy(&c.req())?);
    Ok(())
}

/// Issues `n` copies in the order of `stream` (a `cudaStream_t` / `CUstream`; NULL: the legacy
/// default stream), as one ticket: after the work queued on `stream` before the call, in the order
/// given, before the work queued on it after the call. Runs of small copies with DEVICE_ENDS (at
/// most `engine_batch_bytes`) go on the stream as one launch of the batch kernel each, the others
/// as one `cuMemcpyAsync` each (on a stream of another device: on the engine's stream, between
/// two events). The ticket lands when the stream has run every copy; a failure is settled REPORT
/// by `engine_complete`, never REDO. Each copy's `stream` is ignored, as are its ON_STREAM and
/// AFTER_STREAM flags.
///
/// Statuses: OK; NULL_ARGUMENT (`engine`, `ticket`, `copies` with `n` > 0, or an end of a copy
/// of > 0 bytes: nothing issued); INVALID_ARGUMENT (a copy's flags carry a bit no
/// `upcxx_extra_nvshmem_engine_flag_t` names: nothing issued); STREAM_CAPTURE; CUDA_ERROR (the
/// driver refused a copy: those before it were issued and the host waited for them, none after
/// it; no ticket); ENGINE_CLOSED; FORKED. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_copy_on_stream_batch(
    e: *const EngineHandle,
    stream: *mut c_void,
    copies: *const EngineCopy,
    n: usize,
    ticket: *mut u64,
) -> Status {
    let eng = engine(e)?;
    nonnull(ticket, "ticket")?;
    if n > 0 {
        nonnull(copies, "copies")?;
    }
    // SAFETY: checked above; the caller passes `n` descriptors.
    #[allow(unsafe_code)]
    let cs = if n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(copies, n) } };
    let mut reqs = Vec::with_capacity(n);
    for (i, c) in cs.iter().enumerate() {
        if c.bytes > 0 && (c.src.is_null() || c.dst.is_null()) {
            crate::fail!(NullArgument, "copy {i} of {} bytes has a NULL end (src {:p}, dst {:p})", c.bytes, c.src, c.dst);
        }
        known_flags(c.flags, &format!("copy {i}"))?;
        reqs.push(c.req());
    }
    write(ticket, eng.copy_batch_on_stream(stream as usize, &reqs)?);
    Ok(())
}

/// A ticket that lands once the work queued on `stream` (a `cudaStream_t` / `CUstream`; NULL: the
/// legacy default stream) before the call is done: the stream writes a word of mapped host memory
/// when it gets there (in the calling thread's context, else in that of the stream's device;
/// where the driver refuses the write, an event is recorded instead), and a poll reads it. Its
/// error, if any, is reported by `engine_complete` (REPORT), never redone.
///
/// Statuses: OK; NULL_ARGUMENT; STREAM_CAPTURE; CUDA_ERROR (no event could be recorded on the
/// stream); ENGINE_CLOSED; FORKED. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_after(e: *const EngineHandle, stream: *mut c_void, ticket: *mut u64) -> Status {
    let eng = engine(e)?;
    nonnull(ticket, "ticket")?;
    write(ticket, eng.after(stream as usize)?);
    Ok(())
}

/// Parks ticket `ticket` with the engine's watcher, a host thread of the engine (started at the
/// first park), instead of polling it: `wake(ctx)` is called once the ticket is over (its
/// `engine_poll` answers other than NOT_READY), once, from that thread; then poll and complete
/// it as usual. The thread reads the ticket's completion word each round (no CUDA call, no lock;
/// the engine is polled for a fault at most once a millisecond), yielding the core between
/// rounds, and naps 20 us between rounds once nothing has been over for 2 ms. `engine_free` calls
/// the wake of every ticket still parked, over or not, before it frees the engine.
///
/// Statuses: OK (parked: `wake` will be called); NULL_ARGUMENT (`engine`, `wake`);
/// INVALID_ARGUMENT (not a pending ticket of a caller's stream: only `engine_after`,
/// `engine_copy_on_stream_batch` and ON_STREAM copies park; a ticket never issued or settled);
/// STEP_UNAVAILABLE (the thread could not be started); FORKED. On an error nothing is parked and
/// `wake` is not called: poll the ticket. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_park(
    e: *const EngineHandle,
    ticket: u64,
    wake: EngineWake,
    ctx: *mut c_void,
) -> Status {
    let eng = engine(e)?;
    let Some(wake) = wake else {
        crate::fail!(NullArgument, "wake is NULL");
    };
    let ctx = Ctx(ctx);
    eng.park(
        ticket,
        Box::new(move || {
            // The whole `Ctx` is captured (it is Send), not its raw pointer field alone.
            let c = &ctx;
            wake(c.0) // the caller's function and context (engine_park's contract)
        }),
    )
}

/// Puts the batch on the stream now (one kernel launch). Polls and the next unbatched copy do it
/// too. Statuses: OK; NULL_ARGUMENT; FORKED. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_engine_flush(e: *const EngineHandle) -> Status {
    engine(e)?.flush_batch()
}

/// How ticket `ticket` ended: `*result` is `UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_LANDED` (0,
/// `CUDA_SUCCESS`: the bytes landed), `_NOT_READY` (600, `CUDA_ERROR_NOT_READY`: not yet), or the
/// driver's error for it (`_UNKNOWN`, 999, `CUDA_ERROR_UNKNOWN`, for a ticket it never issued or
/// already settled on a caller's stream): `upcxx_extra_nvshmem_engine_poll_t`.
/// Asking again after it ended gives the same answer until `engine_complete`. `asked`: the
/// caller's slot for this ticket, 0 at first: the polls of many tickets run back to back ask the
/// GPU once per round instead of once per ticket (a ticket that landed answers without asking,
/// so polling it again hides no other); NULL: no slot, every poll asks the GPU. Never blocks.
///
/// Statuses: OK; NULL_ARGUMENT (`engine`, `result`); FORKED (a fork() child: nothing reaches
/// CUDA, `*result` is not written). Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_poll(
    e: *const EngineHandle,
    ticket: u64,
    asked: *mut u64,
    result: *mut c_int,
) -> Status {
    let eng = engine(e)?;
    nonnull(result, "result")?;
    // SAFETY: the caller's slot, or NULL.
    #[allow(unsafe_code)]
    let a = if asked.is_null() { None } else { Some(unsafe { &mut *asked }) };
    write(result, eng.poll(ticket, a)?);
    Ok(())
}

/// Settles ticket `ticket`, whose poll gave `result` (once per ticket; after it the ticket is
/// unknown). `*settled`: LANDED, REDO (failed, the engine is open: redo the copy another way) or
/// REPORT (failed; a wait, or the engine is closed). A failure's text (the first since the last
/// `engine_take_error`) names `copy`'s bytes and ranks (NULL: none).
///
/// Statuses: OK; NULL_ARGUMENT (`engine`, `settled`); INVALID_ARGUMENT (`result` NOT_READY, a ticket
/// not over, never issued, or settled already: a failed copy or a caller's stream's ticket
/// settled twice; nothing changes); FORKED (a fork() child). Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_complete(
    e: *const EngineHandle,
    ticket: u64,
    result: c_int,
    copy: *const EngineCopy,
    settled: *mut EngineSettled,
) -> Status {
    let eng = engine(e)?;
    nonnull(settled, "settled")?;
    let what = if copy.is_null() {
        CopyReq { dst: 0, src: 0, bytes: 0, src_rank: -1, dst_rank: -1, flags: 0, stream: 0 }
    } else {
        // SAFETY: checked; the caller passes one descriptor.
        #[allow(unsafe_code)]
        unsafe {
            (*copy).req()
        }
    };
    if result == NOT_READY {
        crate::fail!(InvalidArgument, "ticket {ticket} is not over (its poll gave CUDA_ERROR_NOT_READY)");
    }
    write(
        settled,
        match eng.complete(ticket, result, &what)? {
            Settled::Landed => EngineSettled::Landed,
            Settled::Redo => EngineSettled::Redo,
            Settled::Report => EngineSettled::Report,
        },
    );
    Ok(())
}

/// OK when no copy failed since the last call; otherwise CUDA_ERROR, with the first failure's
/// text as the last error (the copy, its ranks, the driver's error, whether it is to be redone),
/// and forgets it. A failed batch launch is reported here too (batching is then off).
/// Statuses: OK; NULL_ARGUMENT; CUDA_ERROR. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_engine_take_error(e: *const EngineHandle) -> Status {
    let text = engine(e)?.take_error();
    if text.is_empty() { Ok(()) } else { Err(Error::new(Status::CudaError, text)) }
}

/// The host waits until every copy issued so far is over; their polls answer from here on.
/// Statuses: OK; NULL_ARGUMENT; FORKED. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_engine_wait_all(e: *const EngineHandle) -> Status {
    engine(e)?.wait_all()
}

/// No copy is issued from here on (ENGINE_CLOSED), and a failure is no longer to be redone
/// (REPORT). `engine_reopen` undoes it until `engine_drain`. Statuses: OK; NULL_ARGUMENT. Thread
/// safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_engine_close(e: *const EngineHandle) -> Status {
    engine(e)?.close();
    Ok(())
}

/// Undoes `engine_close` (not after `engine_drain`). Statuses: OK; NULL_ARGUMENT. Thread
/// safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_engine_reopen(e: *const EngineHandle) -> Status {
    engine(e)?.reopen();
    Ok(())
}

/// Closes the engine, marks every stream ticket done (a stream waiting for one goes on), waits
/// until every copy issued has landed, and releases the stream and the events; polls still
/// answer. `*unredone` (NULL: not asked): how many copies failed and were not
/// redone. In a fork() child: only closes. Statuses: OK; NULL_ARGUMENT (`engine`). Thread safety:
/// any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_drain(e: *const EngineHandle, unredone: *mut u64) -> Status {
    let n = engine(e)?.drain();
    if !unredone.is_null() {
        write(unredone, n);
    }
    Ok(())
}

/// The copy counts. Statuses: OK; NULL_ARGUMENT. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_counts(e: *const EngineHandle, out: *mut EngineCounts) -> Status {
    let eng = engine(e)?;
    let c = eng.counts();
    nonnull(out, "out")?;
    write(out, EngineCounts { fast: c.fast, batched: c.batched, parked: eng.parked() });
    Ok(())
}

/// The largest copy batched from the next copy on (`*bytes`; 0: none, also once a batch launch
/// failed, which turns batching off). Statuses: OK; NULL_ARGUMENT. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_batch_bytes(e: *const EngineHandle, bytes: *mut usize) -> Status {
    let eng = engine(e)?;
    nonnull(bytes, "bytes")?;
    write(bytes, eng.batch_bytes());
    Ok(())
}

/// Batches copies of up to `bytes` from the next copy on (0: none). Statuses: OK; NULL_ARGUMENT.
/// Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_engine_set_batch_bytes(e: *const EngineHandle, bytes: usize) -> Status {
    engine(e)?.set_batch_bytes(bytes);
    Ok(())
}

/// `*forked`: whether this process is a fork() child of the one that made the engine (then every
/// call that needs CUDA returns FORKED). Statuses: OK; NULL_ARGUMENT. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_forked(e: *const EngineHandle, forked: *mut bool) -> Status {
    let eng = engine(e)?;
    nonnull(forked, "forked")?;
    write(forked, eng.forked());
    Ok(())
}

/// OK when this process made the engine; FORKED in a fork() child of the one that did (the last
/// error then says why nothing can be done there): the check that every call needing CUDA or
/// UPC++ makes, for callers that refuse before their own work (the C++ layer's `upcxx::copy`
/// path). Statuses: OK; NULL_ARGUMENT; FORKED. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_engine_check_usable(e: *const EngineHandle) -> Status {
    engine(e)?.refuse_forked()
}

/// A ticket for work done outside the engine (the C++ layer: an `upcxx::copy`) that streams may
/// wait for (`engine_stream_wait_ticket`); `engine_ticket_done` when that work is over. Tickets
/// are done in issue order (a later one done first waits for the earlier ones).
/// Statuses: OK; NULL_ARGUMENT. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_ticket_new(e: *const EngineHandle, ticket: *mut u32) -> Status {
    let eng = engine(e)?;
    nonnull(ticket, "ticket")?;
    write(ticket, eng.stream_ticket());
    Ok(())
}

/// The work of ticket `ticket` (`engine_ticket_new`) is over (once per ticket). Statuses: OK;
/// NULL_ARGUMENT; INVALID_ARGUMENT (a ticket never issued, or done already: nothing changes).
/// Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_engine_ticket_done(e: *const EngineHandle, ticket: u32) -> Status {
    engine(e)?.ticket_done(ticket)
}

/// `*done`: whether ticket `ticket` is done (`ticket` 0: whether every ticket is). Statuses: OK;
/// NULL_ARGUMENT. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_engine_ticket_query(e: *const EngineHandle, ticket: u32, done: *mut bool) -> Status {
    let eng = engine(e)?;
    nonnull(done, "done")?;
    write(done, if ticket == 0 { !eng.tickets_pending() } else { eng.ticket_done_by(ticket) });
    Ok(())
}

/// The work queued on `stream` after the call waits, on the GPU, until ticket `ticket` is done
/// (`cuStreamWaitValue32` on a word of mapped host memory). Statuses: OK; NULL_ARGUMENT;
/// CUDA_ERROR (the driver cannot enqueue that wait: wait on the host for `engine_ticket_query`
/// instead); FORKED. Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_engine_stream_wait_ticket(e: *const EngineHandle, stream: *mut c_void, ticket: u32) -> Status {
    engine(e)?.stream_waits_for(stream as usize, ticket)
}

/// OK when `stream` (a `cudaStream_t` / `CUstream`; NULL: the legacy default stream) is not being
/// captured into a CUDA graph; STREAM_CAPTURE when it is, or when the driver cannot say (the
/// legacy stream during another stream's global-mode capture). Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_stream_check(stream: *mut c_void) -> Status {
    core::check_stream(&Driver, stream as usize)
}

/// `*done`: whether the work queued on `stream` is over. Statuses: OK; NULL_ARGUMENT; CUDA_ERROR
/// (the work failed, or the stream is not one of this process). Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_stream_query(stream: *mut c_void, done: *mut bool) -> Status {
    nonnull(done, "done")?;
    match crate::cuda::stream_query(stream as usize, None) {
        Ok(()) => write(done, true),
        Err(NOT_READY) => write(done, false),
        Err(c) => crate::fail!(CudaError, "querying the stream failed: {}", crate::cuda::result_name(c)),
    }
    Ok(())
}

/// Waits for the work queued on `stream`. Statuses: OK; CUDA_ERROR (that work failed, or the
/// stream is not one of this process). Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_stream_synchronize(stream: *mut c_void) -> Status {
    if let Err(c) = crate::cuda::stream_synchronize(stream as usize, None) {
        crate::fail!(CudaError, "waiting for the stream failed: {}", crate::cuda::result_name(c));
    }
    Ok(())
}

/// `*count`: the CUDA devices this process sees; `*current`: the device of the CUDA context
/// current on the calling thread, -1 when none is (either pointer may be NULL). Statuses: OK;
/// CUDA_ERROR (no driver, or it fails). Thread safety: any thread.
#[unsafe(no_mangle)]
#[export]
pub unsafe extern "C" fn upcxx_extra_nvshmem_cuda_devices(count: *mut c_int, current: *mut c_int) -> Status {
    let n = match crate::cuda::device_count() {
        Ok(n) => n,
        Err(c) => crate::fail!(CudaError, "counting the CUDA devices failed: {}", crate::cuda::result_name(c)),
    };
    if !count.is_null() {
        write(count, n);
    }
    if !current.is_null() {
        write(current, crate::cuda::current_device().unwrap_or(-1));
    }
    Ok(())
}

/// Makes `device`'s primary context (the CUDA runtime's for that device, created when needed)
/// current on the calling thread: what `cudaSetDevice(device)` followed by a first runtime call
/// does. Statuses: OK; CUDA_ERROR (the last error names the device and the driver's error).
/// Thread safety: any thread (it changes the calling thread's context only).
#[unsafe(no_mangle)]
#[export]
pub extern "C" fn upcxx_extra_nvshmem_cuda_use_device(device: c_int) -> Status {
    if let Err(c) = crate::cuda::use_device(device) {
        crate::fail!(CudaError, "making CUDA device {device}'s primary context current failed: {}", crate::cuda::result_name(c));
    }
    Ok(())
}
