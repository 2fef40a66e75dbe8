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

use std::process::Command;

const TORTURE: &str = env!("CARGO_BIN_EXE_torture");
const ITERATIONS: u64 = 400;
const SEED: u64 = 6;

fn torture(durability: &str) {
    let output = Command::new(TORTURE)
        .args(["--iterations", &ITERATIONS.to_string()])
        .args(["--seed", &SEED.to_string(), "--durability", durability])
        .env_remove("FAILPOINTS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    eprintln!("{last}");
    assert!(
        output.status.success(),
        "torture failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        last.starts_with(&format!("torture: iterations={ITERATIONS} ")),
        "{last}"
    );
    for clean in [
        " duplicated=0 ",
        " lost=0 ",
        " unexpected=0 ",
        " stuck=0 ",
        " reopened=0 ",
        " leaked_locks=0 ",
        " over_limit=0 ",
        " wrong_end=0 ",
        " bad_messages=0 ",
        " after_cancel=0 ",
        " integrity=ok ",
    ] {
        assert!(last.contains(clean), "{last}");
    }
    let kills: u64 = last
        .split(' ')
        .find_map(|field| field.strip_prefix("kills="))
        .and_then(|kills| kills.parse().ok())
        .unwrap();
    assert!(kills >= ITERATIONS, "{last}");
}

#[test]
fn torture_with_full_durability() {
    torture("full");
}

#[test]
fn torture_with_process_crash_durability() {
    torture("process-crash");
}
