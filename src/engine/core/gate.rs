//! The stream gate: a word of mapped host memory that callers' streams wait on
//! (`cuStreamWaitValue32`) for `upcxx::copy` calls ([`GateTicket`](super::GateTicket)s: a
//! `copy_on_stream` off the fast path). The word holds how many tickets are done in issue order.

use super::gpu::*;
use super::{Engine, GateTicket};
use crate::error::{Error, Result, Status};

/// The gate's tickets and word.
#[derive(Default)]
pub(super) struct Gate {
    /// The mapped word (host address, device address), made at the first wait.
    pub(super) flag: Option<(usize, usize)>,
    pub(super) issued: u32,
    /// Every ticket up to this one (wrapping order) is done: the value of the word.
    pub(super) done: u32,
    /// Tickets done ahead of one before them.
    pub(super) out_of_order: Vec<u32>,
}

impl<G: Gpu> Engine<G> {
    /// A ticket for work outside the engine (an `upcxx::copy`) that streams may wait for
    /// ([`Engine::stream_waits_for`]); [`Engine::ticket_done`] when it is over.
    pub fn stream_ticket(&self) -> GateTicket {
        let mut st = self.lock();
        st.gate.issued = st.gate.issued.wrapping_add(1);
        st.gate.issued
    }

    /// Ticket `t` is done: the word the waiting streams read advances over every ticket done in
    /// issue order.
    /// `Err(InvalidArgument)` for a ticket [`Engine::stream_ticket`] never gave, or one done
    /// already: nothing changes.
    pub fn ticket_done(&self, t: GateTicket) -> Result<()> {
        let mut st = self.lock();
        // Issued and not done: done < t <= issued, in wrapping order.
        let ahead = t.wrapping_sub(st.gate.done);
        if ahead == 0 || ahead > st.gate.issued.wrapping_sub(st.gate.done) || st.gate.out_of_order.contains(&t) {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("stream ticket {t} was never issued by this engine, or is done already (ticket_done once per ticket_new)"),
            ));
        }
        st.gate.out_of_order.push(t);
        let mut moved = true;
        while moved {
            moved = false;
            let mut i = 0;
            while i < st.gate.out_of_order.len() {
                if st.gate.out_of_order[i] == st.gate.done.wrapping_add(1) {
                    st.gate.done = st.gate.done.wrapping_add(1);
                    st.gate.out_of_order.swap_remove(i);
                    moved = true;
                } else {
                    i += 1;
                }
            }
        }
        if let Some((host, _)) = st.gate.flag {
            write_word(host, st.gate.done);
        }
        Ok(())
    }

    /// Whether a ticket is not done yet.
    pub fn tickets_pending(&self) -> bool {
        let st = self.lock();
        st.gate.done != st.gate.issued
    }

    /// Whether ticket `t` is done.
    pub fn ticket_done_by(&self, t: GateTicket) -> bool {
        self.lock().gate.done.wrapping_sub(t) as i32 >= 0
    }

    /// The work queued on `s` after the call waits, on the GPU, until ticket `t` is done. An
    /// error when the driver cannot enqueue that wait (the caller then waits on the host).
    pub fn stream_waits_for(&self, s: Handle, t: GateTicket) -> Result<()> {
        self.refuse_forked()?;
        let dev = {
            let mut st = self.lock();
            if st.gate.flag.is_none() {
                let w = self.gpu.mapped_word(self.device).map_err(|c| {
                    Error::new(Status::CudaError, format!("mapping a word of host memory failed: {}", self.gpu.result_name(c)))
                })?;
                write_word(w.0, st.gate.done);
                st.gate.flag = Some(w);
            }
            st.gate.flag.expect("the flag").1
        };
        let d = self.gpu.stream_device(s);
        self.gpu
            .stream_wait_value32(if d >= 0 { d } else { self.device }, s, dev, t)
            .map_err(|why| Error::new(Status::CudaError, format!("the stream cannot wait for the ticket: {why}")))
    }
}

/// Stores `v` in the mapped word at host address `host` (read by the GPU).
#[allow(unsafe_code)]
pub(super) fn write_word(host: usize, v: u32) {
    // SAFETY: `host` is the mapped word this engine owns for the process's life, aligned to 64.
    unsafe { (*(host as *const std::sync::atomic::AtomicU32)).store(v, std::sync::atomic::Ordering::Release) }
}
