//! The copy engine's C ABI in a process without a GPU: its handle's life, every argument check,
//! the answers for tickets it never issued, and a copy the driver cannot take (no `libcuda` here,
//! or a stand-in's refusal) reported with its bytes and ranks. Its copies on a GPU are tested by
//! the C++ layer's copy tests (tests/cxx, the stand-in in CI, the GPU host) and by the C example
//! (examples/engine_copy.c); its protocol by the loom model (tests/loom/tests/engine_model.rs).
//!
//! The tests named `standin_*` need a CUDA driver: the test suite runs this file a second time
//! over the CUDA stand-in (`rust.api_engine_standin`: `LD_LIBRARY_PATH` at its `libcuda.so.1`,
//! `UXN_REQUIRE_CUDA=1`); under a plain `cargo test` without a driver they say so and pass.

use std::ffi::CStr;
use std::ptr::{null, null_mut};
use upcxx_extra_nvshmem::abi::*;

// The poll results the header names (upcxx_extra_nvshmem_engine_poll_t), as engine_poll's `int`.
const LANDED: i32 = EnginePoll::Landed as i32;
const NOT_READY: i32 = EnginePoll::NotReady as i32;
const UNKNOWN: i32 = EnginePoll::Unknown as i32;

#[test]
fn poll_results_are_the_drivers_numbers() {
    // The header's names are CUDA's numbers: a CUresult compares with them as it is.
    assert_eq!((LANDED, NOT_READY, UNKNOWN), (0, 600, 999));
    let header = include_str!("../include/upcxx_extra_nvshmem.h");
    for line in [
        "UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_LANDED = 0,",
        "UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_NOT_READY = 600,",
        "UPCXX_EXTRA_NVSHMEM_ENGINE_POLL_UNKNOWN = 999,",
    ] {
        assert!(header.contains(line), "the header lacks {line}");
    }
}

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
        assert_eq!(upcxx_extra_nvshmem_engine_check_usable(none), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_new(none, &mut 0), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(none, 1), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_query(none, 1, &mut b), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_stream_wait_ticket(none, null_mut(), 1), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_park(none, 1, Some(count_wake), null_mut()), Status::NullArgument);
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
        assert_eq!((counts.fast, counts.batched, counts.parked), (0, 0, 0));
        // Only a pending ticket of a caller's stream parks; a NULL wake is refused.
        assert_eq!(upcxx_extra_nvshmem_engine_park(e, 1, None, null_mut()), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_park(e, 1, Some(count_wake), null_mut()), Status::InvalidArgument);
        assert!(last().contains("ticket 1 is not a pending ticket of a caller's stream"), "{}", last());
        assert_eq!(upcxx_extra_nvshmem_engine_park(e, 1 << 63 | 7, Some(count_wake), null_mut()), Status::InvalidArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_forked(e, &mut f), Status::Ok);
        assert!(!f);
        assert_eq!(upcxx_extra_nvshmem_engine_check_usable(e), Status::Ok, "the process that made it");
        assert_eq!(upcxx_extra_nvshmem_engine_take_error(e), Status::Ok, "no failure yet");

        // A ticket it never issued is UNKNOWN, and settling a ticket that
        // is not over is refused.
        assert_eq!(upcxx_extra_nvshmem_engine_poll(e, (1 << 63) | 7, null_mut(), &mut r), Status::Ok);
        assert_eq!(r, UNKNOWN);
        for never in [0, 5] {
            assert_eq!(upcxx_extra_nvshmem_engine_poll(e, never, null_mut(), &mut r), Status::Ok);
            assert_eq!(r, UNKNOWN, "copy ticket {never}, never issued");
        }
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, 5, NOT_READY, null(), &mut settled), Status::InvalidArgument);
        assert!(last().contains("not over"), "{}", last());
        // Settling a ticket never issued is misuse, whatever result the caller passes.
        for (never, result) in [(5, LANDED), (5, UNKNOWN), (0, LANDED), ((1 << 63) | 7, LANDED), ((1 << 63) | 7, UNKNOWN)] {
            settled = EngineSettled::Landed;
            assert_eq!(upcxx_extra_nvshmem_engine_complete(e, never, result, null(), &mut settled), Status::InvalidArgument);
            assert!(last().contains("never issued"), "{}", last());
        }

        // A stream ticket never issued (none is yet) is refused, and does not make the next
        // ticket born done; a ticket is done once.
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, 1), Status::InvalidArgument);
        assert!(last().contains("never issued"), "{}", last());
        let mut t0 = 0u32;
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_new(e, &mut t0), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_query(e, t0, &mut b), Status::Ok);
        assert!(!b, "a new stream ticket was born done");
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, t0.wrapping_add(1)), Status::InvalidArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, t0), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, t0), Status::InvalidArgument, "a ticket done twice");
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_query(e, 0, &mut b), Status::Ok);
        assert!(b);

        // Stream tickets done out of order: the later waits for the earlier.
        let (mut t1, mut t2) = (0u32, 0u32);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_new(e, &mut t1), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_new(e, &mut t2), Status::Ok);
        assert_eq!(t2, t1 + 1);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, t2), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, t2), Status::InvalidArgument, "done twice, out of order");
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
        // names the copy. (Over the stand-in its made-up addresses would be copied: not tried.)
        let mut devices = 0;
        if upcxx_extra_nvshmem_cuda_devices(&mut devices, null_mut()) != Status::Ok {
            let s = upcxx_extra_nvshmem_engine_copy(e, &one, &mut t);
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

/// A copy whose flags carry a bit no `upcxx_extra_nvshmem_engine_flag_t` names is refused
/// (INVALID_ARGUMENT, the message naming the bits), by engine_copy and by
/// engine_copy_on_stream_batch: nothing issued, no ticket written. The header names no test-only
/// flag (failures are injected through the CUDA stand-in, issue 52).
#[test]
fn copy_flags_with_unknown_bits_are_refused() {
    let header = include_str!("../include/upcxx_extra_nvshmem.h");
    assert!(!header.contains("INJECT_FAILURE"), "the header names a test-only flag");
    let e = new_engine(4096);
    let (src, mut dst) = (vec![1u8; 8], vec![0u8; 8]);
    let known = EngineFlag::DeviceEnds as u32 | EngineFlag::AfterStream as u32 | EngineFlag::OnStream as u32;
    assert_eq!(known, 7);
    for (bits, named) in [(8u32, "0x8"), (1 << 31, "0x80000000"), (0x18, "0x18")] {
        let c = copy_of(&src, &mut dst, EngineFlag::DeviceEnds as u32 | bits);
        let mut t = 5u64;
        unsafe {
            assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &c, &mut t), Status::InvalidArgument, "flags {:#x}", c.flags);
            let m = last();
            assert!(m.contains(&format!("unknown bits {named}")), "engine_copy, bits {bits:#x}: {m}");
            let cs = [copy_of(&src, &mut dst, 0), c];
            assert_eq!(upcxx_extra_nvshmem_engine_copy_on_stream_batch(e, null_mut(), cs.as_ptr(), 2, &mut t), Status::InvalidArgument);
            let m = last();
            assert!(m.contains("copy 1") && m.contains(&format!("unknown bits {named}")), "copy_on_stream_batch, bits {bits:#x}: {m}");
        }
        assert_eq!(t, 5, "a refused call wrote a ticket");
    }
    let mut counts = EngineCounts::default();
    assert_eq!(unsafe { upcxx_extra_nvshmem_engine_counts(e, &mut counts) }, Status::Ok);
    assert_eq!((counts.fast, counts.batched), (0, 0), "a refused copy was counted");
    unsafe { upcxx_extra_nvshmem_engine_free(e) };
}

