//! The copy engine's protocol: the batch, the sequence marks, the outcomes, the redo bookkeeping,
//! the tickets of the copies a stream waits for, and fork safety. Generic over [`Gpu`], the few
//! CUDA operations it uses: the library runs it over the CUDA driver (`super::driver`), the loom
//! model (`tests/loom/`) over a model GPU. Imports only `crate::error` and the model's sync types,
//! so the model compiles it as it is.
//!
//! A copy gets the next sequence number of the engine's stream. A small copy with device memory
//! at both ends, not ordered after a stream, joins the batch (one kernel launch moves it, at the
//! next flush: when the batch is full, before anything else goes on the stream, before a mark is
//! recorded, or when a caller asks); any other copy is one `cuMemcpyAsync`. The stream runs its
//! work in issue order, so one event (a mark) recorded after copy `n` tells that every copy up to
//! `n` is over. A copy issued while no mark is pending gets one of its own; a poll that finds its
//! copy uncovered records one after every copy issued so far, which the others share.
//!
//! Copies on a caller's stream (`copy_on_stream`, one copy or a batch of them) and waits for a
//! caller's stream (`after`) are tickets with the high bit set. Each has a word of host memory
//! mapped for the GPU that the stream itself writes when it reaches that point
//! (`cuStreamWriteValue32`): a poll is a load of that word, no CUDA call. A word belongs to one
//! pending ticket, not to a stream: a stream handle may be destroyed and its value reused by
//! CUDA for a new stream, and two streams writing one word would leave it out of order; a word
//! goes back to the engine's pool once its write was seen. The value written is the engine's next
//! 32-bit number (never 0), so a word reused cannot be taken for an older ticket's.
//!
//! A failed stream is noticed without a CUDA call per poll: when a ticket's word has landed, one
//! query of the context (`cuStreamQuery` of the engine's stream) says whether the GPU reported a
//! fault (a GPU's asynchronous faults are sticky: every later call of the context reports them);
//! while it has not landed, at most one such query per millisecond (a faulted context never writes
//! the word). An event remains only where a stream write cannot be enqueued (the driver refuses
//! it): then an event recorded after the work tells the outcome.
//!
//! An event that reports an error blames the copies since the mark before it, and no others; the
//! caller learns a copy's outcome from [`Engine::poll`] and settles it once with
//! [`Engine::complete`], which records the first failure's text and says whether the caller may
//! redo the copy (the engine is still open) or must only report it.

#[cfg(loom)]
use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};
#[cfg(not(loom))]
use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use crate::error::{Error, Result, Status};
use std::collections::{HashMap, VecDeque};

/// The loom model's planted bugs (`tests/loom/tests/engine_model.rs`): under `--cfg loom` a test
/// turns one on and the model must catch it; in the library none is ever on.
pub mod planted {
    /// A copy that is not batched goes on the stream before the pending batch.
    pub const UNBATCHED_PASSES_BATCH: u8 = 1;
    /// A mark is recorded before the batch it covers is launched.
    pub const MARK_BEFORE_LAUNCH: u8 = 2;
    /// The older of two marks landing lands the newer mark's copies too.
    pub const NEWER_MARK_LANDS: u8 = 3;
    /// drain() releases the stream without waiting for the copies on it.
    pub const DRAIN_BEFORE_IDLE: u8 = 4;
    /// The engine issues copies in a fork() child.
    pub const FORK_UNCHECKED: u8 = 5;

    /// The bug the model turned on (0: none).
    #[cfg(loom)]
    pub static BUG: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    #[cfg(loom)]
    pub fn on(bug: u8) -> bool {
        BUG.load(std::sync::atomic::Ordering::Relaxed) == bug
    }
    #[cfg(not(loom))]
    #[inline(always)]
    pub fn on(_: u8) -> bool {
        false
    }
}

/// A CUDA driver result's number (`CUresult`): 0 success.
pub type Code = i32;
/// `CUDA_SUCCESS`.
pub const SUCCESS: Code = 0;
/// `CUDA_ERROR_NOT_READY`: a poll's "not yet".
pub const NOT_READY: Code = 600;
/// `CUDA_ERROR_UNKNOWN`: what a copy issued with [`INJECT_FAILURE`] reports.
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
/// Testing: the copy is not issued and reports `CUDA_ERROR_UNKNOWN` when it lands.
pub const INJECT_FAILURE: u32 = 8;

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

const EVENT_TICKET: u64 = 1 << 63;

/// Words of one block of mapped host memory for the tickets of callers' streams.
pub const WORDS_PER_BLOCK: usize = 1024;
/// While a ticket's word has not landed, the context is asked for a fault at most this often.
const PROBE_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

struct Mark {
    event: Handle,
    through: u64,
}

/// Copies `first..=last` (landed) that CUDA reported `error` for; `redone` of them were redone.
struct Failure {
    first: u64,
    last: u64,
    error: Code,
    redone: u64,
}

/// A ticket whose outcome a word the stream writes (or an event on it) tells.
struct Watched {
    event: Handle, // 0 once settled, or with a word
    result: Code,  // NOT_READY until settled
    is_wait: bool,
    on_own_device: bool, // a copy_on_stream copy on a stream of the engine's device (pooled event)
    word: Option<Word>,  // the word the stream writes; None once seen (or given up: never reused)
    batch: bool,         // a batch of copies (copy_batch_on_stream): reported, never redone
    injected: bool,      // testing: a copy of the batch was not issued: UNKNOWN once the others landed
}

/// A word of mapped host memory a stream writes `value` into; `device`: whose context is asked
/// for a fault.
#[derive(Clone, Copy)]
struct Word {
    host: usize,
    dev: usize,
    counter: usize,
    value: u32,
    device: i32,
}

/// A word of the pool: host address, device address, and its launch counter's device address
/// (0: none, so only a stream write can store it).
type PoolWord = (usize, usize, usize);

