//! The words that callers' streams write: a pending [`CallerTicket`](super::CallerTicket) of
//! `after()`, of `copies_on_stream` or of a `copy_on_stream` by the copy kernel has a word of host
//! memory mapped for the GPU that the stream itself writes when it reaches that point
//! (`cuStreamWriteValue32`, or the batch kernel's launch itself): a poll is a load of that word,
//! no CUDA call (a `copy_on_stream` by `cuMemcpyAsync` has an event instead:
//! [`super::on_stream`]). A word belongs to one pending ticket, not to a stream: a stream handle
//! may be destroyed and its value reused by CUDA for a new stream, and two streams writing one
//! word would leave it out of order; a word goes back to the pool once its write was seen. The
//! value written is the engine's next 32-bit number (never 0), so a word reused cannot be taken
//! for an older ticket's.
//!
//! A failed stream is noticed without a CUDA call per poll: when a ticket's word has landed, one
//! query of the context (`cuStreamQuery` of the engine's stream) says whether the GPU reported a
//! fault (a GPU's asynchronous faults are sticky: every later call of the context reports them);
//! while it has not landed, at most one such query per millisecond (a faulted context never writes
//! the word).

use super::gpu::*;
use super::on_stream::{Kind, Watched};
use super::{CallerTicket, Engine, State};

/// Words of one block of mapped host memory for the tickets of callers' streams.
pub const WORDS_PER_BLOCK: usize = 1024;
/// While a ticket's word has not landed, the context is asked for a fault at most this often.
const PROBE_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

/// Whether the context is to be asked for a fault now: at most once per [`PROBE_EVERY`] (under
/// the loom model at every poll: `crate::sync::due`).
fn probe_due(st: &State) -> bool {
    crate::sync::due(st.words.last_probe, PROBE_EVERY)
}

/// A word of mapped host memory a stream writes `value` into; `device`: whose context is asked
/// for a fault.
#[derive(Clone, Copy)]
pub(super) struct Word {
    pub(super) host: usize,
    pub(super) dev: usize,
    pub(super) counter: usize,
    pub(super) value: u32,
    pub(super) device: i32,
}

/// A word of the pool: host address, device address, and its launch counter's device address
/// (0: none, so only a stream write can store it).
pub(super) type PoolWord = (usize, usize, usize);

/// The pool of words.
#[derive(Default)]
pub(super) struct Words {
    /// Words no stream or launch will write again.
    pub(super) free: Vec<PoolWord>,
    pub(super) next_value: u32,
    pub(super) last_probe: Option<std::time::Instant>,
}

impl<G: Gpu> Engine<G> {
    /// Under the lock: a word of the pool (a new block of them when it is empty, with a launch
    /// counter each where device memory for them can be had).
    pub(super) fn take_word(&self, st: &mut State) -> std::result::Result<PoolWord, Code> {
        if let Some(w) = st.words.free.pop() {
            return Ok(w);
        }
        let (h, d) = self.gpu.mapped_words(self.device, WORDS_PER_BLOCK)?;
        let c = self.gpu.device_words(self.device, WORDS_PER_BLOCK).unwrap_or(0);
        let counter = |i: usize| if c == 0 { 0 } else { c + 4 * i };
        st.words.free.extend((1..WORDS_PER_BLOCK).rev().map(|i| (h + 4 * i, d + 4 * i, counter(i))));
        Ok((h, d, c))
    }

    /// Under the lock: the value the next word written stores (never 0).
    pub(super) fn next_value(st: &mut State) -> u32 {
        st.words.next_value = st.words.next_value.wrapping_add(1).max(1);
        st.words.next_value
    }

    /// Under the lock: a ticket told by word `w`, which the stream (or a launch on it) stores
    /// `value` into when it reaches that point.
    pub(super) fn watch_taken(st: &mut State, w: PoolWord, value: u32, device: i32, kind: Kind) -> CallerTicket {
        let word = Some(Word { host: w.0, dev: w.1, counter: w.2, value, device });
        Self::watch(st, Watched { event: 0, result: NOT_READY, kind, on_own_device: true, word })
    }

