//! Shared helpers for the journal's in-process tests: scratch databases (the testkit's, on the
//! backend the environment picks), a clock the test moves, and a write barrier.

// Each test file uses a different subset of these helpers, and like the tests themselves they
// fail the test by panicking.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc
)]

use std::sync::{Arc, Mutex};

use chrono::{DateTime, TimeDelta, Utc};
use durably_journal::{Journal, Opened};
use durably_lock::Clock;
use uuid::Uuid;

/// One test's scratch database on the backend `DURABLY_TEST_BACKEND` names: `scratch.open()`,
/// `scratch.builder()`; its file (`scratch.path()`) only on SQLite.
#[allow(unused_imports)] // Not every test file opens a scratch database.
pub use durably_testkit::TestDb as Scratch;

/// A clock that stands still until the test moves it.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn at(time: DateTime<Utc>) -> Arc<Self> {
        Arc::new(Self(Mutex::new(time)))
    }

    pub fn advance(&self, by: TimeDelta) {
        let mut now = self.0.lock().unwrap();
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// Opens a new execution, which must not be finished.
pub async fn start(journal: &Journal, id: Uuid) -> durably_journal::Execution {
    match journal
        .open_execution(id, "test", "a test", &"input")
        .await
        .unwrap()
    {
        Opened::Running(execution) => execution,
        Opened::Finished(finished) => panic!("{id} is unexpectedly finished: {finished:?}"),
    }
}

/// Runs pure steps `seqs` (each named `step {seq}`, returning its seq) and checks each value.
pub async fn pure_steps(execution: &mut durably_journal::Execution, seqs: std::ops::Range<u32>) {
    for seq in seqs {
        let value: u32 = execution
            .pure(&format!("step {seq}"), || async move { Ok(seq) })
            .await
            .unwrap();
        assert_eq!(value, seq);
    }
}

/// Leaves the handle's next step, a guarded one under `Policy::Fail`, in the ambiguous window:
/// its closure runs only once the intent is durable, says so and never returns, and the step's
/// future is dropped there.
pub async fn leave_guarded_step_ambiguous(execution: &mut durably_journal::Execution) {
    let called = Arc::new(tokio::sync::Notify::new());
    let step = execution.guarded("charge", durably_journal::Policy::Fail, |_key| {
        let called = Arc::clone(&called);
        async move {
            called.notify_one();
            std::future::pending::<()>().await;
            Ok::<u32, durably_journal::StepError>(0)
        }
    });
    tokio::select! {
        _ = step => panic!("the step cannot finish"),
        () = called.notified() => {}
    }
}

/// Creates a table of the program's own in the journal's file, through the writer.
pub async fn create_table(journal: &Journal, sql: &'static str) {
    journal
        .write(move |conn| {
            conn.execute_batch(sql)?;
            Ok(())
        })
        .await
        .unwrap();
}

/// The rows of `table`, read through the journal's read pool.
pub fn count_rows(journal: &Journal, table: &str) -> i64 {
    let query = format!("SELECT count(*) FROM {table}");
    journal
        .read(|conn| Ok(conn.query_row(&query, [], |row| row.get(0))?))
        .unwrap()
}

/// Waits until every write queued before it has committed: the writer is first in, first out,
/// so once this empty write is acknowledged, a detached release queued by `Drop` is durable.
pub async fn barrier(journal: &Journal) {
    journal.write(|_| Ok(())).await.unwrap();
}

/// Answers "not done" for step 0 with the stale `seen`: refused, naming `change`, and the
/// intent left as it is. Then a fresh look's answer is accepted, and the intent forgotten.
pub async fn refuse_stale_then_accept_fresh(
    journal: &Journal,
    id: Uuid,
    seen: durably_journal::SeenIntent,
    change: &str,
) {
    let error = journal
        .operator()
        .resolve_seen(id, 0, seen, durably_journal::Resolution::NotDone)
        .await
        .unwrap_err();
    assert!(
        matches!(error, durably_journal::Error::StaleSeenIntent { execution_id, seq: 0, seen: stale, .. } if execution_id == id && stale == seen),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains(change), "{message}");
    assert_eq!(
        journal.steps(id).unwrap()[0].state,
        durably_journal::StepState::Intent
    );
    let fresh = journal
        .operator()
        .seen_intent(id, 0)
        .unwrap()
        .expect("still ambiguous");
    journal
        .operator()
        .resolve_seen(id, 0, fresh, durably_journal::Resolution::NotDone)
        .await
        .unwrap();
    assert!(
        journal.steps(id).unwrap().is_empty(),
        "the intent is forgotten"
    );
}
