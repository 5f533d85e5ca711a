//! The copy engine's protocol. Generic over [`Gpu`], the few CUDA operations it uses: the library
//! runs it over the CUDA driver (`super::driver`), the loom model (`tests/loom/`) over a model
//! GPU. Imports only `crate::error` and the model's sync types, so the model compiles it as it is.
//!
//! One module per concept, each owning its part of the engine's state (one lock, [`State`]):
//! - [`gpu`]: the GPU the engine runs over ([`Gpu`]), a copy as asked ([`CopyReq`]), the outcomes.
//! - `batch`: the engine's own stream: copies issued there in order, small ones batched.
//! - `marks`: the events recorded on that stream and the outcomes they settle (copy tickets).
//! - `on_stream`: copies on callers' streams and waits for them (caller tickets).
//! - `words`: the pool of mapped words those streams write, and how a fault is noticed.
//! - `gate`: the word callers' streams wait on for `upcxx::copy` calls (gate tickets).
//!
//! This file: the engine itself (its life, `copy`, `poll`, `complete`, `drain`) and fork safety.
//!
//! Three kinds of ticket, each with its type: a [`CopyTicket`] (a copy on the engine's stream, its
//! sequence number), a [`CallerTicket`] (a copy or wait on a caller's stream, high bit set) and a
//! [`GateTicket`] (an `upcxx::copy` a stream waits for).
//!
//! The caller learns a copy's outcome from [`Engine::poll`] and settles it once with
//! [`Engine::complete`], which records the first failure's text and says whether the caller may
//! redo the copy (the engine is still open) or must only report it.

use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};

use crate::error::{Error, Result, Status};

mod batch;
mod gate;
pub mod gpu;
mod marks;
mod on_stream;
mod words;

pub use gpu::*;
/// The loom models size their copies on a caller's stream by it.
#[cfg(loom)]
pub use on_stream::ON_STREAM_KERNEL_MAX;
pub use words::WordWatch;

/// A copy on the engine's stream: its sequence number (1, 2, ...).
pub type CopyTicket = u64;
/// A copy or a wait on a caller's stream: [`CALLER_TICKET`] set.
pub type CallerTicket = u64;
/// An `upcxx::copy` that callers' streams wait for ([`Engine::stream_ticket`]).
pub type GateTicket = u32;
/// The bit that tells a [`CallerTicket`] from a [`CopyTicket`].
pub const CALLER_TICKET: u64 = 1 << 63;

/// The engine's state, under its one lock: each part is its module's.
#[derive(Default)]
struct State {
    batch: batch::Batch,
    marks: marks::Marks,
    callers: on_stream::Callers,
    words: words::Words,
    gate: gate::Gate,
    /// The first failure's text since the last `take_error`.
    error: String,
    /// Drained: the stream and the events are released.
    released: bool,
}

