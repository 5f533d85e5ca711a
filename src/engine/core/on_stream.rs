//! Copies on callers' streams (`copy_on_stream`, one copy or a batch of them) and waits for
//! callers' streams (`after`): each a [`CallerTicket`](super::CallerTicket), told by a word the
//! stream writes ([`super::words`]; for a batch ending with a launch, the launch writes it),
//! except two: a single `copy_on_stream` (one launch of the copy kernel, or one `cuMemcpyAsync`)
//! is told by an event recorded after it (cheaper than a stream write, and sooner than the
//! kernel's own word), and where the driver refuses a stream write an event recorded after the
//! work tells the outcome. A stream of another device gets the copies on the engine's stream
//! between two events.

use super::gpu::*;
use super::words::Word;
use super::{CALLER_TICKET, CallerTicket, Engine, State, closed_error};
use crate::error::{Error, Result, Status};
use crate::sync::Ordering;
use std::collections::BTreeMap;

/// A ticket whose outcome a word the stream writes (or an event on it) tells.
pub(super) struct Watched {
    pub(super) event: Handle, // 0 once settled, or with a word
    pub(super) result: Code,  // NOT_READY until settled
    pub(super) kind: Kind,
    pub(super) on_own_device: bool, // a copy_on_stream copy on a stream of the engine's device (pooled event)
    pub(super) word: Option<Word>,  // the word the stream writes; None once seen (or given up: never reused)
}

/// What a ticket of a caller's stream stands for: what its failure means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// `after()`: no copy; a failure of the stream's work is reported, the wait completes.
    Wait,
    /// One `copy_on_stream` copy: a failure is redone while the engine is open.
    Copy,
    /// `copies_on_stream`: a failure is reported, never redone.
    Batch,
}

/// The tickets of callers' streams.
#[derive(Default)]
pub(super) struct Callers {
    /// By ticket, so in issue order: a host wait and the destructor go through them in one order
    /// on every run (the loom model replays schedules).
    pub(super) watched: BTreeMap<u64, Watched>,
    /// The last ticket's number (without [`CALLER_TICKET`]).
    pub(super) next: u64,
}

/// The flags of a copy on a caller's stream of another device, issued on the engine's stream
/// instead: ordered after the caller's work (`AFTER_STREAM`), never in the batch.
fn on_engines_stream(flags: u32) -> u32 {
    flags & NOT_ON_ENGINES_STREAM | AFTER_STREAM
}
/// The largest copy on a caller's stream that is one launch of the copy kernel (then an event)
/// rather than a `cuMemcpyAsync`: above it the driver's copy moves the bytes sooner (1 x H100:
/// 0.95x the kernel's time at 64 MiB, the same at 16 MiB; BENCHMARKS.md section 22).
pub const ON_STREAM_KERNEL_MAX: usize = 4 << 20;

/// The flags [`on_engines_stream`] clears.
const NOT_ON_ENGINES_STREAM: u32 = !(ON_STREAM | DEVICE_ENDS);

