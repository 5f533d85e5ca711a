//! The marks: events recorded on the engine's stream after a copy, each telling that every copy up
//! to it is over (the stream runs its work in issue order). A copy issued while no mark is pending
//! gets one of its own; a poll that finds its copy uncovered records one after every copy issued so
//! far, which the others share. An event that reports an error blames the copies since the mark
//! before it, and no others.

use super::gpu::*;
use super::{Engine, State};
use std::collections::VecDeque;

/// An event recorded after copy `through`.
pub(super) struct Mark {
    pub(super) event: Handle,
    pub(super) through: u64,
}

/// Copies `first..=last` (landed) that CUDA reported `error` for; `redone` of them were redone.
pub(super) struct Failure {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) error: Code,
    pub(super) redone: u64,
}

impl Failure {
    /// Whether copy `seq` is one of this failure's.
    pub(super) fn covers(&self, seq: u64) -> bool {
        seq >= self.first && seq <= self.last
    }
}

/// What the marks settled.
#[derive(Default)]
pub(super) struct Marks {
    /// Every copy up to this sequence number is over.
    pub(super) landed: u64,
    /// The marks not yet seen complete, oldest first.
    pub(super) pending: VecDeque<Mark>,
    pub(super) failures: Vec<Failure>,
    /// Events to reuse (marks', and copies' on callers' streams of the engine's device).
    pub(super) events: Vec<Handle>,
    /// The round of polls (`Engine::poll`'s `asked`).
    pub(super) asked: u64,
    /// Failed copies settled already (`Engine::complete`).
    pub(super) settled: std::collections::HashSet<u64>,
}

impl<G: Gpu> Engine<G> {
    /// Under the lock: an event after every copy issued so far; where none can be recorded the
    /// host waits for the stream instead (the copies are issued: they complete regardless).
    pub(super) fn record_mark(&self, st: &mut State) {
        self.flush(st);
        let s = st.batch.stream.unwrap_or(0);
        if let Some(ev) = self.pooled_event(st) {
            if self.gpu.event_record(ev, s, Some(self.device)).is_ok() {
                let through = st.batch.issued;
                st.marks.pending.push_back(Mark { event: ev, through });
                return;
            }
            self.gpu.event_destroy(ev); // its state is unknown: not back to the pool
        }
        let r = self.gpu.stream_synchronize(s, Some(self.device)).err().unwrap_or(SUCCESS);
        self.retire_marks(st);
        let issued = st.batch.issued;
        self.settle_through(st, issued, r);
    }

    /// Under the lock: every copy up to `through` is over, with `e` for those not over before.
    pub(super) fn settle_through(&self, st: &mut State, through: u64, e: Code) {
        if through <= st.marks.landed {
            return;
        }
        if e != SUCCESS {
            let first = st.marks.landed + 1;
            st.marks.failures.push(Failure { first, last: through, error: e, redone: 0 });
        }
        st.marks.landed = through;
        self.landed.store(through, super::Ordering::Release); // the mirror complete() reads
    }

    pub(super) fn retire_marks(&self, st: &mut State) {
        while let Some(m) = st.marks.pending.pop_front() {
            st.marks.events.push(m.event);
        }
    }

    /// Under the lock: the host waits for every copy issued so far and learns each one's outcome
    /// from the marks that cover it.
    pub(super) fn settle_by_marks(&self, st: &mut State) {
        self.flush(st);
        if st.marks.landed == st.batch.issued {
            return self.retire_marks(st);
        }
        if st.marks.pending.back().is_none_or(|m| m.through < st.batch.issued) {
            self.record_mark(st);
        }
        while let Some(m) = st.marks.pending.pop_front() {
            let e = self.gpu.event_synchronize(m.event).err().unwrap_or(SUCCESS);
            self.settle_through(st, m.through, e);
            st.marks.events.push(m.event);
        }
    }

    pub(super) fn failed_in(st: &State, seq: u64) -> Code {
        st.marks.failures.iter().find(|f| f.covers(seq)).map_or(SUCCESS, |f| f.error)
    }

    /// Under the lock: how copy `seq` ended, or `NOT_READY`. Retires the marks that completed;
    /// when none covers `seq`, records one after every copy issued.
    pub(super) fn outcome_of(&self, st: &mut State, seq: u64) -> Code {
        while seq > st.marks.landed {
            let Some(m) = st.marks.pending.front() else { break };
            let e = match self.gpu.event_query(m.event) {
                Err(NOT_READY) => break,
                r => r.err().unwrap_or(SUCCESS),
            };
            let m = st.marks.pending.pop_front().expect("a mark");
            self.settle_through(st, m.through, e);
            st.marks.events.push(m.event);
        }
        if seq <= st.marks.landed {
            return Self::failed_in(st, seq);
        }
        if st.marks.pending.back().is_none_or(|m| m.through < seq) {
            self.record_mark(st);
        }
        if seq <= st.marks.landed { Self::failed_in(st, seq) } else { NOT_READY }
    }
}