#[derive(Default)]
struct State {
    stream: Option<Handle>,
    issued: u64, // copies issued on the stream (the last one's seq)
    landed: u64, // every copy up to this seq is over
    marks: VecDeque<Mark>,
    failures: Vec<Failure>,
    injected: Vec<u64>,
    pool: Vec<Handle>,
    error: String,
    asked: u64,
    batch: Vec<Desc>,
    batch_seq: Vec<u64>,
    watched: HashMap<u64, Watched>,
    next_watched: u64,
    flag: Option<(usize, usize)>,
    tickets_issued: u32,
    tickets_done: u32,
    tickets_out_of_order: Vec<u32>,
    released: bool,
    settled_failed: std::collections::HashSet<u64>, // failed copies of the engine's stream settled (complete)
    free_words: Vec<PoolWord>,                      // mapped words no stream or launch will write again
    next_value: u32,
    last_probe: Option<std::time::Instant>,
}

/// The copy engine of one device. Every method may be called from any thread.
pub struct Engine<G: Gpu> {
    gpu: G,
    device: i32,
    generation: u32,
    batch_bytes: AtomicUsize,
    batching: AtomicBool,
    closed: AtomicBool,
    fast: AtomicUsize,
    batched: AtomicUsize,
    state: Mutex<State>,
}

fn unknown_ticket(t: u64) -> Error {
    Error::new(Status::InvalidArgument, format!("ticket {t} was never issued by this engine, or was settled already"))
}

fn closed_error() -> Error {
    Error::new(Status::EngineClosed, "the engine is closed (its heap is being destroyed): nothing was copied")
}

impl<G: Gpu> Engine<G> {
    /// An engine for copies on `device`, batching copies of up to `batch_bytes` (0: none). Makes
    /// no CUDA object until the first copy.
    pub fn new(gpu: G, device: i32, batch_bytes: usize) -> Self {
        let generation = gpu.fork_generation();
        Engine {
            gpu,
            device,
            generation,
            batch_bytes: AtomicUsize::new(batch_bytes),
            batching: AtomicBool::new(true),
            closed: AtomicBool::new(false),
            fast: AtomicUsize::new(0),
            batched: AtomicUsize::new(0),
            state: Mutex::new(State::default()),
        }
    }

    /// Whether this process is a fork() child of the one that made the engine.
    pub fn forked(&self) -> bool {
        self.gpu.fork_generation() != self.generation
    }