/// Whether a CUDA driver (the stand-in in the test suite) is loaded; `UXN_REQUIRE_CUDA=1` makes
/// its absence a failure.
fn driver() -> bool {
    let mut n = 0;
    let ok = unsafe { upcxx_extra_nvshmem_cuda_devices(&mut n, null_mut()) } == Status::Ok && n > 0;
    if !ok {
        assert!(std::env::var_os("UXN_REQUIRE_CUDA").is_none(), "UXN_REQUIRE_CUDA is set and no CUDA driver is loaded: {}", last());
        eprintln!("skipped: no CUDA driver in this process (the test suite runs it over the stand-in)");
    }
    ok
}

/// Polls `t` (through slot `asked`, or none) until it is over; None after 10 s.
fn poll_until_over(e: *const EngineHandle, t: u64, asked: *mut u64) -> Option<i32> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < until {
        let mut r = -1;
        assert_eq!(unsafe { upcxx_extra_nvshmem_engine_poll(e, t, asked, &mut r) }, Status::Ok);
        if r != NOT_READY {
            return Some(r);
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    None
}

/// A function of the CUDA stand-in (the libcuda.so.1 the library loaded), by name; panics when
/// it is not there (the `standin_*` tests run over the stand-in only).
fn standin_fn(name: &CStr) -> *mut libc::c_void {
    // SAFETY: dlopen of a library already loaded (RTLD_NOLOAD), dlsym of a name.
    let f = unsafe {
        let cuda = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if cuda.is_null() { cuda } else { libc::dlsym(cuda, name.as_ptr()) }
    };
    assert!(!f.is_null(), "the CUDA stand-in's {name:?}");
    f
}

/// The stand-in's `uxn_standin_fail_next_copies(n)`: the next `n` asynchronous copies enqueued in
/// this process (a batch kernel's launch is one, failing all its copies) move no bytes and fail
/// asynchronously (an event or a synchronize reports CUDA_ERROR_UNKNOWN). Returns how many were
/// still pending. The library has no switch of its own for this (issue 52).
fn standin_fail_next_copies(n: i32) -> i32 {
    // SAFETY: its C signature, int (int).
    let f: extern "C" fn(i32) -> i32 = unsafe { std::mem::transmute(standin_fn(c"uxn_standin_fail_next_copies")) };
    f(n)
}

/// The stand-in counts injected failures per process, and the test harness runs tests on several
/// threads: every `standin_*` test that copies holds this, so that no other test's copy takes a
/// failure meant for one.
fn standin_serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn copy_of(src: &[u8], dst: &mut [u8], flags: u32) -> EngineCopy {
    EngineCopy {
        dst: dst.as_mut_ptr().cast(),
        src: src.as_ptr().cast(),
        bytes: src.len(),
        src_rank: 0,
        dst_rank: 1,
        flags,
        stream: null_mut(),
    }
}

/// `asked` NULL (no slot) asks the GPU at every poll: the copy is seen landing.
#[test]
fn standin_poll_without_a_slot_sees_the_copy_land() {
    if !driver() {
        return;
    }
    let _serial = standin_serial();
    let e = new_engine(0);
    let (src, mut dst) = (vec![7u8; 4096], vec![0u8; 4096]);
    let c = copy_of(&src, &mut dst, 0);
    let mut t = 0;
    assert_eq!(unsafe { upcxx_extra_nvshmem_engine_copy(e, &c, &mut t) }, Status::Ok, "{}", last());
    assert_eq!(poll_until_over(e, t, null_mut()), Some(LANDED), "a poll with asked NULL never saw the copy land");
    assert!(dst.iter().all(|&b| b == 7));
    unsafe { upcxx_extra_nvshmem_engine_free(e) };
}

/// Round after round, a landed ticket polled first (a caller that polls it again before it
/// settles it) does not hide the ticket polled after it.
#[test]
fn standin_a_landed_ticket_polled_again_hides_no_other() {
    if !driver() {
        return;
    }
    let _serial = standin_serial();
    let e = new_engine(0);
    let (src, mut d1, mut d2) = (vec![5u8; 4096], vec![0u8; 4096], vec![0u8; 4096]);
    let (mut a, mut b, mut slot_a, mut slot_b) = (0, 0, 0u64, 0u64);
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &copy_of(&src, &mut d1, 0), &mut a), Status::Ok, "{}", last());
        assert_eq!(poll_until_over(e, a, &mut slot_a), Some(LANDED));
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &copy_of(&src, &mut d2, 0), &mut b), Status::Ok, "{}", last());
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut rb = NOT_READY;
        while rb == NOT_READY && std::time::Instant::now() < until {
            let mut ra = -1;
            assert_eq!(upcxx_extra_nvshmem_engine_poll(e, a, &mut slot_a, &mut ra), Status::Ok);
            assert_eq!(ra, LANDED, "a landed ticket changed its answer");
            assert_eq!(upcxx_extra_nvshmem_engine_poll(e, b, &mut slot_b, &mut rb), Status::Ok);
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        assert_eq!(rb, 0, "the second ticket was never seen landing while a landed one was polled before it");
        upcxx_extra_nvshmem_engine_free(e);
    }
}

