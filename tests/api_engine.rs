//! The copy engine's C ABI in a process without a GPU: its handle's life, every argument check,
//! the answers for tickets it never issued, and a copy the driver cannot take (no `libcuda` here,
//! or a stand-in's refusal) reported with its bytes and ranks. Its copies on a GPU are tested by
//! the C++ layer's copy tests (tests/cxx, the stand-in in CI, the GPU host) and by the C example
//! (examples/engine_copy.c); its protocol by the loom model (tests/loom/tests/engine_model.rs).

use std::ffi::CStr;
use std::ptr::{null, null_mut};
use upcxx_extra_nvshmem::abi::*;

fn last() -> String {
    unsafe { CStr::from_ptr(upcxx_extra_nvshmem_last_error()) }.to_string_lossy().into_owned()
}

fn new_engine(batch: usize) -> *mut EngineHandle {
    let mut e = null_mut();
    assert_eq!(unsafe { upcxx_extra_nvshmem_engine_new(0, batch, &mut e) }, Status::Ok);
    assert!(!e.is_null());
    e
}

#[test]
fn handle_life_and_argument_checks() {
    let mut e = null_mut();
    assert_eq!(unsafe { upcxx_extra_nvshmem_engine_new(0, 0, null_mut()) }, Status::NullArgument);
    assert_eq!(unsafe { upcxx_extra_nvshmem_engine_new(-1, 0, &mut e) }, Status::InvalidArgument);
    assert!(last().contains("device is -1"), "{}", last());
    assert!(e.is_null(), "a refused engine_new wrote its output");
    unsafe { upcxx_extra_nvshmem_engine_free(null_mut()) }; // NULL is ignored

    // Every call on a NULL engine is NULL_ARGUMENT, named after the call.
    let (mut t, mut r, mut b, mut n, mut f) = (0u64, 0i32, false, 0usize, false);
    let c = EngineCopy { dst: null_mut(), src: null(), bytes: 0, src_rank: 0, dst_rank: 1, flags: 0, stream: null_mut() };
    let mut settled = EngineSettled::Report;
    let mut counts = EngineCounts::default();
    let none = null::<EngineHandle>();
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_engine_copy(none, &c, &mut t), Status::NullArgument);
        assert!(last().starts_with("upcxx_extra_nvshmem_engine_copy: engine is NULL"), "{}", last());
        assert_eq!(upcxx_extra_nvshmem_engine_after(none, null_mut(), &mut t), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_flush(none), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_poll(none, 1, null_mut(), &mut r), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_complete(none, 1, 0, null(), &mut settled), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_take_error(none), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_wait_all(none), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_close(none), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_reopen(none), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_drain(none, null_mut()), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_counts(none, &mut counts), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_batch_bytes(none, &mut n), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_set_batch_bytes(none, 1), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_forked(none, &mut f), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_new(none, &mut 0), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(none, 1), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_query(none, 1, &mut b), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_stream_wait_ticket(none, null_mut(), 1), Status::NullArgument);
    }

    // A live engine: NULL outputs, a copy with a NULL end, both orderings at once.
    let e = new_engine(4096);
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, null(), &mut t), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &c, null_mut()), Status::NullArgument);
        let holed = EngineCopy { bytes: 8, ..c };
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &holed, &mut t), Status::NullArgument);
        assert!(last().contains("the copy of 8 bytes has a NULL end"), "{}", last());
        let both = EngineCopy { flags: EngineFlag::AfterStream as u32 | EngineFlag::OnStream as u32, ..c };
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &both, &mut t), Status::InvalidArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_poll(e, 1, null_mut(), null_mut()), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, 1, 0, null(), null_mut()), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_counts(e, null_mut()), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_batch_bytes(e, null_mut()), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_forked(e, null_mut()), Status::NullArgument);

        // The knobs and the counts of an engine that copied nothing.
        assert_eq!(upcxx_extra_nvshmem_engine_batch_bytes(e, &mut n), Status::Ok);
        assert_eq!(n, 4096);
        assert_eq!(upcxx_extra_nvshmem_engine_set_batch_bytes(e, 0), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_batch_bytes(e, &mut n), Status::Ok);
        assert_eq!(n, 0);
        assert_eq!(upcxx_extra_nvshmem_engine_counts(e, &mut counts), Status::Ok);
        assert_eq!((counts.fast, counts.batched), (0, 0));
        assert_eq!(upcxx_extra_nvshmem_engine_forked(e, &mut f), Status::Ok);
        assert!(!f);
        assert_eq!(upcxx_extra_nvshmem_engine_take_error(e), Status::Ok, "no failure yet");

        // A ticket it never issued is unknown (999), and settling a ticket that
        // is not over is refused.
        assert_eq!(upcxx_extra_nvshmem_engine_poll(e, (1 << 63) | 7, null_mut(), &mut r), Status::Ok);
        assert_eq!(r, 999);
        for never in [0, 5] {
            assert_eq!(upcxx_extra_nvshmem_engine_poll(e, never, null_mut(), &mut r), Status::Ok);
            assert_eq!(r, 999, "copy ticket {never}, never issued");
        }
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, 5, 600, null(), &mut settled), Status::InvalidArgument);
        assert!(last().contains("not over"), "{}", last());
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, 5, 0, null(), &mut settled), Status::Ok);
        assert_eq!(settled, EngineSettled::Landed);

        // Stream tickets done out of order: the later waits for the earlier.
        let (mut t1, mut t2) = (0u32, 0u32);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_new(e, &mut t1), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_new(e, &mut t2), Status::Ok);
        assert_eq!(t2, t1 + 1);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, t2), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_query(e, t2, &mut b), Status::Ok);
        assert!(!b, "a ticket done before an earlier one counted as done");
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_query(e, 0, &mut b), Status::Ok);
        assert!(!b, "tickets pending, yet all done");
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, t1), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_query(e, t2, &mut b), Status::Ok);
        assert!(b);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_query(e, 0, &mut b), Status::Ok);
        assert!(b);

        // Closed: nothing is issued; reopened: the check passes again.
        assert_eq!(upcxx_extra_nvshmem_engine_close(e), Status::Ok);
        let one = EngineCopy { dst: 0x2000 as *mut _, src: 0x1000 as *const _, bytes: 8, ..c };
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &one, &mut t), Status::EngineClosed);
        assert_eq!(upcxx_extra_nvshmem_engine_reopen(e), Status::Ok);

        // No GPU here: the copy is refused at the call (nothing was issued), and the message
        // names the copy.
        let s = upcxx_extra_nvshmem_engine_copy(e, &one, &mut t);
        if s != Status::Ok {
            assert_eq!(s, Status::CudaError);
            assert!(last().contains("copy of 8 bytes from rank 0 to rank 1"), "{}", last());
        }
        let mut unredone = 7u64;
        assert_eq!(upcxx_extra_nvshmem_engine_drain(e, &mut unredone), Status::Ok);
        assert_eq!(unredone, 0);
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &one, &mut t), Status::EngineClosed, "copy after drain");
        assert_eq!(upcxx_extra_nvshmem_engine_reopen(e), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &one, &mut t), Status::EngineClosed, "reopen after drain");
        upcxx_extra_nvshmem_engine_free(e);
    }
}

#[test]
fn statuses_of_the_engine_have_names() {
    for (s, name) in [(Status::Forked, "FORKED"), (Status::StreamCapture, "STREAM_CAPTURE"), (Status::EngineClosed, "ENGINE_CLOSED")] {
        assert_eq!(s.name(), name);
        let d = unsafe { CStr::from_ptr(upcxx_extra_nvshmem_strerror(s as i32)) }.to_str().unwrap();
        assert_ne!(d, "unknown status");
    }
}