    fn refuse_forked(&self) -> Result<()> {
        if self.forked() && !planted::on(planted::FORK_UNCHECKED) {
            return Err(Error::new(
                Status::Forked,
                "this process is a fork() child of the one that made the engine; CUDA does not survive fork(), so nothing was done",
            ));
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The largest copy batched from the next copy on (0: none; 0 also once a launch failed).
    pub fn batch_bytes(&self) -> usize {
        if self.batching.load(Ordering::Relaxed) { self.batch_bytes.load(Ordering::Relaxed) } else { 0 }
    }
    pub fn set_batch_bytes(&self, n: usize) {
        self.batch_bytes.store(n, Ordering::Relaxed);
    }
    pub fn counts(&self) -> Counts {
        Counts { fast: self.fast.load(Ordering::Relaxed), batched: self.batched.load(Ordering::Relaxed) }
    }

    fn describe(r: &CopyReq) -> String {
        format!("copy of {} bytes from rank {} to rank {}", r.bytes, r.src_rank, r.dst_rank)
    }

    /// Issues a copy; its ticket's outcome comes from [`Engine::poll`]. On an error nothing was
    /// copied and nothing is to be polled.
    pub fn copy(&self, r: &CopyReq) -> Result<u64> {
        self.refuse_forked()?;
        if r.flags & ON_STREAM != 0 && r.flags & AFTER_STREAM != 0 {
            return Err(Error::new(Status::InvalidArgument, "a copy is on a stream or after one, not both"));
        }
        if r.flags & (ON_STREAM | AFTER_STREAM) != 0 {
            self.check_stream(r.stream)?;
        }
        let t = if r.flags & ON_STREAM != 0 { self.issue_on_stream(r)? } else { self.issue(r)? };
        self.fast.fetch_add(1, Ordering::Relaxed);
        Ok(t)
    }

    fn issue(&self, r: &CopyReq) -> Result<u64> {
        let mut st = self.lock();
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        let inject = r.flags & INJECT_FAILURE != 0;
        let mut e = SUCCESS;
        if st.stream.is_none() {
            match self.gpu.stream_create(self.device) {
                Ok(s) => st.stream = Some(s),
                Err(c) => e = c,
            }
        }
        if e == SUCCESS && r.flags & DEVICE_ENDS != 0 && r.flags & AFTER_STREAM == 0 && r.bytes <= self.batch_bytes() {
            st.issued += 1;
            let seq = st.issued;
            if inject {
                st.injected.push(seq);
            } else {
                st.batch.push(Desc { src: r.src, dst: r.dst, bytes: r.bytes });
                st.batch_seq.push(seq);
            }
            if st.batch.len() == G::BATCH_MAX {
                self.flush(&mut st);
            }
            return Ok(seq); // the mark comes with the batch, at the first poll that asks
        }
        if e == SUCCESS && !planted::on(planted::UNBATCHED_PASSES_BATCH) {
            self.flush(&mut st);
        }
        if e == SUCCESS && r.flags & AFTER_STREAM != 0 {
            e = self.order_after(&st, r.stream);
        }
        if e == SUCCESS && !inject {
            let s = st.stream.unwrap_or(0);
            e = self.gpu.memcpy_async(r.dst, r.src, r.bytes, s, Some(self.device)).err().unwrap_or(SUCCESS);
        }
        if e != SUCCESS {
            return Err(Error::new(Status::CudaError, format!("issuing the {} failed: {}", Self::describe(r), self.gpu.result_name(e))));
        }
        st.issued += 1;
        let seq = st.issued;
        if inject {
            st.injected.push(seq);
        }
        if st.marks.is_empty() {
            self.record_mark(&mut st); // the first copy since the last mark: one of its own
        }
        Ok(seq)
    }

    fn issue_on_stream(&self, r: &CopyReq) -> Result<u64> {
        if self.gpu.stream_device(r.stream) != self.device {
            // On the engine's stream after the caller's work; the caller's stream waits for it.
            let seq = self.issue(&CopyReq { flags: (r.flags & !ON_STREAM) & !DEVICE_ENDS | AFTER_STREAM, ..*r })?;
            let mut st = self.lock();
            if self.follow_stream(&mut st, r.stream).is_err() {
                self.settle_by_marks(&mut st); // the host waits for the copy instead
            }
            return Ok(seq);
        }
        let mut st = self.lock();
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        let (event, result) = if r.flags & INJECT_FAILURE != 0 {
            (0, UNKNOWN)
        } else {
            // A small copy with device memory at both ends: one launch that copies and writes the
            // ticket's word (one operation on the stream, not two).
            if r.flags & DEVICE_ENDS != 0
                && r.bytes > 0
                && r.bytes <= self.batch_bytes()
                && let Some((w, sig)) = self.take_signal(&mut st)
            {
                let desc = [Desc { src: r.src, dst: r.dst, bytes: r.bytes }];
                if self.gpu.launch_batch(self.device, r.stream, &desc, Some(sig)).is_ok() {
                    self.batched.fetch_add(1, Ordering::Relaxed);
                    return Ok(Self::watch_taken(&mut st, w, sig.value, self.device, false, false));
                }
                st.free_words.push(w); // not launched: nothing will write it
            }
            if let Err(e) = self.gpu.memcpy_async(r.dst, r.src, r.bytes, r.stream, Some(self.device)) {
                return Err(Error::new(
                    Status::CudaError,
                    format!("issuing the {} on the caller's stream failed: {}", Self::describe(r), self.gpu.result_name(e)),
                ));
            }
            if let Ok(t) = self.watch_word(&mut st, r.stream, Some(self.device), self.device, false, false) {
                return Ok(t);
            }
            // No stream write: an event after the copy tells when it lands.
            let ev = self.pooled_event(&mut st);
            match ev.map(|ev| (ev, self.gpu.event_record(ev, r.stream, Some(self.device)))) {
                Some((ev, Ok(()))) => (ev, NOT_READY),
                other => {
                    // Issued, but nothing can tell when it lands: the host waits.
                    if let Some((ev, _)) = other {
                        self.gpu.event_destroy(ev); // its state is unknown: not back to the pool
                    }
                    (0, self.gpu.stream_synchronize(r.stream, Some(self.device)).err().unwrap_or(SUCCESS))
                }
            }
        };
        Ok(Self::watch(&mut st, Watched { event, result, is_wait: false, on_own_device: true, word: None, batch: false, injected: false }))
    }

    /// Under the lock: a ticket whose outcome the word that `s` writes when it reaches this point
    /// tells (written in context `ctx`; `device`: the context asked for a fault). An error when
    /// the driver refuses the write (nothing enqueued).
    fn watch_word(
        &self,
        st: &mut State,
        s: Handle,
        ctx: Option<i32>,
        device: i32,
        is_wait: bool,
        batch: bool,
    ) -> std::result::Result<u64, Code> {
        let w = self.take_word(st)?;
        let value = Self::next_value(st);
        if let Err(c) = self.gpu.stream_write_value32(s, w.1, value, ctx) {
            st.free_words.push(w); // nothing will write it
            return Err(c);
        }
        Ok(Self::watch_taken(st, w, value, device, is_wait, batch))
    }

    /// Under the lock: a word of the pool (a new block of them when it is empty, with a launch
    /// counter each where device memory for them can be had).
    fn take_word(&self, st: &mut State) -> std::result::Result<PoolWord, Code> {
        if let Some(w) = st.free_words.pop() {
            return Ok(w);
        }
        let (h, d) = self.gpu.mapped_words(self.device, WORDS_PER_BLOCK)?;
        let c = self.gpu.device_words(self.device, WORDS_PER_BLOCK).unwrap_or(0);
        let counter = |i: usize| if c == 0 { 0 } else { c + 4 * i };
        st.free_words.extend((1..WORDS_PER_BLOCK).rev().map(|i| (h + 4 * i, d + 4 * i, counter(i))));
        Ok((h, d, c))
    }

    /// Under the lock: the value the next word written stores (never 0).
    fn next_value(st: &mut State) -> u32 {
        st.next_value = st.next_value.wrapping_add(1).max(1);
        st.next_value
    }

    /// Under the lock: a ticket told by word `w`, which the stream (or a launch on it) stores
    /// `value` into when it reaches that point.
    fn watch_taken(st: &mut State, w: PoolWord, value: u32, device: i32, is_wait: bool, batch: bool) -> u64 {
        let word = Some(Word { host: w.0, dev: w.1, counter: w.2, value, device });
        Self::watch(st, Watched { event: 0, result: NOT_READY, is_wait, on_own_device: true, word, batch, injected: false })
    }

    /// Under the lock: a word of the pool with a launch counter, and the [`Signal`] that stores
    /// the next value in it; `None` (nothing taken) when the pool has none.
    fn take_signal(&self, st: &mut State) -> Option<(PoolWord, Signal)> {
        let w = self.take_word(st).ok()?;
        if w.2 == 0 {
            st.free_words.push(w);
            return None;
        }
        let value = Self::next_value(st);
        Some((w, Signal { counter: w.2, word: w.1, value }))
    }

    /// Under the lock: a fault the context of `device` reports (`SUCCESS`: none).
    fn probe(&self, st: &mut State, device: i32) -> Code {
        st.last_probe = Some(std::time::Instant::now());
        let r = match st.stream {
            Some(own) if device == self.device => self.gpu.stream_query(own, Some(device)),
            _ => self.gpu.stream_query(0, Some(device)),
        };
        match r {
            Ok(()) | Err(NOT_READY) => SUCCESS,
            Err(c) => c,
        }
    }

    /// Under the lock: ticket `t`'s word, if it has one: `SUCCESS` or the context's fault once
    /// the stream wrote it (the word goes back to the pool), `NOT_READY` before (a fault found
    /// by the probe of at most one per [`PROBE_EVERY`] settles it: the word is given up).
    fn word_outcome(&self, st: &mut State, t: u64, probe_now: bool) -> Option<Code> {
        let w = st.watched.get(&t)?;
        if w.result != NOT_READY {
            return Some(w.result);
        }
        let word = w.word?;
        let injected = w.injected;
        let landed = read_word(word.host) == word.value;
        let e = if landed {
            match self.probe(st, word.device) {
                SUCCESS if injected => UNKNOWN,
                e => e,
            }
        } else if probe_now || st.last_probe.is_none_or(|p| p.elapsed() >= PROBE_EVERY) {
            match self.probe(st, word.device) {
                SUCCESS => return Some(NOT_READY),
                c => c,
            }
        } else {
            return Some(NOT_READY);
        };
        if landed {
            st.free_words.push((word.host, word.dev, word.counter));
        }
        let w = st.watched.get_mut(&t).expect("watched");
        w.word = None;
        w.result = e;
        Some(e)
    }

    /// Issues `reqs` in `s`'s order, as one ticket: the work queued on `s` before the call runs
    /// first, then the copies in the order given (runs of small copies with device memory at both
    /// ends, [`DEVICE_ENDS`] and at most [`Engine::batch_bytes`], as one launch of the batch
    /// kernel each, up to [`Gpu::BATCH_MAX`] copies a launch; the others one `cuMemcpyAsync` each),
    /// then the work queued on `s` after the call. On a stream of another device the copies run on
    /// the engine's stream between two events, as [`ON_STREAM`]'s do. The ticket's outcome comes
    /// from [`Engine::poll`]; a failure is reported ([`Settled::Report`]), never redone.
    ///
    /// `Err(CudaError)` when the driver refuses a copy or a launch: the copies before it were
    /// issued and the host waited for them; none after it was.
    pub fn copy_batch_on_stream(&self, s: Handle, reqs: &[CopyReq]) -> Result<u64> {
        self.refuse_forked()?;
        self.check_stream(s)?;
        let own = self.gpu.stream_device(s) == self.device;
        let mut st = self.lock();
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        let target = if own {
            s
        } else {
            if st.stream.is_none() {
                let made = self.gpu.stream_create(self.device).map_err(|c| {
                    Error::new(Status::CudaError, format!("creating the engine's stream failed: {}", self.gpu.result_name(c)))
                })?;
                st.stream = Some(made);
            }
            self.flush(&mut st);
            let e = self.order_after(&st, s);
            if e != SUCCESS {
                return Err(Error::new(
                    Status::CudaError,
                    format!("ordering the copies after the caller's stream failed: {}", self.gpu.result_name(e)),
                ));
            }
            st.stream.unwrap_or(0)
        };
        let inject = reqs.iter().any(|r| r.flags & INJECT_FAILURE != 0);
        // The last launch writes the ticket's word itself, when the batch ends with one.
        let signal = self.take_signal(&mut st);
        let put = self.put_in_order(target, reqs, signal.map(|s| s.1));
        if let Some((w, _)) = signal
            && !matches!(put, Ok((_, true)))
        {
            st.free_words.push(w); // not launched with it: nothing will write it
        }
        let (batched, signalled) = put.map_err(|(i, why)| {
            let _ = self.gpu.stream_synchronize(target, Some(self.device));
            Error::new(
                Status::CudaError,
                format!(
                    "issuing copy {i} of a batch of {} on the stream failed ({why}): the {i} before it landed, none after it was issued",
                    reqs.len()
                ),
            )
        })?;
        self.fast.fetch_add(reqs.len(), Ordering::Relaxed);
        self.batched.fetch_add(batched, Ordering::Relaxed);
        let signalled = signal.filter(|_| signalled).map(|(w, sig)| Self::watch_taken(&mut st, w, sig.value, self.device, false, true));
        let t = if let Some(t) = signalled {
            if let Some(w) = st.watched.get_mut(&t) {
                w.injected = inject;
            }
            t
        } else {
            match self.watch_word(&mut st, target, Some(self.device), self.device, false, true) {
                Ok(t) => {
                    if let Some(w) = st.watched.get_mut(&t) {
                        w.injected = inject;
                    }
                    t
                }
                Err(_) => {
                    let ev = self.pooled_event(&mut st);
                    let (event, result) = match ev.map(|ev| (ev, self.gpu.event_record(ev, target, Some(self.device)))) {
                        Some((ev, Ok(()))) => (ev, NOT_READY),
                        other => {
                            if let Some((ev, _)) = other {
                                self.gpu.event_destroy(ev);
                            }
                            (0, self.gpu.stream_synchronize(target, Some(self.device)).err().unwrap_or(SUCCESS))
                        }
                    };
                    let result = if inject && result == SUCCESS { UNKNOWN } else { result };
                    Self::watch(
                        &mut st,
                        Watched { event, result, is_wait: false, on_own_device: true, word: None, batch: true, injected: inject },
                    )
                }
            }
        };
        if !own && self.follow_stream(&mut st, s).is_err() {
            let _ = self.gpu.stream_synchronize(target, Some(self.device)); // the host waits instead
        }
        Ok(t)
    }

    /// `reqs` onto `target` in order (no lock needed: the caller's stream, or the engine's under
    /// the lock). With `signal`, a launch that is the last operation also writes that word. The
    /// number of copies launches moved and whether `signal` went with one, or the index of the
    /// copy the driver refused and why.
    fn put_in_order(
        &self,
        target: Handle,
        reqs: &[CopyReq],
        signal: Option<Signal>,
    ) -> std::result::Result<(usize, bool), (usize, String)> {
        let max = self.batch_bytes();
        let mut batched = 0;
        let mut run: Vec<(usize, Desc)> = Vec::new();
        // Launches `run` (the last chunk with `sig`): whether `sig` went with one.
        let launch = |run: &mut Vec<(usize, Desc)>,
                      batched: &mut usize,
                      sig: Option<Signal>|
         -> std::result::Result<bool, (usize, String)> {
            let chunks = run.len().div_ceil(G::BATCH_MAX);
            let mut signalled = false;
            for (k, chunk) in run.chunks(G::BATCH_MAX).enumerate() {
                let descs: Vec<Desc> = chunk.iter().map(|c| c.1).collect();
                let sig = sig.filter(|_| k + 1 == chunks);
                if self.gpu.launch_batch(self.device, target, &descs, sig).is_ok() {
                    *batched += descs.len();
                    signalled = sig.is_some();
                    continue;
                }
                for (i, d) in chunk {
                    self.gpu.memcpy_async(d.dst, d.src, d.bytes, target, Some(self.device)).map_err(|c| (*i, self.gpu.result_name(c)))?;
                }
            }
            run.clear();
            Ok(signalled)
        };
        for (i, r) in reqs.iter().enumerate() {
            if r.flags & INJECT_FAILURE != 0 || r.bytes == 0 {
                continue;
            }
            if r.flags & DEVICE_ENDS != 0 && r.bytes <= max {
                run.push((i, Desc { src: r.src, dst: r.dst, bytes: r.bytes }));
                continue;
            }
            launch(&mut run, &mut batched, None)?;
            self.gpu.memcpy_async(r.dst, r.src, r.bytes, target, Some(self.device)).map_err(|c| (i, self.gpu.result_name(c)))?;
        }
        let signalled = launch(&mut run, &mut batched, signal)?;
        Ok((batched, signalled))
    }

    fn watch(st: &mut State, w: Watched) -> u64 {
        st.next_watched += 1;
        let t = EVENT_TICKET | st.next_watched;
        st.watched.insert(t, w);
        t
    }

    /// A ticket that is over once the work queued on `s` before the call is: an event recorded
    /// on `s` in the calling thread's context, else in the context of `s`'s device.
    pub fn after(&self, s: Handle) -> Result<u64> {
        self.refuse_forked()?;
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        self.check_stream(s)?;
        {
            let mut st = self.lock();
            // The calling thread's context first (the special handles name its device's streams;
            // the usual stream is one of the engine's device, whose context is asked for a fault),
            // then, asking CUDA for the stream's device only then, that device's.
            if let Ok(t) = self.watch_word(&mut st, s, None, self.device, true, false) {
                return Ok(t);
            }
            let d = self.gpu.stream_device(s);
            if d >= 0
                && let Ok(t) = self.watch_word(&mut st, s, Some(d), d, true, false)
            {
                return Ok(t);
            }
        }
        let ev = self.record_on(s)?;
        let mut st = self.lock();
        Ok(Self::watch(
            &mut st,
            Watched { event: ev, result: NOT_READY, is_wait: true, on_own_device: false, word: None, batch: false, injected: false },
        ))
    }

    /// [`check_stream`] with this engine's GPU.
    pub fn check_stream(&self, s: Handle) -> Result<()> {
        check_stream(&self.gpu, s)
    }

    fn record_on(&self, s: Handle) -> Result<Handle> {
        let attempt = |ctx: Option<i32>| -> std::result::Result<Handle, Code> {
            let ev = self.gpu.event_create(ctx)?;
            match self.gpu.event_record(ev, s, ctx) {
                Ok(()) => Ok(ev),
                Err(c) => {
                    self.gpu.event_destroy(ev);
                    Err(c)
                }
            }
        };
        let mut last = match attempt(None) {
            Ok(ev) => return Ok(ev),
            Err(c) => c,
        };
        let d = self.gpu.stream_device(s);
        let devices: Vec<i32> = if d >= 0 { vec![d] } else { (0..self.gpu.device_count()).collect() };
        for dev in devices {
            match attempt(Some(dev)) {
                Ok(ev) => return Ok(ev),
                Err(c) => last = c,
            }
        }
        Err(Error::new(Status::CudaError, format!("recording an event on the stream failed: {}", self.gpu.result_name(last))))
    }

    /// Under the lock: the heap's stream waits for the work queued on `after` so far, on the GPU.
    /// The event is recorded where [`Engine::after`]'s is (the calling thread's context, else
    /// that of `after`'s device): a stream of another device is ordered on the GPU too.
    fn order_after(&self, st: &State, after: Handle) -> Code {
        let stream = st.stream.unwrap_or(0);
        let Ok(ev) = self.record_on(after) else {
            return self.gpu.stream_synchronize(after, None).err().unwrap_or(SUCCESS);
        };
        let r = self.gpu.stream_wait_event(stream, ev, Some(self.device)).err().unwrap_or(SUCCESS);
        self.gpu.event_destroy(ev); // the driver releases it once the wait is satisfied
        r
    }

    /// Under the lock: `s` waits, on the GPU, for everything issued on the engine's stream so far.
    fn follow_stream(&self, st: &mut State, s: Handle) -> std::result::Result<(), Code> {
        self.flush(st);
        let ev = self.gpu.event_create(Some(self.device))?;
        let r = self.gpu.event_record(ev, st.stream.unwrap_or(0), Some(self.device)).and_then(|()| self.gpu.stream_wait_event(s, ev, None));
        self.gpu.event_destroy(ev);
        r
    }

    fn pooled_event(&self, st: &mut State) -> Option<Handle> {
        if let Some(e) = st.pool.pop() {
            return Some(e);
        }
        self.gpu.event_create(Some(self.device)).ok()
    }

    /// Puts the batch on the stream now (one kernel launch).
    pub fn flush_batch(&self) -> Result<()> {
        self.refuse_forked()?;
        let mut st = self.lock();
        self.flush(&mut st);
        Ok(())
    }

    /// Under the lock: the batch onto the stream: one kernel launch, or one `cuMemcpyAsync` per
    /// copy when the kernel cannot be launched (batching is then off, and the reason kept). A
    /// copy the driver refuses even then, and those after it, are over with that error, after
    /// the host waited for the copies before them.
    fn flush(&self, st: &mut State) {
        if st.batch.is_empty() {
            return;
        }
        let s = st.stream.unwrap_or(0);
        let n = st.batch.len();
        match self.gpu.launch_batch(self.device, s, &st.batch, None) {
            Ok(()) => {
                self.batched.fetch_add(n, Ordering::Relaxed);
                st.batch.clear();
                st.batch_seq.clear();
                return;
            }
            Err(why) => {
                self.batching.store(false, Ordering::Relaxed);
                if st.error.is_empty() {
                    st.error = format!(
                        "batching is off for this engine, its kernel could not be launched ({why}); copies are one \
                         cuMemcpyAsync each"
                    );
                }
            }
        }
        let batch = std::mem::take(&mut st.batch);
        let seqs = std::mem::take(&mut st.batch_seq);
        for (d, seq) in batch.iter().zip(seqs) {
            if let Err(e) = self.gpu.memcpy_async(d.dst, d.src, d.bytes, s, Some(self.device)) {
                let w = self.gpu.stream_synchronize(s, Some(self.device)).err().unwrap_or(SUCCESS);
                self.retire_marks(st);
                self.settle_through(st, seq - 1, w);
                let issued = st.issued;
                st.failures.push(Failure { first: seq, last: issued, error: e, redone: 0 });
                self.settle_through(st, issued, SUCCESS);
                break;
            }
        }
    }

    /// Under the lock: an event after every copy issued so far; where none can be recorded the
    /// host waits for the stream instead (the copies are issued: they complete regardless).
    fn record_mark(&self, st: &mut State) {
        let late = planted::on(planted::MARK_BEFORE_LAUNCH);
        if !late {
            self.flush(st);
        }
        let s = st.stream.unwrap_or(0);
        if let Some(ev) = self.pooled_event(st) {
            if self.gpu.event_record(ev, s, Some(self.device)).is_ok() {
                let through = st.issued;
                st.marks.push_back(Mark { event: ev, through });
                if late {
                    self.flush(st);
                }
                return;
            }
            self.gpu.event_destroy(ev); // its state is unknown: not back to the pool
        }
        let r = self.gpu.stream_synchronize(s, Some(self.device)).err().unwrap_or(SUCCESS);
        self.retire_marks(st);
        let issued = st.issued;
        self.settle_through(st, issued, r);
    }

    /// Under the lock: every copy up to `through` is over, with `e` for those not over before
    /// (and `UNKNOWN` for injected failures among them).
    fn settle_through(&self, st: &mut State, through: u64, e: Code) {
        if through <= st.landed {
            return;
        }
        if e != SUCCESS {
            let first = st.landed + 1;
            st.failures.push(Failure { first, last: through, error: e, redone: 0 });
        }
        let mut i = 0;
        while i < st.injected.len() {
            let seq = st.injected[i];
            if seq <= through {
                if e == SUCCESS {
                    st.failures.push(Failure { first: seq, last: seq, error: UNKNOWN, redone: 0 });
                }
                st.injected.swap_remove(i);
            } else {
                i += 1;
            }
        }
        st.landed = through;
        if planted::on(planted::NEWER_MARK_LANDS) {
            st.landed = st.marks.back().map_or(through, |m| m.through.max(through));
        }
    }

    fn retire_marks(&self, st: &mut State) {
        while let Some(m) = st.marks.pop_front() {
            st.pool.push(m.event);
        }
    }

    /// Under the lock: the host waits for every copy issued so far and learns each one's outcome
    /// from the marks that cover it.
    fn settle_by_marks(&self, st: &mut State) {
        self.flush(st);
        if st.landed == st.issued && st.injected.is_empty() {
            return self.retire_marks(st);
        }
        if st.marks.back().is_none_or(|m| m.through < st.issued) {
            self.record_mark(st);
        }
        while let Some(m) = st.marks.pop_front() {
            let e = self.gpu.event_synchronize(m.event).err().unwrap_or(SUCCESS);
            self.settle_through(st, m.through, e);
            st.pool.push(m.event);
        }
    }

    fn failed_in(st: &State, seq: u64) -> Code {
        st.failures.iter().find(|f| seq >= f.first && seq <= f.last).map_or(SUCCESS, |f| f.error)
    }

    /// Under the lock: how copy `seq` ended, or `NOT_READY`. Retires the marks that completed;
    /// when none covers `seq`, records one after every copy issued.
    fn outcome_of(&self, st: &mut State, seq: u64) -> Code {
        while seq > st.landed {
            let Some(m) = st.marks.front() else { break };
            let e = match self.gpu.event_query(m.event) {
                Err(NOT_READY) => break,
                r => r.err().unwrap_or(SUCCESS),
            };
            let m = st.marks.pop_front().expect("a mark");
            self.settle_through(st, m.through, e);
            st.pool.push(m.event);
        }
        if seq <= st.landed {
            return Self::failed_in(st, seq);
        }
        if st.marks.back().is_none_or(|m| m.through < seq) {
            self.record_mark(st);
        }
        if seq <= st.landed { Self::failed_in(st, seq) } else { NOT_READY }
    }

    /// How ticket `t` ended: `SUCCESS`, a CUDA error, or `NOT_READY`. Asking again after it ended
    /// gives the same answer until [`Engine::complete`]. `asked`: the caller's slot for this
    /// ticket (0 at first): the polls of a flood, run back to back, ask CUDA once per round and
    /// the others, covered by a pending mark, take `NOT_READY` until each comes round again.
    ///
    /// `asked` `None`: no slot, CUDA is asked at every poll. A ticket that landed answers from
    /// what the engine knows and starts no round (polling it again never hides the others).
    /// `Err(Forked)` in a fork() child: nothing reaches CUDA there.
    pub fn poll(&self, t: u64, asked: Option<&mut u64>) -> Result<Code> {
        self.refuse_forked()?;
        if t & EVENT_TICKET != 0 {
            return Ok(self.poll_watched(t));
        }
        let mut st = self.lock();
        if t == 0 || t > st.issued {
            return Ok(UNKNOWN); // never issued: nothing to wait for
        }
        if t <= st.landed {
            return Ok(Self::failed_in(&st, t));
        }
        if let Some(asked) = asked {
            if *asked != st.asked && st.marks.back().is_some_and(|m| m.through >= t) {
                *asked = st.asked;
                return Ok(NOT_READY);
            }
            st.asked += 1;
            *asked = st.asked;
        } else {
            st.asked += 1;
        }
        Ok(self.outcome_of(&mut st, t))
    }

    fn poll_watched(&self, t: u64) -> Code {
        let mut st = self.lock();
        if let Some(e) = self.word_outcome(&mut st, t, false) {
            return e;
        }
        let Some(w) = st.watched.get(&t) else {
            return UNKNOWN; // completed already, or never issued: nothing to wait for
        };
        if w.result != NOT_READY || w.event == 0 {
            return w.result;
        }
        let ev = w.event;
        let e = match self.gpu.event_query(ev) {
            Err(NOT_READY) => return NOT_READY,
            r => r.err().unwrap_or(SUCCESS),
        };
        let released = st.released;
        let w = st.watched.get_mut(&t).expect("watched");
        w.result = e;
        w.event = 0;
        if w.on_own_device && !released {
            st.pool.push(ev);
        } else {
            self.gpu.event_destroy(ev);
        }
        e
    }

    /// Settles ticket `t`, whose poll gave `e` (once per ticket). A failure is recorded (the
    /// first one's text for [`Engine::take_error`]) and, while the engine is open and the
    /// ticket is a copy, the caller is to redo it: [`Settled::Redo`]. `what` names the copy in
    /// the text.
    ///
    /// `Err(InvalidArgument)` for a ticket never issued, one settled already (a failed copy's, a
    /// caller's stream's), or one not over; `Err(Forked)` in a fork() child.
    pub fn complete(&self, t: u64, e: Code, what: &CopyReq) -> Result<Settled> {
        self.refuse_forked()?;
        let mut st = self.lock();
        let w = if t & EVENT_TICKET != 0 {
            match st.watched.remove(&t) {
                Some(w) => Some(w),
                None => return Err(unknown_ticket(t)),
            }
        } else {
            if t == 0 || t > st.issued {
                return Err(unknown_ticket(t));
            }
            if t > st.landed {
                return Err(Error::new(Status::InvalidArgument, format!("ticket {t} is not over (its copy has not landed)")));
            }
            if e == SUCCESS {
                return Ok(Settled::Landed); // nothing kept for a landed copy of the engine's stream
            }
            if Self::failed_in(&st, t) != SUCCESS {
                if st.settled_failed.contains(&t) {
                    return Err(Error::new(Status::InvalidArgument, format!("ticket {t} was settled already")));
                }
                st.settled_failed.insert(t);
            }
            None
        };
        if let Some(w) = &w
            && w.event != 0
            && !self.forked()
        {
            self.gpu.event_destroy(w.event); // never settled (the caller gave up on it)
        }
        if e == SUCCESS {
            return Ok(Settled::Landed);
        }
        let is_wait = w.as_ref().is_some_and(|w| w.is_wait);
        let batch = w.as_ref().is_some_and(|w| w.batch);
        // Named from the outcome the engine learned from the GPU (the caller's `e` is only a
        // number to the engine: a value the driver did not give is not named).
        let own = if t & EVENT_TICKET != 0 { w.as_ref().map_or(NOT_READY, |w| w.result) } else { Self::failed_in(&st, t) };
        let name = if own != SUCCESS && own != NOT_READY { self.gpu.result_name(own) } else { format!("CUDA error {e}") };
        if is_wait {
            if st.error.is_empty() {
                st.error = format!(
                    "the work queued on the stream before after() ended with a CUDA error ({name}); the wait completed \
                     regardless"
                );
            }
            return Ok(Settled::Report);
        }
        if batch {
            if st.error.is_empty() {
                st.error = format!(
                    "a batch of copies on a caller's stream (copy_on_stream) failed after it was issued ({name}); the \
                     work queued there after it did not see its bytes, and it was not redone"
                );
            }
            return Ok(Settled::Report);
        }
        let redo = !self.closed.load(Ordering::SeqCst);
        if t & EVENT_TICKET == 0
            && let Some(f) = st.failures.iter_mut().find(|f| t >= f.first && t <= f.last)
        {
            f.redone += u64::from(redo);
        }
        if st.error.is_empty() {
            st.error = format!(
                "the {} failed after it was issued ({}){}{}",
                Self::describe(what),
                name,
                if t & EVENT_TICKET != 0 {
                    "; it was on a caller's stream (copy_on_stream): the work queued there after it did not see its bytes"
                } else {
                    ""
                },
                if redo { "; it was redone" } else { "; the engine was closed, so it was only reported" }
            );
        }
        Ok(if redo { Settled::Redo } else { Settled::Report })
    }

    /// The first failure since the last call ("" when none).
    pub fn take_error(&self) -> String {
        std::mem::take(&mut self.lock().error)
    }

    /// The host waits for every copy issued so far; their outcomes are known from here on.
    pub fn wait_all(&self) -> Result<()> {
        self.refuse_forked()?;
        let mut st = self.lock();
        if st.released {
            return Ok(());
        }
        self.wait_watched(&mut st);
        if st.stream.is_some() {
            self.settle_by_marks(&mut st);
        }
        Ok(())
    }

    /// Under the lock: the host waits for the copies on callers' streams (their words, or
    /// events): a word stops the wait when it landed or the context reports a fault.
    fn wait_watched(&self, st: &mut State) {
        let copies: Vec<u64> = st.watched.iter().filter(|(_, w)| !w.is_wait && w.result == NOT_READY).map(|(t, _)| *t).collect();
        for t in copies {
            if let Some(ev) = st.watched.get(&t).map(|w| w.event).filter(|e| *e != 0) {
                let _ = self.gpu.event_synchronize(ev);
                continue;
            }
            while self.word_outcome(st, t, true) == Some(NOT_READY) {
                spin();
            }
        }
    }

    /// No copy is issued from here on, and a failure is no longer to be redone.
    pub fn close(&self) {
        let _st = self.lock();
        self.closed.store(true, Ordering::SeqCst);
    }
    /// Undoes [`Engine::close`] (before [`Engine::drain`]).
    pub fn reopen(&self) {
        let st = self.lock();
        if !st.released {
            self.closed.store(false, Ordering::SeqCst);
        }
    }

    /// Closes the engine, releases the stream tickets not done (the streams waiting for them go
    /// on), waits until every copy issued so far has landed, and releases the stream and the
    /// pooled events (polls still answer). Returns how many failed copies were
    /// not redone (their completions do not mean the bytes landed). In a fork() child: closes
    /// only, touching no CUDA object and no lock.
    pub fn drain(&self) -> u64 {
        if self.forked() {
            self.closed.store(true, Ordering::SeqCst);
            return 0;
        }
        let mut st = self.lock();
        self.closed.store(true, Ordering::SeqCst);
        if st.released {
            return 0;
        }
        st.released = true;
        // A stream ticket still pending (UPC++ progress will not come: its copy is over or
        // abandoned) is released here, so no stream waits for it and no wait below hangs.
        if st.tickets_done != st.tickets_issued {
            st.tickets_done = st.tickets_issued;
            st.tickets_out_of_order.clear();
            if let Some((host, _)) = st.flag {
                write_word(host, st.tickets_done);
            }
        }
        self.wait_watched(&mut st);
        let Some(stream) = st.stream else { return 0 };
        if !planted::on(planted::DRAIN_BEFORE_IDLE) {
            self.settle_by_marks(&mut st);
        }
        for e in std::mem::take(&mut st.pool) {
            self.gpu.event_destroy(e);
        }
        self.gpu.stream_destroy(self.device, stream);
        st.stream = None;
        st.failures.iter().map(|f| f.last - f.first + 1 - f.redone).sum()
    }

    /// A ticket for work outside the engine (an `upcxx::copy`) that streams may wait for
    /// ([`Engine::stream_waits_for`]); [`Engine::ticket_done`] when it is over.
    pub fn stream_ticket(&self) -> u32 {
        let mut st = self.lock();
        st.tickets_issued = st.tickets_issued.wrapping_add(1);
        st.tickets_issued
    }

    /// Ticket `t` is done: the word the waiting streams read advances over every ticket done in
    /// issue order.
    /// `Err(InvalidArgument)` for a ticket [`Engine::stream_ticket`] never gave, or one done
    /// already: nothing changes.
    pub fn ticket_done(&self, t: u32) -> Result<()> {
        let mut st = self.lock();
        // Issued and not done: done < t <= issued, in wrapping order.
        let ahead = t.wrapping_sub(st.tickets_done);
        if ahead == 0 || ahead > st.tickets_issued.wrapping_sub(st.tickets_done) || st.tickets_out_of_order.contains(&t) {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("stream ticket {t} was never issued by this engine, or is done already (ticket_done once per ticket_new)"),
            ));
        }
        st.tickets_out_of_order.push(t);
        let mut moved = true;
        while moved {
            moved = false;
            let mut i = 0;
            while i < st.tickets_out_of_order.len() {
                if st.tickets_out_of_order[i] == st.tickets_done.wrapping_add(1) {
                    st.tickets_done = st.tickets_done.wrapping_add(1);
                    st.tickets_out_of_order.swap_remove(i);
                    moved = true;
                } else {
                    i += 1;
                }
            }
        }
        if let Some((host, _)) = st.flag {
            write_word(host, st.tickets_done);
        }
        Ok(())
    }