/// A failed copy (the stand-in fails it asynchronously) is settled once: a second
/// engine_complete is refused, and drain's count of copies not redone stays right.
#[test]
fn standin_a_failed_ticket_is_settled_once() {
    if !driver() {
        return;
    }
    let _serial = standin_serial();
    let e = new_engine(0);
    let (src, mut dst) = (vec![1u8; 64], vec![0u8; 64]);
    let c = copy_of(&src, &mut dst, 0);
    let (mut t, mut settled, mut unredone, mut slot) = (0, EngineSettled::Landed, 7u64, 0u64);
    unsafe {
        standin_fail_next_copies(1);
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &c, &mut t), Status::Ok, "{}", last());
        let r = poll_until_over(e, t, &mut slot).expect("the failed copy never ended");
        assert_eq!(standin_fail_next_copies(0), 0, "the copy did not take the injected failure");
        assert_eq!(r, UNKNOWN, "the stand-in's failure is CUDA_ERROR_UNKNOWN");
        assert!(dst.iter().all(|&b| b == 0), "the failed copy moved bytes");
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, t, r, &c, &mut settled), Status::Ok);
        assert_eq!(settled, EngineSettled::Redo);
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, t, r, &c, &mut settled), Status::InvalidArgument);
        assert!(last().contains("settled already"), "{}", last());
        assert_eq!(upcxx_extra_nvshmem_engine_take_error(e), Status::CudaError);
        assert_eq!(upcxx_extra_nvshmem_engine_drain(e, &mut unredone), Status::Ok);
        assert_eq!(unredone, 0, "drain counted the copy redone twice, or not at all");
        upcxx_extra_nvshmem_engine_free(e);
    }
}

