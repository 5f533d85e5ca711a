//! The engine's watcher: one host thread per engine, started at the first ticket parked with it,
//! that learns when each parked ticket is over and then calls the ticket's wake. A caller that
//! parks a ticket stops polling it: the C++ layer parks an `after()` or `copies_on_stream` wait
//! whose first poll found it not ready, and its wake queues that poll again (an LPC) on the
//! initiator persona, so `upcxx::progress()` returns at once while the stream works instead of
//! polling the ticket until it lands (UPC++ has no hook for a poll that is not an LPC).
//!
//! How the thread learns it, without the engine's lock for a ticket whose stream writes a word:
//! a load of the word each round ([`WordWatch::landed`]), and a poll of the engine
//! ([`Engine::poll`], which also asks the context for a fault) at most once per
//! [`POLL_WORD_EVERY`]; a ticket an event tells is polled each round. Between rounds with
//! nothing over the thread yields the core; once nothing has been over for [`SPIN_FOR`], it
//! sleeps [`NAP`] between rounds. With nothing parked it sleeps on a condition variable.
//!
//! A wake is called once per ticket, from the watcher thread, once the ticket's poll answers other
//! than not ready (or when the engine is freed: see [`Watcher::stop`]). It must not call into the
//! engine (the thread holds no lock while it runs it, but the engine may be being freed); it
//! returns false when it could not take the ticket now, and is called again a round later.
//!
//! At process exit (an `atexit` handler, registered at the first start: it runs before CUDA's own
//! teardown, registered earlier) every watcher finishes its round and stops for good, waking
//! nothing: a wait still parked then (never waited for) touches neither CUDA nor UPC++ again.
//!
//! Not in the loom model: the engine's protocol (`core`) is, and the watcher only polls it as any
//! caller does.

use super::core::{Engine, Gpu, NOT_READY, WordWatch};
use crate::error::{Error, Result, Status};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A ticket whose stream writes a word is polled through the engine (a fault, a word reused)
/// at most this often; its word is read every round.
pub const POLL_WORD_EVERY: Duration = Duration::from_millis(1);
/// After this long with no parked ticket over, the thread naps between rounds...
pub const SPIN_FOR: Duration = Duration::from_millis(2);
/// ... this long.
pub const NAP: Duration = Duration::from_micros(20);

/// Set at process exit: every watcher stops at its next round.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Held (shared) by each watcher's round; taken (exclusive) at exit, so the exit waits for the
/// rounds under way.
static ROUNDS: RwLock<()> = RwLock::new(());

extern "C" fn at_exit() {
    EXITING.store(true, Ordering::Release);
    drop(ROUNDS.write().unwrap_or_else(PoisonError::into_inner));
}

/// What the watcher calls once a parked ticket is over: true when it took it, false when it could
/// not now (called again a round later).
pub type Wake = Box<dyn FnMut() -> bool + Send>;

struct Parked {
    ticket: u64,
    word: Option<WordWatch>,
    wake: Wake,
    /// When the engine is polled for it next.
    next_poll: Instant,
}

impl Parked {
    /// Whether to poll the engine for it this round: its word landed, or its time came (a word's
    /// ticket at most once per [`POLL_WORD_EVERY`]; an event's every round). Decides how soon a
    /// wake follows the stream and how often the watcher takes the engine's lock, never whether.
    fn due(&self, now: Instant) -> bool {
        self.word.is_some_and(|w| w.landed()) || now >= self.next_poll
    }

    /// The engine said not ready at `now`: when to ask it next (see [`Parked::due`]).
    fn polled(&mut self, now: Instant) {
        self.next_poll = if self.word.is_some() { now + POLL_WORD_EVERY } else { now };
    }
}

#[derive(Default)]
struct Shared {
    /// Tickets parked since the thread last took them.
    queue: Mutex<Vec<Parked>>,
    ready: Condvar,
    stop: AtomicBool,
    /// Parked and not yet woken (taken by their wake).
    parked: AtomicUsize,
}

