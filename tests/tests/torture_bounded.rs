//! Guarantee: under SIGKILLs at random moments of a mixed workload (pure, idempotent and
//! guarded steps under every policy, driven by hand, fired by schedulers and run by runtimes
//! from a limited queue, with messages sent and executions cancelled from other processes,
//! several processes sharing the file), no effect is repeated where its policy forbids it, no
//! acknowledged result, message or cancel is lost, no effect is unknown to the journal, no
//! queue runs over its limit, every execution ends as its plan and its cancels say, nothing is
//! left stuck or locked, and the file passes `integrity_check` — with both durabilities.
//!
//! Method: the `torture` binary with a fixed seed and a few hundred kills per durability (the
//! long run of 10,000+ kills is run by hand, see docs/testing.md). It exits 0 only when
//! its checker found no violation; its last line carries the figures.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use durably_tests::torture::bounded::{field, run_clean};

const TORTURE: &str = env!("CARGO_BIN_EXE_torture");
const ITERATIONS: u64 = 400;
const SEED: u64 = 6;

fn torture(durability: &str) {
    let args = [
        "--iterations".to_owned(),
        ITERATIONS.to_string(),
        "--seed".to_owned(),
        SEED.to_string(),
        "--durability".to_owned(),
        durability.to_owned(),
    ];
    let last = run_clean(TORTURE, &args, ITERATIONS, "ok");
    assert!(field(&last, "kills") >= ITERATIONS, "{last}");
}

#[test]
fn torture_with_full_durability() {
    torture("full");
}

#[test]
fn torture_with_process_crash_durability() {
    torture("process-crash");
}
