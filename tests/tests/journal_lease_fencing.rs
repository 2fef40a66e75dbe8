//! Guarantee: a lease keeps the journal right, and says plainly what it cannot keep right. A
//! holder frozen past its lease inside a guarded step, after its intent, loses the execution,
//! but it is still alive and may still perform the effect when it goes on. So `seen_intent`,
//! the operator's (`Operator::seen_intent`) and a read-only inspector's
//! (`Inspector::seen_intent`, what `durably show` asks) alike, refuses to hand out the step
//! (`LeaseExpiredHolderAlive`) while that process may still run: while it holds its expired
//! lock, after another process took the lock over, and after a sweep reclaimed it; once the
//! process is dead, the step is handed out. If
//! the step is run again anyway (an operator answering without looking, or a `Retry` or
//! `Reconcile` policy), the fencing token in the closure's `StepKey` lets an outside system
//! refuse the late effect: the successor's token is higher.
//!
//! Method: `journal_worker fenced-effect` children with a 200 ms lease and the guarded step
//! `charge` under `Fail`, whose closure writes to an effect sink (an SQLite file recording the
//! highest token per idempotency key, and refusing a lower one). The first child reports from
//! inside the closure, after its intent, and is frozen with SIGSTOP (checked in `/proc`); the
//! test waits until its recorded heartbeat plus lease has passed on the real clock. A second
//! child takes the execution over and stops at the ambiguous step; this process asks
//! `seen_intent` as the operator; a third child runs the step again after a forced answer; the
//! frozen child is continued with SIGCONT and told to go on; the sink's log shows which effect
//! was accepted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use chrono::Utc;
use durably_journal::{Error, Journal, Resolution, Status};
use serde_json::Value;
use support::journal::{Held, run};
use support::lock::{resume, stop};
use support::{Scratch, query_pairs, runtime, wait_until};
use uuid::Uuid;

const LEASE_MS: i64 = 200;

/// Where the effect sink of a scratch directory lives.
fn sink(scratch: &Scratch) -> String {
    scratch.dir.path().join("sink.db").display().to_string()
}

/// Starts a worker that reports from inside the closure of `charge` and waits there.
fn start_inside(scratch: &Scratch, id: Uuid) -> Held {
    let (db, sink) = (scratch.database.display().to_string(), sink(scratch));
    let lease = LEASE_MS.to_string();
    let mut held = Held::spawn(&["fenced-effect", &db, &sink, &id.to_string(), &lease, "wait"]);
    let inside = held.next_line();
    assert_eq!(inside["inside"], 1, "the first holder's token: {inside}");
    held
}

/// Runs a worker that performs the step at once, to its end, and returns its answer.
fn run_to_end(scratch: &Scratch, id: Uuid) -> Value {
    let (db, sink) = (scratch.database.display().to_string(), sink(scratch));
    let lease = LEASE_MS.to_string();
    let args = ["fenced-effect", &db, &sink, &id.to_string(), &lease, "go"];
    let finished = run(&args, &[]);
    finished.answer().clone()
}

/// Freezes `held` and waits until its lease, as its lock row records it, has expired.
fn freeze_past_its_lease(scratch: &Scratch, held: &Held, id: Uuid) {
    stop(u32::try_from(held.pid()).unwrap());
    let conn = durably_db::Connection::from(rusqlite::Connection::open(&scratch.database).unwrap());
    let holder = durably_lock::read(&conn, &id.to_string())
        .unwrap()
        .and_then(|row| row.holder)
        .unwrap();
    assert_eq!(holder.pid, held.pid());
    let heartbeat = durably_lock::parse_timestamp(&holder.heartbeat_at).unwrap();
    let deadline = heartbeat + chrono::Duration::milliseconds(LEASE_MS + 1);
    wait_until("the frozen holder's lease has expired", || {
        Utc::now() > deadline
    });
}

