//! The engine's planted bugs (`engine_core::planted`), each turned on in turn: the scenario of
//! engine_model.rs written for it must fail. A process of its own (the bug switch is global), one
//! test (the bugs one after another).

pub mod engine_sim;

use engine_sim::*;
use std::sync::atomic::Ordering;
use upcxx_extra_nvshmem_loom::engine_core::planted;

#[test]
fn every_planted_bug_is_caught() {
    let cases: [(u8, &str, fn()); 5] = [
        (planted::UNBATCHED_PASSES_BATCH, "an unbatched copy passes the batch", scenario_order),
        (planted::MARK_BEFORE_LAUNCH, "a mark before the batch's launch", scenario_lone_batched),
        (planted::NEWER_MARK_LANDS, "the older mark lands the newer copies", scenario_two_marks),
        (planted::DRAIN_BEFORE_IDLE, "drain() before the stream is idle", scenario_drain),
        (planted::FORK_UNCHECKED, "copies issued in a fork() child", scenario_fork),
    ];
    for (bug, what, scenario) in cases {
        planted::BUG.store(bug, Ordering::Relaxed);
        let caught = std::panic::catch_unwind(scenario).is_err();
        planted::BUG.store(0, Ordering::Relaxed);
        assert!(caught, "the model did not catch the planted bug: {what}");
        eprintln!("caught: {what}");
    }
    // And with no bug on, the same scenarios pass.
    scenario_order();
    scenario_drain();
}