/// In a fork() child every call that would reach CUDA says FORKED, poll included (a batch is
/// pending in the parent: a poll that reached the driver would launch it there); the parent's
/// copy lands as if nothing happened.
#[test]
fn standin_fork_child_polls_say_forked() {
    if !driver() {
        return;
    }
    let _serial = standin_serial();
    let e = new_engine(4096);
    let (src, mut dst) = (vec![9u8; 64], vec![0u8; 64]);
    let c = copy_of(&src, &mut dst, EngineFlag::DeviceEnds as u32);
    let mut t = 0;
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &c, &mut t), Status::Ok, "{}", last());
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            // The child: no panic, no allocation that may deadlock; the exit code says what failed.
            let (mut r, mut asked, mut settled) = (-1, 0u64, EngineSettled::Landed);
            let mut code = 0;
            if upcxx_extra_nvshmem_engine_poll(e, t, &mut asked, &mut r) != Status::Forked || r != -1 {
                code |= 1;
            }
            if upcxx_extra_nvshmem_engine_poll(e, t, null_mut(), &mut r) != Status::Forked || r != -1 {
                code |= 2;
            }
            if upcxx_extra_nvshmem_engine_complete(e, t, 3, &c, &mut settled) != Status::Forked {
                code |= 4;
            }
            if upcxx_extra_nvshmem_engine_flush(e) != Status::Forked || upcxx_extra_nvshmem_engine_wait_all(e) != Status::Forked {
                code |= 8;
            }
            // The one fork check the C++ layer asks before its own work, with the one message.
            if upcxx_extra_nvshmem_engine_check_usable(e) != Status::Forked {
                code |= 16;
            }
            libc::_exit(code);
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        assert!(libc::WIFEXITED(status), "the fork() child did not exit");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "fork() child: bit 1/2 poll, 4 complete, 8 flush/wait_all, 16 check_usable did not say FORKED"
        );
        assert_eq!(poll_until_over(e, t, null_mut()), Some(LANDED), "the parent's batched copy");
        assert!(dst.iter().all(|&b| b == 9));
        upcxx_extra_nvshmem_engine_free(e);
    }
}

/// `engine_copy_on_stream_batch`'s argument checks: nothing is issued, no ticket written.
#[test]
fn copy_on_stream_batch_argument_checks() {
    let e = new_engine(0);
    let (src, mut dst) = (vec![1u8; 8], vec![0u8; 8]);
    let c = copy_of(&src, &mut dst, 0);
    let mut t = 5u64;
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_engine_copy_on_stream_batch(null(), null_mut(), &c, 1, &mut t), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_copy_on_stream_batch(e, null_mut(), &c, 1, null_mut()), Status::NullArgument);
        assert_eq!(upcxx_extra_nvshmem_engine_copy_on_stream_batch(e, null_mut(), null(), 2, &mut t), Status::NullArgument);
        assert!(last().contains("copies"), "{}", last());
        let holed = [c, EngineCopy { src: null(), ..c }];
        assert_eq!(upcxx_extra_nvshmem_engine_copy_on_stream_batch(e, null_mut(), holed.as_ptr(), 2, &mut t), Status::NullArgument);
        assert!(last().contains("copy 1 of 8 bytes has a NULL end"), "{}", last());
        assert_eq!(t, 5, "a refused call wrote a ticket");
        upcxx_extra_nvshmem_engine_free(e);
    }
}

