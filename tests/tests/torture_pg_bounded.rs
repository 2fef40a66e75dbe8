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

use durably_tests::torture::bounded::{field, run_clean};

const TORTURE: &str = env!("CARGO_BIN_EXE_torture");
const ITERATIONS: u64 = 200;
const SEED: u64 = 7;
/// A worker opening a journal on PostgreSQL needs longer than on SQLite before it does work.
const KILL_DELAY_MS_MAX: u64 = 400;
const STOP_PERCENT: u64 = 10;
const PARTITION_PERCENT: u64 = 10;

#[test]
fn torture_on_postgres_with_kills_stops_and_partitions() {
    assert!(
        std::env::var_os("DURABLY_POSTGRES_URL").is_some_and(|url| !url.is_empty()),
        "this test needs a PostgreSQL server in DURABLY_POSTGRES_URL: start a private one with \
         `eval \"$(.ci/pg start)\"`, or run the test under `.ci/pg run cargo test ...`"
    );
    let args = [
        ("--backend", "postgres".to_owned()),
        ("--iterations", ITERATIONS.to_string()),
        ("--seed", SEED.to_string()),
        ("--kill-delay-ms-max", KILL_DELAY_MS_MAX.to_string()),
        ("--stop-percent", STOP_PERCENT.to_string()),
        ("--partition-percent", PARTITION_PERCENT.to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_owned(), value])
    .collect::<Vec<_>>();
    let last = run_clean(TORTURE, &args, ITERATIONS, "n/a");
    let (kills, stops, partitions) = (
        field(&last, "kills"),
        field(&last, "stops"),
        field(&last, "partitions"),
    );
    assert!(stops > 0 && partitions > 0, "{last}");
    // An iteration whose victim is stopped, or had no session yet, does nothing else.
    assert!(kills + stops + partitions >= ITERATIONS * 3 / 4, "{last}");
    assert!(field(&last, "executions") > 0, "{last}");
}