    /// Under the lock: a word of the pool with a launch counter, and the [`Signal`] that stores
    /// the next value in it; `None` (nothing taken) when the pool has none.
    pub(super) fn take_signal(&self, st: &mut State) -> Option<(PoolWord, Signal)> {
        let w = self.take_word(st).ok()?;
        if w.2 == 0 {
            st.words.free.push(w);
            return None;
        }
        let value = Self::next_value(st);
        Some((w, Signal { counter: w.2, word: w.1, value }))
    }

    /// Under the lock: a ticket whose outcome the word that `s` writes when it reaches this point
    /// tells (written in context `ctx`; `device`: the context asked for a fault). An error when
    /// the driver refuses the write (nothing enqueued).
    pub(super) fn watch_word(
        &self,
        st: &mut State,
        s: Handle,
        ctx: Option<i32>,
        device: i32,
        kind: Kind,
    ) -> std::result::Result<CallerTicket, Code> {
        let w = self.take_word(st)?;
        let value = Self::next_value(st);
        if let Err(c) = self.gpu.stream_write_value32(s, w.1, value, ctx) {
            st.words.free.push(w); // nothing will write it
            return Err(c);
        }
        Ok(Self::watch_taken(st, w, value, device, kind))
    }

    /// Under the lock: a fault the context of `device` reports (`SUCCESS`: none).
    pub(super) fn probe(&self, st: &mut State, device: i32) -> Code {
        st.words.last_probe = Some(std::time::Instant::now());
        let r = match st.batch.stream {
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
    pub(super) fn word_outcome(&self, st: &mut State, t: u64, probe_now: bool) -> Option<Code> {
        let w = st.callers.watched.get(&t)?;
        if w.result != NOT_READY {
            return Some(w.result);
        }
        let word = w.word?;
        let landed = read_word(word.host) == word.value;
        let e = if landed {
            self.probe(st, word.device)
        } else if probe_now || probe_due(st) {
            match self.probe(st, word.device) {
                SUCCESS => return Some(NOT_READY),
                c => c,
            }
        } else {
            return Some(NOT_READY);
        };
        if landed {
            st.words.free.push((word.host, word.dev, word.counter));
        }
        let w = st.callers.watched.get_mut(&t).expect("watched");
        w.word = None;
        w.result = e;
        Some(e)
    }
}

/// A pending ticket's word as a thread without the engine's lock reads it (the watcher,
/// `crate::engine::watcher`): [`WordWatch::landed`] once the stream stored the ticket's value. A
/// word seen landed by a poll goes back to the pool and may be written again with another value,
/// so `landed` may stay false for a ticket that is over: the watcher also polls the engine at
/// times.
#[derive(Clone, Copy, Debug)]
pub struct WordWatch {
    host: usize,
    value: u32,
}

impl WordWatch {
    /// Whether the stream stored the ticket's value (a load; no CUDA call, no lock).
    pub fn landed(&self) -> bool {
        read_word(self.host) == self.value
    }
}

impl<G: Gpu> Engine<G> {
    /// Whether ticket `t` may be watched from another thread: a pending ticket of a caller's
    /// stream (`after()`, `copies_on_stream`, `copy_on_stream`), with its word when the stream
    /// writes one (`None`: an event tells it, so only [`Engine::poll`] does). `Err` with the
    /// reason otherwise: FORKED; INVALID_ARGUMENT for a copy of the engine's stream, a ticket
    /// never issued, or one settled already.
    pub fn watch_of(&self, t: u64) -> crate::error::Result<Option<WordWatch>> {
        self.refuse_forked()?;
        let st = self.lock();
        // Only callers' tickets are watched: a copy's ticket of the engine's stream is not found.
        let w = st.callers.watched.get(&t).ok_or_else(|| {
            crate::error::Error::new(
                crate::error::Status::InvalidArgument,
                format!("ticket {t} is not a pending ticket of a caller's stream (after, copy_on_stream or copies_on_stream)"),
            )
        })?;
        Ok(w.word.map(|w| WordWatch { host: w.host, value: w.value }))
    }
}

/// The mapped word at host address `host` (written by a stream).
#[allow(unsafe_code)]
fn read_word(host: usize) -> u32 {
    // SAFETY: `host` is a word of a block this engine mapped, kept for the process's life.
    unsafe { (*(host as *const std::sync::atomic::AtomicU32)).load(std::sync::atomic::Ordering::Acquire) }
}