/// A batch on a caller's stream (the legacy default stream): small copies with device ends in one
/// launch, a large one as a copy, in order; one ticket lands once every copy did, settled LANDED.
/// With its launch failed (the stand-in fails it asynchronously: every copy of the launch) the
/// ticket reports it, settled REPORT (never REDO), and take_error names the batch.
#[test]
fn standin_copy_on_stream_batch_lands_in_order() {
    if !driver() {
        return;
    }
    let _serial = standin_serial();
    let e = new_engine(4096);
    let src: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i + 1; if i == 3 { 65536 } else { 64 }]).collect();
    let mut dst: Vec<Vec<u8>> = src.iter().map(|s| vec![0u8; s.len()]).collect();
    // The stand-in's kernel reaches device memory only: these vectors stand for it.
    // SAFETY: its C signature, int (void *, size_t, int).
    let register: extern "C" fn(*mut libc::c_void, usize, i32) -> i32 =
        unsafe { std::mem::transmute(standin_fn(c"uxn_standin_register_device_range")) };
    for v in src.iter() {
        assert_eq!(register(v.as_ptr() as *mut libc::c_void, v.len(), 0), 0);
    }
    for v in dst.iter_mut() {
        assert_eq!(register(v.as_mut_ptr().cast(), v.len(), 0), 0);
    }
    let mut cs: Vec<EngineCopy> = Vec::new();
    for (s, d) in src.iter().zip(dst.iter_mut()) {
        cs.push(copy_of(s, d, EngineFlag::DeviceEnds as u32));
    }
    let mut t = 0;
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_engine_copy_on_stream_batch(e, null_mut(), cs.as_ptr(), cs.len(), &mut t), Status::Ok, "{}", last());
        assert_eq!(poll_until_over(e, t, null_mut()), Some(LANDED), "the batch never landed");
        for (i, d) in dst.iter().enumerate() {
            assert!(d.iter().all(|&b| b == i as u8 + 1), "copy {i} of the batch did not land");
        }
        let mut settled = EngineSettled::Report;
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, t, 0, null(), &mut settled), Status::Ok);
        assert_eq!(settled, EngineSettled::Landed);
        let mut counts = EngineCounts::default();
        assert_eq!(upcxx_extra_nvshmem_engine_counts(e, &mut counts), Status::Ok);
        assert_eq!((counts.fast, counts.batched), (4, 3), "3 small copies in the launch, the large one a copy");

        for d in dst.iter_mut() {
            d.fill(0);
        }
        standin_fail_next_copies(1); // the launch of copies 0 to 2, enqueued first
        assert_eq!(upcxx_extra_nvshmem_engine_copy_on_stream_batch(e, null_mut(), cs.as_ptr(), cs.len(), &mut t), Status::Ok, "{}", last());
        let r = poll_until_over(e, t, null_mut());
        assert_eq!(standin_fail_next_copies(0), 0, "the batch's launch did not take the injected failure");
        assert!(r.is_some_and(|r| r != 0), "a batch with a failed launch reported {r:?}");
        assert!(dst[..3].iter().all(|d| d.iter().all(|&b| b == 0)), "the failed launch moved bytes");
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, t, r.unwrap(), &cs[1], &mut settled), Status::Ok);
        assert_eq!(settled, EngineSettled::Report, "a failed batch is reported, not redone");
        assert_eq!(upcxx_extra_nvshmem_engine_take_error(e), Status::CudaError);
        assert!(last().contains("batch of copies on a caller's stream"), "{}", last());
        upcxx_extra_nvshmem_engine_free(e);
        let unregister: extern "C" fn(*mut libc::c_void) -> i32 = std::mem::transmute(standin_fn(c"uxn_standin_unregister_device_range"));
        for v in src.iter().chain(dst.iter()) {
            assert_eq!(unregister(v.as_ptr() as *mut libc::c_void), 0);
        }
    }
}

/// The stand-in's sticky faults (`uxn_standin_sticky_faults(1)`) while it lives; cleared, and the
/// default mode back, when it goes (also when an assertion fails: later tests see no fault).
struct StickyFaults(extern "C" fn(i32) -> i32);
impl StickyFaults {
    fn on() -> Self {
        // SAFETY: its C signature, int (int).
        let f: extern "C" fn(i32) -> i32 = unsafe { std::mem::transmute(standin_fn(c"uxn_standin_sticky_faults")) };
        assert_eq!(f(1), 0, "the stand-in was already in its sticky mode");
        StickyFaults(f)
    }
}
impl Drop for StickyFaults {
    fn drop(&mut self) {
        (self.0)(0);
    }
}

/// A copy on a caller's stream that fails (the stand-in fails it asynchronously, its fault sticky
/// as a GPU's: `uxn_standin_sticky_faults`) leaves the word of the `after()` behind it unwritten:
/// a faulted context runs nothing more on its streams, so the stream write never stores. The
/// failure is found by the engine's probe of the context, at most one per millisecond while a
/// word has not landed: polls more than 1 ms apart must each still probe, and the wait is
/// reported over, with the fault, within a bounded time. The stream is held by a stream ticket
/// until the first poll has probed (no fault yet), so every later probe comes from the timed rule
/// (`src/engine/core/words.rs`, `probe_due`). The copy itself (one `cuMemcpyAsync`) is told by
/// its event: failed, and redone.
#[test]
fn standin_a_fault_before_a_word_is_found_by_polls_far_apart() {
    if !driver() {
        return;
    }
    let _serial = standin_serial();
    let e = new_engine(0);
    let (src, mut dst) = (vec![3u8; 4096], vec![0u8; 4096]);
    let c = copy_of(&src, &mut dst, EngineFlag::OnStream as u32); // the legacy stream (NULL)
    let (mut gate, mut t, mut w, mut r, mut settled) = (0u32, 0u64, 0u64, -1, EngineSettled::Landed);
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_new(e, &mut gate), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_stream_wait_ticket(e, null_mut(), gate), Status::Ok, "{}", last());
        let writes: extern "C" fn() -> libc::c_long = std::mem::transmute(standin_fn(c"uxn_standin_stream_writes"));
        let records: extern "C" fn() -> libc::c_long = std::mem::transmute(standin_fn(c"uxn_standin_event_records"));
        let (writes0, records0) = (writes(), records());
        let sticky = StickyFaults::on();
        standin_fail_next_copies(1);
        assert_eq!(upcxx_extra_nvshmem_engine_copy(e, &c, &mut t), Status::Ok, "{}", last());
        assert_eq!(standin_fail_next_copies(0), 0, "the copy did not take the injected failure");
        assert_eq!((writes(), records()), (writes0, records0 + 1), "the copy on the stream is told by an event");
        assert_eq!(upcxx_extra_nvshmem_engine_after(e, null_mut(), &mut w), Status::Ok, "{}", last());
        assert_eq!(writes(), writes0 + 1, "after() is told by a stream write");
        // The stream waits for the gate: the first poll probes and finds no fault.
        assert_eq!(upcxx_extra_nvshmem_engine_poll(e, w, null_mut(), &mut r), Status::Ok);
        assert_eq!(r, NOT_READY, "the wait behind the held stream");
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, gate), Status::Ok);
        // Polls 3 ms apart: each is due for a probe.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while r == NOT_READY && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(3));
            assert_eq!(upcxx_extra_nvshmem_engine_poll(e, w, null_mut(), &mut r), Status::Ok);
        }
        assert_eq!(r, UNKNOWN, "polls 3 ms apart never found the fault before the wait's word (5 s)");
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, w, r, &c, &mut settled), Status::Ok);
        assert_eq!(settled, EngineSettled::Report, "a wait over a fault is reported");
        // The copy's event says it failed.
        let rc = poll_until_over(e, t, null_mut());
        drop(sticky); // the fault cleared (a new context): the engine's drain queries again
        assert!(rc.is_some_and(|rc| rc != 0), "the failed copy's event reported {rc:?}");
        let rc = rc.unwrap();
        assert!(dst.iter().all(|&b| b == 0), "the failed copy moved bytes");
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, t, rc, &c, &mut settled), Status::Ok);
        assert_eq!(settled, EngineSettled::Redo, "a failed copy on a caller's stream is redone");
        assert_eq!(upcxx_extra_nvshmem_engine_take_error(e), Status::CudaError);
        upcxx_extra_nvshmem_engine_free(e);
    }
}

