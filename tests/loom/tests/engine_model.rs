//! The copy engine's protocol (src/engine/core/) under loom, over a model GPU: a thread that
//! runs each stream's work in order (a copy, a batch launch, a wait for an event), events that
//! complete when the work before them has run, and a record of which copies ran, in which order.
//! Every interleaving of the host threads and the GPU (up to the preemption bound) must keep the
//! engine's promises:
//! - a ticket reported landed is a copy that ran (no completion before its bytes);
//! - the engine's stream runs its copies in issue order (a pending batch goes first);
//! - drain() returns with nothing left on the stream it destroys, every copy run;
//! - a failed batch launch falls back to one copy each, every ticket landing;
//! - in a fork() child nothing reaches the GPU;
//! - a copy on a caller's stream behind a stream ticket (a copy_on_stream that is upcxx::copy)
//!   runs once the ticket is done, by whichever host thread, and its ticket and an after()
//!   behind it land; drain() releases a ticket nothing will mark done instead of hanging;
//! - tickets done out of order open the gate in issue order only;
//! - copies on a caller's stream (one launch that writes the ticket's word, a copy and a stream
//!   write, a batch ending with launches) land after they ran, and drain() waits for them;
//! - a copy the GPU fails (the model's context then faults) is polled with the fault and settled
//!   REDO while the engine is open, REPORT once closed, and drain() counts only those not redone;
//!   on a caller's stream a failed copy is redone, a failed batch and a wait only reported;
//! - wait_all() returns with every copy issued run (a batch not yet launched, a copy issued after
//!   the pending mark), their outcomes known; a failure blames only the copies since the mark
//!   before it;
//! - a stream being captured into a CUDA graph is refused for copies on it or after it;
//! - a copy the driver refuses after a refused launch is over with the refusal, those before it
//!   with what the host's wait found, and no later copy is taken for landed;
//! - every event the engine made is destroyed once when it is dropped (callers' tickets told by
//!   events where stream writes are refused included);
//! - copy_on_stream launches only small copies of device memory, and a batch ending with a launch
//!   needs no stream write; on a stream of another device the copies keep that stream's order,
//!   and a gate wait there uses that device's context;
//! - plain copies wait for no caller's stream, and only small copies of device memory are batched;
//! - an after() whose word the calling thread's context refuses (a stream of another device) is
//!   written in that device's context and probed for a fault there; on a stream whose device the
//!   driver cannot tell, its event is recorded trying each device's context.
//!
//! After every run() the model also checks that nothing was enqueued on a stream in another
//! device's context, that no stream was queried in another device's context, and that each
//! launch's completion counter is a word it handed out.
//!
//! The bugs these scenarios must catch come from cargo-mutants (docs/testing.md): the engine's
//! source has no bug switch.

pub mod engine_sim;

use engine_sim::*;

#[test]
fn batch_then_unbatched_copy_keeps_issue_order() {
    scenario_order();
}

#[test]
fn lone_batched_copy_lands_only_after_its_launch() {
    scenario_lone_batched();
}

#[test]
fn older_mark_landing_does_not_land_newer_copies() {
    scenario_two_marks();
}

#[test]
fn drain_leaves_nothing_on_the_stream() {
    scenario_drain();
}

#[test]
fn fork_child_reaches_no_gpu() {
    scenario_fork();
}

#[test]
fn failed_launch_falls_back_to_copies() {
    scenario_failed_launch();
}

#[test]
fn two_host_threads_issue_and_poll() {
    scenario_two_threads();
}

#[test]
fn stream_ticket_released_by_another_thread() {
    scenario_ticket_released_by_another_thread();
}

#[test]
fn drain_releases_pending_stream_tickets() {
    scenario_drain_releases_tickets();
}

#[test]
fn stream_words_land_after_their_copies() {
    scenario_stream_words();
}

#[test]
fn gate_counts_tickets_done_in_issue_order() {
    scenario_gate_out_of_order();
}

#[test]
fn failed_copy_is_redone_while_open() {
    scenario_failed_copy();
}

#[test]
fn failed_copy_on_a_closed_engine_is_reported() {
    scenario_failed_copy_closed();
}

#[test]
fn failures_on_callers_streams() {
    scenario_failed_on_stream();
}

#[test]
fn tickets_never_issued_and_counts() {
    scenario_tickets_and_counts();
}

#[test]
fn copy_after_runs_after_the_streams_work() {
    scenario_copy_after();
}

#[test]
fn wait_all_launches_the_batch_and_trusts_no_stale_mark() {
    scenario_wait_all();
}

#[test]
fn a_failure_blames_only_the_copies_since_the_last_mark() {
    scenario_failure_blames_its_copies_only();
}

#[test]
fn streams_being_captured_are_refused() {
    scenario_stream_capture();
}

#[test]
fn refused_launch_then_refused_copy() {
    scenario_refused_fallback_copy();
}

#[test]
fn callers_tickets_told_by_events_leak_none() {
    scenario_event_tickets();
}

#[test]
fn refused_copy_retires_the_marks_before_it() {
    scenario_refused_copy_retires_marks();
}

#[test]
fn copy_on_stream_paths_by_size_and_memory() {
    scenario_on_stream_paths();
}

#[test]
fn copies_on_a_stream_of_another_device_keep_its_order() {
    scenario_other_device_stream();
}

#[test]
fn plain_copies_wait_for_no_callers_stream() {
    scenario_plain_copies();
}

#[test]
fn a_word_written_in_another_context_is_probed_there() {
    scenario_word_in_another_context();
}

#[test]
fn after_on_a_stream_of_an_unknown_device_tries_each_context() {
    scenario_stream_of_unknown_device();
}
