//! The engine's own stream: copies issued on it in issue order, each with the next sequence number
//! (its [`CopyTicket`](super::CopyTicket)). A small copy with device memory at both ends, not
//! ordered after a stream, joins the batch: one kernel launch moves it at the next flush (when the
//! batch is full, before anything else goes on the stream, before a mark is recorded, or when a
//! caller asks); any other copy is one `cuMemcpyAsync`.

use super::gpu::*;
use super::marks::Failure;
use super::{CopyTicket, Engine, State, closed_error};
use crate::error::{Error, Result, Status};
use crate::sync::Ordering;

/// The engine's stream and its batch.
#[derive(Default)]
pub(super) struct Batch {
    /// Made at the first copy, released by drain.
    pub(super) stream: Option<Handle>,
    /// Copies issued on the stream: the last one's sequence number.
    pub(super) issued: u64,
    /// The copies waiting for the next launch, and their sequence numbers.
    pub(super) descs: Vec<Desc>,
    pub(super) seqs: Vec<u64>,
}

impl<G: Gpu> Engine<G> {
    pub(super) fn issue(&self, r: &CopyReq) -> Result<CopyTicket> {
        let mut st = self.lock();
        if self.closed.load(Ordering::SeqCst) {
            return Err(closed_error());
        }
        let mut e = SUCCESS;
        if st.batch.stream.is_none() {
            match self.gpu.stream_create(self.device) {
                Ok(s) => st.batch.stream = Some(s),
                Err(c) => e = c,
            }
        }
        if e == SUCCESS && r.flags & DEVICE_ENDS != 0 && r.flags & AFTER_STREAM == 0 && r.bytes <= self.batch_bytes() {
            st.batch.issued += 1;
            let seq = st.batch.issued;
            st.batch.descs.push(Desc { src: r.src, dst: r.dst, bytes: r.bytes });
            st.batch.seqs.push(seq);
            self.count(&st, 1, 0);
            if st.batch.descs.len() == G::BATCH_MAX {
                self.flush(&mut st);
            }
            return Ok(seq); // the mark comes with the batch, at the first poll that asks
        }
        if e == SUCCESS {
            self.flush(&mut st);
        }
        if e == SUCCESS && r.flags & AFTER_STREAM != 0 {
            e = self.order_after(&st, r.stream);
        }
        if e == SUCCESS {
            let s = st.batch.stream.unwrap_or(0);
            e = self.gpu.memcpy_async(r.dst, r.src, r.bytes, s, Some(self.device)).err().unwrap_or(SUCCESS);
        }
        if e != SUCCESS {
            return Err(Error::new(Status::CudaError, format!("issuing the {} failed: {}", Self::describe(r), self.gpu.result_name(e))));
        }
        st.batch.issued += 1;
        self.count(&st, 1, 0);
        let seq = st.batch.issued;
        if st.marks.pending.is_empty() {
            self.record_mark(&mut st); // the first copy since the last mark: one of its own
        }
        Ok(seq)
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
    pub(super) fn flush(&self, st: &mut State) {
        if st.batch.descs.is_empty() {
            return;
        }
        let s = st.batch.stream.unwrap_or(0);
        let n = st.batch.descs.len();
        match self.gpu.launch_batch(self.device, s, &st.batch.descs, None) {
            Ok(()) => {
                self.count(st, 0, n);
                st.batch.descs.clear();
                st.batch.seqs.clear();
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
        let batch = std::mem::take(&mut st.batch.descs);
        let seqs = std::mem::take(&mut st.batch.seqs);
        for (d, seq) in batch.iter().zip(seqs) {
            if let Err(e) = self.gpu.memcpy_async(d.dst, d.src, d.bytes, s, Some(self.device)) {
                let w = self.gpu.stream_synchronize(s, Some(self.device)).err().unwrap_or(SUCCESS);
                self.retire_marks(st);
                self.settle_through(st, seq - 1, w);
                let issued = st.batch.issued;
                st.marks.failures.push(Failure { first: seq, last: issued, error: e, redone: 0 });
                self.settle_through(st, issued, SUCCESS);
                break;
            }
        }
    }

    pub(super) fn pooled_event(&self, st: &mut State) -> Option<Handle> {
        if let Some(e) = st.marks.events.pop() {
            return Some(e);
        }
        self.gpu.event_create(Some(self.device)).ok()
    }
}