/// Asks `seen_intent` for step 0, as the operator of `journal` and as an inspector of the same
/// file, and checks both are refused for the frozen holder `pid`.
fn assert_refused_for(journal: &Journal, id: Uuid, pid: i64) {
    let inspector = Journal::inspect(journal.path()).unwrap();
    let answers = [
        ("operator", journal.operator().seen_intent(id, 0)),
        ("inspector", inspector.seen_intent(id, 0)),
    ];
    for (asked, answer) in answers {
        match answer {
            Err(Error::LeaseExpiredHolderAlive {
                pid: refused_for,
                seq: 0,
                ..
            }) => assert_eq!(refused_for, pid, "{asked}"),
            other => {
                panic!("the {asked} handed out the step while pid {pid} may still act: {other:?}")
            }
        }
    }
}

/// The sink's log: `(token, outcome)` for every write, in order.
fn sink_writes(scratch: &Scratch) -> Vec<(i64, String)> {
    let sink = sink(scratch);
    query_pairs(
        Path::new(&sink),
        "SELECT token, outcome FROM writes ORDER BY rowid",
    )
}

#[test]
fn a_frozen_holder_cannot_be_answered_for_and_its_late_effect_is_refused_by_its_token() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    let mut first = start_inside(&scratch, id);
    freeze_past_its_lease(&scratch, &first, id);
    let operator = Journal::builder(&scratch.database)
        .sweep_on_open(false)
        .open()
        .unwrap();
    // It still holds the lock, expired.
    assert_refused_for(&operator, id, first.pid());

    // A second process takes the execution over and stops at the ambiguous step, as Fail says.
    let second = run_to_end(&scratch, id);
    assert_eq!(second["kind"], "ambiguous", "{second}");
    // The lock is free now, and the frozen holder still alive.
    assert_refused_for(&operator, id, first.pid());

    // Answered anyway, without a look, the step runs again under a higher token.
    runtime()
        .block_on(operator.operator().resolve(id, 0, Resolution::NotDone))
        .unwrap();
    let third = run_to_end(&scratch, id);
    assert_eq!(third["outcome"], "done", "{third}");
    let successor_token = third["token"].as_i64().unwrap();
    assert!(successor_token > 1, "{third}");

    // The frozen holder goes on and performs its effect late: the sink refuses its token, and
    // its journal write fails with LockLost.
    resume(u32::try_from(first.pid()).unwrap());
    first.send("go");
    let late = first.next_line();
    assert_eq!(
        (&late["effect"], &late["token"]),
        (&"refused".into(), &1.into()),
        "{late}"
    );
    let outcome = first.close();
    assert_eq!(outcome["kind"], "lock_lost", "{outcome}");

    assert_eq!(
        sink_writes(&scratch),
        [
            (successor_token, "accepted".to_owned()),
            (1, "refused".to_owned())
        ]
    );
    assert_eq!(operator.get(id).unwrap().unwrap().status, Status::Completed);
}

#[test]
fn a_swept_lease_holder_blocks_the_answer_until_it_is_dead() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    let first = start_inside(&scratch, id);
    freeze_past_its_lease(&scratch, &first, id);
    // This open's sweep reclaims the expired lock: the execution is interrupted and unlocked.
    let operator = Journal::open(&scratch.database).unwrap();
    assert_eq!(
        operator.get(id).unwrap().unwrap().status,
        Status::Interrupted
    );
    assert_refused_for(&operator, id, first.pid());

    first.kill();
    let seen = operator.operator().seen_intent(id, 0).unwrap();
    assert_eq!(seen.map(|seen| seen.to_string()).as_deref(), Some("a1-r0"));
    let inspector = Journal::inspect(&scratch.database).unwrap();
    assert_eq!(inspector.seen_intent(id, 0).unwrap(), seen);
    assert!(
        sink_writes_if_any(&scratch).is_empty(),
        "the frozen holder acted"
    );
}

/// The sink's log, or nothing when no write ever reached the sink.
fn sink_writes_if_any(scratch: &Scratch) -> Vec<(i64, String)> {
    if Path::new(&sink(scratch)).exists() {
        sink_writes(scratch)
    } else {
        Vec::new()
    }
}