/// `upcxx_extra_nvshmem_copy_batch` after a launch the driver refused (the stand-in's
/// `uxn_standin_fail_next_launches`): the library unloads its kernels of that context then, and
/// the next launch, in the same thread (which keeps the kernels it launched last) or another,
/// loads them again (the stand-in refuses a function of an unloaded module, as a GPU does). A
/// batch of one copy (its own kernel) and of two land before and after.
#[test]
fn standin_a_refused_launch_loads_the_kernels_again() {
    if !driver() {
        return;
    }
    let _serial = standin_serial();
    type Register = extern "C" fn(*mut libc::c_void, usize, i32) -> i32;
    type ByPtr = extern "C" fn(*mut libc::c_void) -> i32;
    type ByInt = extern "C" fn(i32) -> i32;
    type NoArgs = extern "C" fn();
    // SAFETY: the stand-in's C signatures.
    let register = unsafe { std::mem::transmute::<*mut libc::c_void, Register>(standin_fn(c"uxn_standin_register_device_range")) };
    let unregister = unsafe { std::mem::transmute::<*mut libc::c_void, ByPtr>(standin_fn(c"uxn_standin_unregister_device_range")) };
    let fail_launches = unsafe { std::mem::transmute::<*mut libc::c_void, ByInt>(standin_fn(c"uxn_standin_fail_next_launches")) };
    let drain = unsafe { std::mem::transmute::<*mut libc::c_void, NoArgs>(standin_fn(c"uxn_standin_drain")) };
    let src: Vec<u8> = (0..256u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; 256];
    assert_eq!(register(src.as_ptr() as *mut libc::c_void, src.len(), 0), 0);
    assert_eq!(register(dst.as_mut_ptr().cast(), dst.len(), 0), 0);
    let descs = [
        CopyDesc { src: src.as_ptr().cast(), dst: dst.as_mut_ptr().cast(), bytes: 128 },
        CopyDesc { src: src[128..].as_ptr().cast(), dst: dst[128..].as_mut_ptr().cast(), bytes: 128 },
    ];
    let batch = |n: usize| unsafe { upcxx_extra_nvshmem_copy_batch(0, null_mut(), descs.as_ptr(), n) };
    let landed = |n: usize, dst: &mut Vec<u8>| {
        dst.fill(0);
        assert_eq!(batch(n), Status::Ok, "a batch of {n}: {}", last());
        drain();
        assert_eq!(dst[..128 * n], src[..128 * n], "a batch of {n} did not land");
        assert!(dst[128 * n..].iter().all(|&b| b == 0), "a batch of {n} wrote past its copies");
    };
    landed(2, &mut dst);
    landed(1, &mut dst);
    assert_eq!(fail_launches(1), 0);
    assert_eq!(batch(2), Status::CudaError, "the refused launch");
    assert!(last().contains("cuLaunchKernel") && last().contains("device 0"), "{}", last());
    landed(1, &mut dst);
    landed(2, &mut dst);
    // Another thread, which never launched: it finds the kernels loaded again.
    let (sp, dp) = (src.as_ptr() as usize, dst.as_mut_ptr() as usize);
    std::thread::spawn(move || {
        let one = CopyDesc { src: sp as *const libc::c_void, dst: dp as *mut libc::c_void, bytes: 256 };
        assert_eq!(unsafe { upcxx_extra_nvshmem_copy_batch(0, null_mut(), &one, 1) }, Status::Ok, "{}", last());
    })
    .join()
    .expect("the other thread's batch");
    drain();
    assert_eq!(dst, src, "the other thread's copy did not land");
    assert_eq!(unregister(src.as_ptr() as *mut libc::c_void), 0);
    assert_eq!(unregister(dst.as_mut_ptr().cast()), 0);
}