/// The watcher of one engine. Every method may be called from any thread.
pub struct Watcher<G: Gpu + 'static> {
    engine: Arc<Engine<G>>,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<G: Gpu + 'static> Watcher<G> {
    pub fn new(engine: Arc<Engine<G>>) -> Self {
        Watcher { engine, shared: Arc::default(), thread: Mutex::new(None) }
    }

    /// How many parked tickets have not been taken by their wake yet.
    pub fn parked(&self) -> usize {
        self.shared.parked.load(Ordering::Acquire)
    }

    /// Parks ticket `t` ([`Engine::watch_of`] says which may be): `wake` is called once it is
    /// over. `Err` (nothing parked, `wake` dropped uncalled): the reasons of `watch_of`;
    /// STEP_UNAVAILABLE when the thread cannot be started (poll the ticket instead).
    pub fn park(&self, t: u64, wake: Wake) -> Result<()> {
        let word = self.engine.watch_of(t)?;
        self.start()?;
        let p = Parked { ticket: t, word, wake, next_poll: Instant::now() };
        self.shared.parked.fetch_add(1, Ordering::AcqRel);
        self.shared.queue.lock().unwrap_or_else(PoisonError::into_inner).push(p);
        self.shared.ready.notify_one();
        Ok(())
    }

    fn start(&self) -> Result<()> {
        let mut th = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
        if th.is_some() {
            return Ok(());
        }
        static AT_EXIT: Once = Once::new();
        // SAFETY: registers a function with no argument that only sets a flag and takes a lock.
        #[allow(unsafe_code)]
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(at_exit);
        });
        let (engine, shared) = (Arc::clone(&self.engine), Arc::clone(&self.shared));
        let h = std::thread::Builder::new()
            .name("uxn-watcher".into())
            .spawn(move || run(&engine, &shared))
            .map_err(|e| Error::new(Status::StepUnavailable, format!("the engine's watcher thread could not be started: {e}")))?;
        *th = Some(h);
        Ok(())
    }

    /// Stops the thread (it calls the wake of every ticket still parked first, each once, over
    /// or not) and waits for it. The engine's drain, which comes after, settles what is left.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.ready.notify_all();
        let h = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(h) = h {
            let _ = h.join();
        }
        // Parked with no thread to take them (it could not start, or stopped): woken here.
        let left = std::mem::take(&mut *self.shared.queue.lock().unwrap_or_else(PoisonError::into_inner));
        if EXITING.load(Ordering::Acquire) {
            std::mem::forget(left); // at exit: woken by nobody, as the thread's own
        } else {
            wake_all(&self.shared, left);
        }
    }
}

/// Calls every wake once (whatever it answers: there is no later round).
fn wake_all(shared: &Shared, left: Vec<Parked>) {
    for mut p in left {
        let _ = (p.wake)();
        shared.parked.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Between two rounds with nothing over, `since` the last ticket was over (or parked): yields the
/// core, or naps once that is [`SPIN_FOR`]. Decides the watcher's latency and its use of the core,
/// never what it wakes.
fn idle(since: Duration) {
    if since >= SPIN_FOR {
        std::thread::sleep(NAP);
    } else {
        std::thread::yield_now();
    }
}

fn run<G: Gpu>(engine: &Engine<G>, shared: &Shared) {
    let mut mine: Vec<Parked> = Vec::new();
    let mut last_over = Instant::now();
    loop {
        {
            let mut q = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
            while mine.is_empty() && q.is_empty() && !shared.stop.load(Ordering::Acquire) {
                q = shared.ready.wait(q).unwrap_or_else(PoisonError::into_inner);
            }
            if !q.is_empty() {
                last_over = Instant::now(); // a new ticket: spin for it
                mine.append(&mut q);
            }
        }
        if shared.stop.load(Ordering::Acquire) {
            wake_all(shared, mine);
            return;
        }
        let round = ROUNDS.read().unwrap_or_else(PoisonError::into_inner);
        if EXITING.load(Ordering::Acquire) {
            std::mem::forget(mine); // woken by nobody: UPC++ and CUDA are being torn down
            return;
        }
        let now = Instant::now();
        let mut over = false;
        mine.retain_mut(|p| {
            if !p.due(now) {
                return true;
            }
            // Err (FORKED cannot come: this thread is not in a fork() child), or a panic (a bug,
            // which must not end the thread with tickets parked): over, the wake's poll, behind
            // the C ABI's boundary, says the rest.
            let poll = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.poll(p.ticket, None)));
            if poll.is_ok_and(|r| r.is_ok_and(|c| c == NOT_READY)) {
                p.polled(now);
                return true;
            }
            over = true;
            if (p.wake)() {
                shared.parked.fetch_sub(1, Ordering::AcqRel);
                return false;
            }
            true
        });
        drop(round);
        if over {
            last_over = now;
        } else {
            idle(now.duration_since(last_over));
        }
    }
}