impl<G: Gpu> Engine<G> {
    pub(super) fn issue_on_stream(&self, r: &CopyReq) -> Result<u64> {
        if self.gpu.stream_device(r.stream) != self.device {
            // On the engine's stream after the caller's work; the caller's stream waits for it.
            let seq = self.issue(&CopyReq { flags: on_engines_stream(r.flags), ..*r })?;
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
        // Device memory at both ends, with batching on (docs/streams.md, "What copy_on_stream
        // costs"): up to ON_STREAM_KERNEL_MAX one launch of the copy kernel, then an event (the
        // host pays less for a launch than for a cuMemcpyAsync; the event lets a lone copy finish
        // sooner than the kernel's own completion word, whose system-scope fence and store to host
        // memory the copy waits for: 1 x H100, BENCHMARKS.md section 24). Any other copy, or a
        // launch the driver refuses, is one cuMemcpyAsync then an event.
        let device_ends = r.flags & DEVICE_ENDS != 0 && r.bytes > 0 && self.batch_bytes() > 0;
        let desc = [Desc { src: r.src, dst: r.dst, bytes: r.bytes }];
        let launched = device_ends && r.bytes <= ON_STREAM_KERNEL_MAX && self.gpu.launch_batch(self.device, r.stream, &desc, None).is_ok();
        if !launched && let Err(e) = self.gpu.memcpy_async(r.dst, r.src, r.bytes, r.stream, Some(self.device)) {
            return Err(Error::new(
                Status::CudaError,
                format!("issuing the {} on the caller's stream failed: {}", Self::describe(r), self.gpu.result_name(e)),
            ));
        }
        self.count(&st, 1, usize::from(launched));
        let (event, result) = self.event_after(&mut st, r.stream);
        Ok(Self::watch(&mut st, Watched { event, result, kind: Kind::Copy, on_own_device: true, word: None }))
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
    pub fn copy_batch_on_stream(&self, s: Handle, reqs: &[CopyReq]) -> Result<CallerTicket> {
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
            if st.batch.stream.is_none() {
                let made = self.gpu.stream_create(self.device).map_err(|c| {
                    Error::new(Status::CudaError, format!("creating the engine's stream failed: {}", self.gpu.result_name(c)))
                })?;
                st.batch.stream = Some(made);
            }
            self.flush(&mut st);
            let e = self.order_after(&st, s);
            if e != SUCCESS {
                return Err(Error::new(
                    Status::CudaError,
                    format!("ordering the copies after the caller's stream failed: {}", self.gpu.result_name(e)),
                ));
            }
            st.batch.stream.unwrap_or(0)
        };
        // The last launch writes the ticket's word itself, when the batch ends with one.
        let signal = self.take_signal(&mut st);
        let put = self.put_in_order(target, reqs, signal.map(|s| s.1));
        if let Some((w, _)) = signal
            && !matches!(put, Ok((_, true)))
        {
            st.words.free.push(w); // not launched with it: nothing will write it
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
        self.count(&st, reqs.len(), batched);
        let signalled = signal.filter(|_| signalled).map(|(w, sig)| Self::watch_taken(&mut st, w, sig.value, self.device, Kind::Batch));
        let t = if let Some(t) = signalled {
            t
        } else {
            match self.watch_word(&mut st, target, Some(self.device), self.device, Kind::Batch) {
                Ok(t) => t,
                Err(_) => {
                    let (event, result) = self.event_after(&mut st, target);
                    Self::watch(&mut st, Watched { event, result, kind: Kind::Batch, on_own_device: true, word: None })
                }
            }
        };
        if !own {
            self.follow_or_wait(&mut st, s, target);
        }
        Ok(t)
    }

    /// `reqs` onto `target` in order (no lock needed: the caller's stream, or the engine's under
    /// the lock). With `signal`, a launch that is the last operation also writes that word. The
    /// number of copies launches moved and whether `signal` went with one, or the index of the
    /// copy the driver refused and why.
    pub(super) fn put_in_order(
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
            if r.bytes == 0 {
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

    /// Under the lock, where no stream write could be enqueued after copies issued on `stream` (of
    /// the engine's device): a pooled event recorded after them, NOT_READY; or, when none can be
    /// recorded, the host waits for the stream and the outcome is its result (no event).
    fn event_after(&self, st: &mut State, stream: Handle) -> (Handle, Code) {
        let ev = self.pooled_event(st);
        match ev.map(|ev| (ev, self.gpu.event_record(ev, stream, Some(self.device)))) {
            Some((ev, Ok(()))) => (ev, NOT_READY),
            other => {
                if let Some((ev, _)) = other {
                    self.gpu.event_destroy(ev); // its state is unknown: not back to the pool
                }
                (0, self.gpu.stream_synchronize(stream, Some(self.device)).err().unwrap_or(SUCCESS))
            }
        }
    }

    pub(super) fn watch(st: &mut State, w: Watched) -> CallerTicket {
        st.callers.next += 1;
        let t = CALLER_TICKET | st.callers.next;
        st.callers.watched.insert(t, w);
        t
    }

    /// A ticket that is over once the work queued on `s` before the call is: an event recorded
    /// on `s` in the calling thread's context, else in the context of `s`'s device.
    pub fn after(&self, s: Handle) -> Result<CallerTicket> {
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
            if let Ok(t) = self.watch_word(&mut st, s, None, self.device, Kind::Wait) {
                return Ok(t);
            }
            let d = self.gpu.stream_device(s);
            if d >= 0
                && let Ok(t) = self.watch_word(&mut st, s, Some(d), d, Kind::Wait)
            {
                return Ok(t);
            }
        }
        let ev = self.record_on(s)?;
        let mut st = self.lock();
        Ok(Self::watch(&mut st, Watched { event: ev, result: NOT_READY, kind: Kind::Wait, on_own_device: false, word: None }))
    }

    /// [`check_stream`] with this engine's GPU.
    pub fn check_stream(&self, s: Handle) -> Result<()> {
        check_stream(&self.gpu, s)
    }

    pub(super) fn record_on(&self, s: Handle) -> Result<Handle> {
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
    pub(super) fn order_after(&self, st: &State, after: Handle) -> Code {
        let stream = st.batch.stream.unwrap_or(0);
        let Ok(ev) = self.record_on(after) else {
            return self.gpu.stream_synchronize(after, None).err().unwrap_or(SUCCESS);
        };
        let r = self.gpu.stream_wait_event(stream, ev, Some(self.device)).err().unwrap_or(SUCCESS);
        self.gpu.event_destroy(ev); // the driver releases it once the wait is satisfied
        r
    }

    /// Under the lock: `s` waits, on the GPU, for the work issued on `target` (the engine's
    /// stream) so far; where it cannot be made to, the host waits for `target`.
    fn follow_or_wait(&self, st: &mut State, s: Handle, target: Handle) {
        if self.follow_stream(st, s).is_err() {
            let _ = self.gpu.stream_synchronize(target, Some(self.device));
        }
    }

    /// Under the lock: `s` waits, on the GPU, for everything issued on the engine's stream so far.
    pub(super) fn follow_stream(&self, st: &mut State, s: Handle) -> std::result::Result<(), Code> {
        self.flush(st);
        let ev = self.gpu.event_create(Some(self.device))?;
        let r = self
            .gpu
            .event_record(ev, st.batch.stream.unwrap_or(0), Some(self.device))
            .and_then(|()| self.gpu.stream_wait_event(s, ev, None));
        self.gpu.event_destroy(ev);
        r
    }

    pub(super) fn poll_watched(&self, t: u64) -> Code {
        let mut st = self.lock();
        if let Some(e) = self.word_outcome(&mut st, t, false) {
            return e;
        }
        let Some(w) = st.callers.watched.get(&t) else {
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
        let w = st.callers.watched.get_mut(&t).expect("watched");
        w.result = e;
        w.event = 0;
        if w.on_own_device && !released {
            st.marks.events.push(ev);
        } else {
            self.gpu.event_destroy(ev);
        }
        e
    }

    /// Under the lock: the host waits for the copies on callers' streams (their words, or
    /// events): a word stops the wait when it landed or the context reports a fault.
    pub(super) fn wait_watched(&self, st: &mut State) {
        let copies: Vec<u64> =
            st.callers.watched.iter().filter(|(_, w)| w.kind != Kind::Wait && w.result == NOT_READY).map(|(t, _)| *t).collect();
        for t in copies {
            if let Some(ev) = st.callers.watched.get(&t).map(|w| w.event).filter(|e| *e != 0) {
                let _ = self.gpu.event_synchronize(ev);
                continue;
            }
            while self.word_outcome(st, t, true) == Some(NOT_READY) {
                crate::sync::pause(); // between two looks at the word
            }
        }
    }
}