/// A wake for `engine_park` whose context is a [`WakeCount`]: counts its calls, takes the ticket
/// once `refuse` is 0 (each call while it is not lowers it).
extern "C" fn count_wake(ctx: *mut libc::c_void) -> bool {
    use std::sync::atomic::Ordering::SeqCst;
    // SAFETY: the tests pass a WakeCount that outlives the engine.
    let w = unsafe { &*(ctx as *const WakeCount) };
    w.calls.fetch_add(1, SeqCst);
    w.refuse.fetch_update(SeqCst, SeqCst, |r| r.checked_sub(1)).is_err()
}

#[derive(Default)]
struct WakeCount {
    calls: std::sync::atomic::AtomicUsize,
    refuse: std::sync::atomic::AtomicUsize,
}

impl WakeCount {
    fn ctx(&self) -> *mut libc::c_void {
        self as *const WakeCount as *mut libc::c_void
    }
    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn parked(e: *const EngineHandle) -> usize {
    let mut c = EngineCounts::default();
    assert_eq!(unsafe { upcxx_extra_nvshmem_engine_counts(e, &mut c) }, Status::Ok);
    c.parked
}

/// Holds the legacy stream (NULL) with a stream ticket of `e` not done yet: its number.
fn hold_legacy_stream(e: *const EngineHandle) -> u32 {
    let mut gate = 0u32;
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_new(e, &mut gate), Status::Ok);
        assert_eq!(upcxx_extra_nvshmem_engine_stream_wait_ticket(e, null_mut(), gate), Status::Ok, "{}", last());
    }
    gate
}

/// An `after()` of the legacy stream, held (its poll says not ready), parked with `w`'s wake: its
/// ticket.
fn park_after_on_held_stream(e: *const EngineHandle, w: &WakeCount) -> u64 {
    let (mut t, mut r) = (0u64, -1);
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_engine_after(e, null_mut(), &mut t), Status::Ok, "{}", last());
        assert_eq!(upcxx_extra_nvshmem_engine_poll(e, t, null_mut(), &mut r), Status::Ok);
        assert_eq!(r, NOT_READY, "the wait behind the held stream");
        assert_eq!(upcxx_extra_nvshmem_engine_park(e, t, Some(count_wake), w.ctx()), Status::Ok, "{}", last());
    }
    t
}

/// An `after()` parked with the watcher while its stream is held (a stream ticket not done): the
/// wake is not called while the stream has not reached the wait, and is called once when it has;
/// a wake that cannot take the ticket is called again; the ticket then polls LANDED. Without the
/// watcher the caller would have to poll (docs/streams.md, "What `after()` frees").
#[test]
fn standin_a_parked_wait_is_woken_once_when_its_stream_reaches_it() {
    if !driver() {
        return;
    }
    let _serial = standin_serial();
    let e = new_engine(0);
    for refuse in [0usize, 2] {
        let w = WakeCount::default();
        w.refuse.store(refuse, std::sync::atomic::Ordering::SeqCst);
        let (mut r, mut settled) = (-1, EngineSettled::Report);
        let gate = hold_legacy_stream(e);
        let t = park_after_on_held_stream(e, &w);
        unsafe {
            assert_eq!(parked(e), 1);
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert_eq!(w.calls(), 0, "woken while the stream had not reached the wait");
            assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, gate), Status::Ok);
            let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while parked(e) != 0 && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!((parked(e), w.calls()), (0, refuse + 1), "woken once taken, after {refuse} refusals (10 s)");
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(w.calls(), refuse + 1, "woken again after the wake took the ticket");
            assert_eq!(upcxx_extra_nvshmem_engine_poll(e, t, null_mut(), &mut r), Status::Ok);
            assert_eq!(r, LANDED, "woken before the wait was over");
            assert_eq!(upcxx_extra_nvshmem_engine_complete(e, t, r, null(), &mut settled), Status::Ok);
            assert_eq!(settled, EngineSettled::Landed);
            assert_eq!(upcxx_extra_nvshmem_engine_park(e, t, Some(count_wake), w.ctx()), Status::InvalidArgument, "settled");
        }
    }
    unsafe { upcxx_extra_nvshmem_engine_free(e) };
}

/// `engine_free` with a wait still parked (its stream held by a stream ticket) calls its wake once
/// before it returns, and nothing after.
#[test]
fn standin_engine_free_wakes_what_is_still_parked() {
    if !driver() {
        return;
    }
    let _serial = standin_serial();
    let e = new_engine(0);
    let w = WakeCount::default();
    hold_legacy_stream(e);
    park_after_on_held_stream(e, &w);
    unsafe {
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(w.calls(), 0);
        upcxx_extra_nvshmem_engine_free(e);
    }
    assert_eq!(w.calls(), 1, "engine_free did not wake the parked wait once");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(w.calls(), 1, "woken after engine_free");
}