    /// Whether a ticket is not done yet.
    pub fn tickets_pending(&self) -> bool {
        let st = self.lock();
        st.tickets_done != st.tickets_issued
    }

    /// Whether ticket `t` is done.
    pub fn ticket_done_by(&self, t: u32) -> bool {
        self.lock().tickets_done.wrapping_sub(t) as i32 >= 0
    }

    /// The work queued on `s` after the call waits, on the GPU, until ticket `t` is done. An
    /// error when the driver cannot enqueue that wait (the caller then waits on the host).
    pub fn stream_waits_for(&self, s: Handle, t: u32) -> Result<()> {
        self.refuse_forked()?;
        let dev = {
            let mut st = self.lock();
            if st.flag.is_none() {
                let w = self.gpu.mapped_word(self.device).map_err(|c| {
                    Error::new(Status::CudaError, format!("mapping a word of host memory failed: {}", self.gpu.result_name(c)))
                })?;
                write_word(w.0, st.tickets_done);
                st.flag = Some(w);
            }
            st.flag.expect("the flag").1
        };
        let d = self.gpu.stream_device(s);
        self.gpu
            .stream_wait_value32(if d >= 0 { d } else { self.device }, s, dev, t)
            .map_err(|why| Error::new(Status::CudaError, format!("the stream cannot wait for the ticket: {why}")))
    }
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

/// The mapped word at host address `host` (written by a stream).
#[allow(unsafe_code)]
fn read_word(host: usize) -> u32 {
    // SAFETY: `host` is a word of a block this engine mapped, kept for the process's life.
    unsafe { (*(host as *const std::sync::atomic::AtomicU32)).load(std::sync::atomic::Ordering::Acquire) }
}

/// A host wait's pause between two looks at a word.
fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::sleep(std::time::Duration::from_micros(20));
}

/// Stores `v` in the mapped word at host address `host` (read by the GPU).
#[allow(unsafe_code)]
fn write_word(host: usize, v: u32) {
    // SAFETY: `host` is the mapped word this engine owns for the process's life, aligned to 64.
    unsafe { (*(host as *const std::sync::atomic::AtomicU32)).store(v, std::sync::atomic::Ordering::Release) }
}

impl<G: Gpu> Drop for Engine<G> {
    fn drop(&mut self) {
        if self.forked() {
            return; // the parent's CUDA objects are not this process's: forgotten
        }
        let _ = self.drain();
        let st = self.lock();
        for w in st.watched.values() {
            if w.event != 0 {
                self.gpu.event_destroy(w.event);
            }
        }
    }
}
