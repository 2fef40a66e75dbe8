//! Guarantee: several scheduler processes sharing one journal file, each also a runtime
//! serving the job's multi-step workflow, fire each slot of a job exactly once: none twice,
//! none missing.
//!
//! Method: three `scheduler_worker` processes run a 100 ms interval job (catch-up `All`, so a
//! late pass fires missed slots rather than skipping them; overlap `Allow`, so a fire slowed by
//! the three processes' commits does not make the next slot skip) until the independent effect
//! ledger, which every effect step appends to with `O_APPEND`, spans about three seconds of
//! slots; then they are shut down gracefully (each waits for the started fires to end). Every
//! slot from the first to the last in the ledger must appear exactly once (the slots are
//! contiguous on the 100 ms grid), and the ledger in the database (`fire_ledger`, whose state
//! follows each fire's execution) must agree: one completed fire per slot, none unfinished.

mod support;

use std::collections::BTreeSet;

use support::{Scratch, wait_until};

#[test]
fn three_processes_fire_every_slot_exactly_once() {
    let scratch = Scratch::new();
    // Create the file first so the three do not race to migrate a file that does not exist.
    drop(durably_journal::Journal::open(&scratch.database).unwrap());
    let workers: Vec<_> = (0..3)
        .map(|_| scratch.worker(100, "skip", false, "allow"))
        .collect();
    wait_until("three seconds of slots", || scratch.effects().len() >= 30);
    for worker in workers {
        worker.finish();
    }

    let conn = rusqlite::Connection::open(&scratch.database).unwrap();
    let mut statement = conn
        .prepare(
            "SELECT fire_ledger.slot, state, reason FROM fire_ledger WHERE state <> 'completed'",
        )
        .unwrap();
    let odd: Vec<(String, String, Option<String>)> = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(odd.is_empty(), "fires not completed: {odd:?}");
    let by_slot = scratch.effects_by_slot();
    let duplicated: Vec<_> = by_slot
        .iter()
        .filter(|(_, calls)| calls.len() != 1)
        .collect();
    assert!(
        duplicated.is_empty(),
        "slots run more than once: {duplicated:?}"
    );
    let slots: Vec<i64> = by_slot.keys().copied().collect();
    assert!(slots.len() >= 30, "{slots:?}");
    let gaps: Vec<_> = slots
        .windows(2)
        .filter(|pair| pair[1] - pair[0] != 100)
        .collect();
    assert!(gaps.is_empty(), "slots missing between: {gaps:?}");
    let keys: BTreeSet<&str> = by_slot
        .values()
        .map(|calls| calls[0].key.as_str())
        .collect();
    assert_eq!(
        keys.len(),
        slots.len(),
        "every fire has its own idempotency key"
    );
    // The work was really shared: more than one process ran bodies.
    let pids: BTreeSet<u32> = by_slot.values().map(|calls| calls[0].pid).collect();
    assert!(pids.len() >= 2, "only {pids:?} ran bodies");

    let completed: i64 = scratch.query(
        "SELECT count(*) FROM fire_ledger WHERE state = 'completed'",
        [],
    );
    let unfinished: i64 = scratch.query(
        "SELECT count(*) FROM fire_ledger WHERE state <> 'completed'",
        [],
    );
    assert_eq!(completed, slots.len() as i64);
    assert_eq!(unfinished, 0);
    let first: i64 = scratch.query("SELECT min(slot_ms) FROM fires", []);
    assert_eq!(first, slots[0]);
}