/// The copy engine of one device. Every method may be called from any thread.
pub struct Engine<G: Gpu> {
    gpu: G,
    device: i32,
    generation: u32,
    batch_bytes: AtomicUsize,
    batching: AtomicBool,
    closed: AtomicBool,
    /// The copy counts: written only under the lock ([`Engine::count`]), read without it.
    fast: AtomicUsize,
    batched: AtomicUsize,
    /// `State::marks.landed`, mirrored (written under the lock where it is raised): lets
    /// [`Engine::complete`] settle a landed copy of the engine's stream without the lock.
    landed: AtomicU64,
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
            landed: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        }
    }

    /// Whether this process is a fork() child of the one that made the engine.
    pub fn forked(&self) -> bool {
        self.gpu.fork_generation() != self.generation
    }

    /// FORKED in a fork() child of the process that made the engine (the one check of every call
    /// that needs CUDA, the C++ layer's included), with the one message for it.
    pub fn refuse_forked(&self) -> Result<()> {
        if self.forked() {
            return Err(Error::new(
                Status::Forked,
                "this process is a fork() child of the one that made the heap; neither CUDA nor UPC++ survive fork(), so \
                 nothing was done (copy in the parent, or exec() a program that initialises UPC++ and NVSHMEM itself; \
                 destroy() here only forgets the child's copy of the heap)",
            ));
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The largest copy batched from the next copy on (0: none; 0 also once a launch failed).
    pub fn batch_bytes(&self) -> usize {
        if self.batching.load(Ordering::Relaxed) { self.batch_bytes.load(Ordering::Relaxed) } else { 0 }
    }

    pub fn set_batch_bytes(&self, n: usize) {
        self.batch_bytes.store(n, Ordering::Relaxed);
    }

    /// Read without the lock: never blocks (in a fork() child either, where a thread that held
    /// the lock at fork() is gone).
    pub fn counts(&self) -> Counts {
        Counts { fast: self.fast.load(Ordering::Relaxed), batched: self.batched.load(Ordering::Relaxed) }
    }

    /// Under the lock (`_st`, its guard's state: the counts' one writer at a time): `fast` more
    /// copies issued, `batched` of them moved by a launch. A load and a store each, not an atomic
    /// read-modify-write: nothing on the copy path waits for the other cores.
    fn count(&self, _st: &State, fast: usize, batched: usize) {
        self.fast.store(self.fast.load(Ordering::Relaxed) + fast, Ordering::Relaxed);
        self.batched.store(self.batched.load(Ordering::Relaxed) + batched, Ordering::Relaxed);
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
        if r.flags & ON_STREAM != 0 { self.issue_on_stream(r) } else { self.issue(r) }
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
        if t & CALLER_TICKET != 0 {
            return Ok(self.poll_watched(t));
        }
        let mut st = self.lock();
        if t == 0 || t > st.batch.issued {
            return Ok(UNKNOWN); // never issued: nothing to wait for
        }
        if t <= st.marks.landed {
            return Ok(Self::failed_in(&st, t));
        }
        if let Some(asked) = asked {
            if *asked != st.marks.asked && st.marks.pending.back().is_some_and(|m| m.through >= t) {
                *asked = st.marks.asked;
                return Ok(NOT_READY);
            }
            st.marks.asked += 1;
            *asked = st.marks.asked;
        } else {
            st.marks.asked += 1;
        }
        Ok(self.outcome_of(&mut st, t))
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
        // The usual case, a landed copy of the engine's stream: nothing is kept for it, and a
        // ticket up to the mirror of `marks.landed` was issued and is over (the checks below). A
        // caller's ticket, with CALLER_TICKET's bit, is above any count of copies.
        if e == SUCCESS && t != 0 && t <= self.landed.load(Ordering::Acquire) {
            return Ok(Settled::Landed);
        }
        let mut st = self.lock();
        let w = if t & CALLER_TICKET != 0 {
            match st.callers.watched.remove(&t) {
                Some(w) => Some(w),
                None => return Err(unknown_ticket(t)),
            }
        } else {
            if t == 0 || t > st.batch.issued {
                return Err(unknown_ticket(t));
            }
            if t > st.marks.landed {
                return Err(Error::new(Status::InvalidArgument, format!("ticket {t} is not over (its copy has not landed)")));
            }
            if e == SUCCESS {
                return Ok(Settled::Landed); // nothing kept for a landed copy of the engine's stream
            }
            if Self::failed_in(&st, t) != SUCCESS {
                if st.marks.settled.contains(&t) {
                    return Err(Error::new(Status::InvalidArgument, format!("ticket {t} was settled already")));
                }
                st.marks.settled.insert(t);
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
        let kind = w.as_ref().map(|w| w.kind);
        // Named from the outcome the engine learned from the GPU (the caller's `e` is only a
        // number to the engine: a value the driver did not give is not named).
        let own = if t & CALLER_TICKET != 0 { w.as_ref().map_or(NOT_READY, |w| w.result) } else { Self::failed_in(&st, t) };
        let name = if own != SUCCESS && own != NOT_READY { self.gpu.result_name(own) } else { format!("CUDA error {e}") };
        if kind == Some(on_stream::Kind::Wait) {
            if st.error.is_empty() {
                st.error = format!(
                    "the work queued on the stream before after() ended with a CUDA error ({name}); the wait completed \
                     regardless"
                );
            }
            return Ok(Settled::Report);
        }
        if kind == Some(on_stream::Kind::Batch) {
            if st.error.is_empty() {
                st.error = format!(
                    "a batch of copies on a caller's stream (copy_on_stream) failed after it was issued ({name}); the \
                     work queued there after it did not see its bytes, and it was not redone"
                );
            }
            return Ok(Settled::Report);
        }
        let redo = !self.closed.load(Ordering::SeqCst);
        if t & CALLER_TICKET == 0
            && let Some(f) = st.marks.failures.iter_mut().find(|f| f.covers(t))
        {
            f.redone += u64::from(redo);
        }
        if st.error.is_empty() {
            st.error = format!(
                "the {} failed after it was issued ({}){}{}",
                Self::describe(what),
                name,
                if t & CALLER_TICKET != 0 {
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
        if st.batch.stream.is_some() {
            self.settle_by_marks(&mut st);
        }
        Ok(())
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
        if st.gate.done != st.gate.issued {
            st.gate.done = st.gate.issued;
            st.gate.out_of_order.clear();
            if let Some((host, _)) = st.gate.flag {
                gate::write_word(host, st.gate.done);
            }
        }
        self.wait_watched(&mut st);
        if st.batch.stream.is_some() {
            self.settle_by_marks(&mut st);
        }
        // The pool also holds the events of copies on callers' streams, with or without a stream
        // of the engine's own.
        for e in std::mem::take(&mut st.marks.events) {
            self.gpu.event_destroy(e);
        }
        let Some(stream) = st.batch.stream else { return 0 };
        self.gpu.stream_destroy(self.device, stream);
        st.batch.stream = None;
        st.marks.failures.iter().map(|f| f.last - f.first + 1 - f.redone).sum()
    }
}

impl<G: Gpu> Drop for Engine<G> {
    fn drop(&mut self) {
        if self.forked() {
            return; // the parent's CUDA objects are not this process's: forgotten
        }
        let _ = self.drain();
        let st = self.lock();
        for w in st.callers.watched.values() {
            if w.event != 0 {
                self.gpu.event_destroy(w.event);
            }
        }
    }
}