/// A parked `after()` whose stream's context faults before the stream writes its word (a failed
/// copy before it, the fault sticky as a GPU's): the stream never writes the word, and the
/// watcher still wakes the wait, from its poll of the engine for a fault (at most one a
/// millisecond), well within 5 s; the wait then polls the fault (UNKNOWN), reported.
#[test]
fn standin_a_parked_wait_behind_a_fault_is_woken() {
    if !driver() {
        return;
    }
    let _serial = standin_serial();
    let e = new_engine(0);
    let (src, mut dst) = (vec![3u8; 4096], vec![0u8; 4096]);
    let c = copy_of(&src, &mut dst, EngineFlag::OnStream as u32); // the legacy stream (NULL)
    let w = WakeCount::default();
    let (mut t, mut r, mut settled) = (0u64, -1, EngineSettled::Landed);
    let gate = hold_legacy_stream(e);
    let sticky = StickyFaults::on();
    standin_fail_next_copies(1);
    assert_eq!(unsafe { upcxx_extra_nvshmem_engine_copy(e, &c, &mut t) }, Status::Ok, "{}", last());
    let a = park_after_on_held_stream(e, &w);
    unsafe {
        assert_eq!(upcxx_extra_nvshmem_engine_ticket_done(e, gate), Status::Ok);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while w.calls() == 0 && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(w.calls(), 1, "the parked wait behind a fault was not woken within 5 s");
        assert_eq!(upcxx_extra_nvshmem_engine_poll(e, a, null_mut(), &mut r), Status::Ok);
        assert_eq!(r, UNKNOWN, "the wait polls the fault");
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, a, r, &c, &mut settled), Status::Ok);
        assert_eq!(settled, EngineSettled::Report, "a wait over a fault is reported");
        let rc = poll_until_over(e, t, null_mut());
        drop(sticky);
        let rc = rc.expect("the failed copy's event");
        assert_eq!(upcxx_extra_nvshmem_engine_complete(e, t, rc, &c, &mut settled), Status::Ok);
        let _ = upcxx_extra_nvshmem_engine_take_error(e);
        upcxx_extra_nvshmem_engine_free(e);
    }
}

/// What the child of `standin_no_wake_runs_once_the_process_exits` shares with its exit handler.
static EXIT_ENGINE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static EXIT_GATE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
static EXIT_WAKES: WakeCount = WakeCount { calls: std::sync::atomic::AtomicUsize::new(0), refuse: std::sync::atomic::AtomicUsize::new(0) };

/// The child's exit handler, registered before the engine's watcher starts, so it runs after the
/// library's own (`atexit` runs handlers last registered first): it lets the stream reach the
/// parked wait, gives a watcher 100 ms to wake it, and prints how many wakes ran.
extern "C" fn exit_child_handler() {
    use std::sync::atomic::Ordering::SeqCst;
    let e = EXIT_ENGINE.load(SeqCst) as *const EngineHandle;
    let _ = upcxx_extra_nvshmem_engine_ticket_done(e, EXIT_GATE.load(SeqCst));
    std::thread::sleep(std::time::Duration::from_millis(100));
    let line = format!("WAKES AT EXIT {}\n", EXIT_WAKES.calls());
    // SAFETY: a write of a buffer to stdout.
    unsafe { libc::write(1, line.as_ptr().cast(), line.len()) };
}

/// The child process (`UXN_EXIT_CHILD` set): parks an `after()` behind a held stream, then exits.
#[test]
fn exit_child() {
    if std::env::var_os("UXN_EXIT_CHILD").is_none() || !driver() {
        return;
    }
    use std::sync::atomic::Ordering::SeqCst;
    let e = new_engine(0);
    // SAFETY: registers a function with no argument.
    assert_eq!(unsafe { libc::atexit(exit_child_handler) }, 0);
    EXIT_ENGINE.store(e as usize, SeqCst);
    EXIT_GATE.store(hold_legacy_stream(e), SeqCst);
    park_after_on_held_stream(e, &EXIT_WAKES);
    std::process::exit(0);
}

/// At process exit the engine's watcher stops and wakes nothing, even for a wait whose stream
/// arrives then: a wake queues onto UPC++, which may be gone by then (the C++ layer's wake is
/// `persona::lpc_ff`). Run in a child process (`exit_child`), whose exit handler, running after
/// the library's, lets the stream reach the parked wait.
#[test]
fn standin_no_wake_runs_once_the_process_exits() {
    if !driver() {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "exit_child", "--nocapture", "--test-threads=1"])
        .env("UXN_EXIT_CHILD", "1")
        .output()
        .expect("the child runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the child failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("WAKES AT EXIT 0"), "a wake ran during the process's exit: {text}");
}
