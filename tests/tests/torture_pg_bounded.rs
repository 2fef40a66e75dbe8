//! Guarantee: on PostgreSQL, under SIGKILLs at random moments, workers stopped (SIGSTOP) for
//! longer than their lease and woken again after a peer took their executions over, and
//! workers whose database sessions the server ended, the torture workload keeps every
//! invariant of the SQLite run (see `torture_bounded.rs`): nothing repeated where its policy
//! forbids it, nothing acknowledged lost, nothing unknown to the journal, nothing stuck or
//! locked at the end. A woken or cut-off worker writes nothing after losing its ownership: it
//! may only exit on `LockLost`, `InstanceLost` or its lost session, and its lost runs' effects
//! are excused only when a later holder's epoch fences them.
//!
//! Method: the `torture` binary with `--backend postgres` in a fresh schema of the server
//! `DURABLY_POSTGRES_URL` names (it fails loudly without one), a fixed seed and a few hundred
//! interruptions, one in ten a stop and one in ten a partition. It exits 0 only when its
//! checker found no violation and no worker failed unexpectedly; its last line carries the
//! figures.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::process::Command;

const TORTURE: &str = env!("CARGO_BIN_EXE_torture");
const ITERATIONS: u64 = 200;
const SEED: u64 = 7;
/// A worker opening a journal on PostgreSQL needs longer than on SQLite before it does work.
const KILL_DELAY_MS_MAX: u64 = 400;
const STOP_PERCENT: u64 = 10;
const PARTITION_PERCENT: u64 = 10;

fn field(line: &str, name: &str) -> u64 {
    line.split(' ')
        .find_map(|field| field.strip_prefix(&format!("{name}=")))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
}

#[test]
fn torture_on_postgres_with_kills_stops_and_partitions() {
    assert!(
        std::env::var_os("DURABLY_POSTGRES_URL").is_some_and(|url| !url.is_empty()),
        "this test needs a PostgreSQL server in DURABLY_POSTGRES_URL: start a private one with \
         `eval \"$(.ci/pg start)\"`, or run the test under `.ci/pg run cargo test ...`"
    );
    let output = Command::new(TORTURE)
        .args(["--backend", "postgres"])
        .args(["--iterations", &ITERATIONS.to_string()])
        .args(["--seed", &SEED.to_string()])
        .args(["--kill-delay-ms-max", &KILL_DELAY_MS_MAX.to_string()])
        .args(["--stop-percent", &STOP_PERCENT.to_string()])
        .args(["--partition-percent", &PARTITION_PERCENT.to_string()])
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
        " early_wakes=0 ",
        " child_dups=0 ",
        " patch_flips=0 ",
        " fork_reruns=0 ",
        " integrity=n/a ",
    ] {
        assert!(last.contains(clean), "{clean:?} in {last}");
    }
    let (kills, stops, partitions) = (
        field(last, "kills"),
        field(last, "stops"),
        field(last, "partitions"),
    );
    assert!(stops > 0 && partitions > 0, "{last}");
    // An iteration whose victim is stopped, or had no session yet, does nothing else.
    assert!(kills + stops + partitions >= ITERATIONS * 3 / 4, "{last}");
    assert!(field(last, "executions") > 0, "{last}");
}
