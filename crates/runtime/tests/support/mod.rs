//! Fixtures shared by the runtime's integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use durably_journal::rusqlite::types::Value;
use durably_journal::{Execution, Journal, Opened};
use durably_runtime::testing::TestClock;
use durably_runtime::{Error, WorkflowHandle};
use uuid::Uuid;

/// The payload cap of the scratch journals, in bytes of JSON.
pub const PAYLOAD_BYTES_MAX: usize = 4096;

/// A journal in a temporary directory, with a payload cap of [`PAYLOAD_BYTES_MAX`].
pub struct Scratch {
    _dir: tempfile::TempDir,
    pub journal: Journal,
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::builder(dir.path().join("journal.db"))
            .payload_bytes_max(PAYLOAD_BYTES_MAX)
            .open()
            .unwrap();
        Self { _dir: dir, journal }
    }

    pub async fn runtime_execution(&self) -> (Uuid, Execution) {
        runtime_execution(&self.journal).await
    }

    pub fn snapshot(&self) -> Vec<(String, Vec<Vec<Value>>)> {
        snapshot(&self.journal)
    }

    pub async fn refused<T: std::fmt::Debug>(
        &self,
        call: impl Future<Output = durably_runtime::Result<T>>,
        expected: impl FnOnce(&Error) -> bool,
    ) -> Error {
        refused(&self.journal, call, expected).await
    }
}

/// A running execution with the `runtime_executions` row that starting it through the runtime
/// writes, inserted with SQL: a stand-in for a started execution that needs no dispatcher.
pub async fn runtime_execution(journal: &Journal) -> (Uuid, Execution) {
    let id = durably_journal::new_execution_id();
    let Opened::Running(execution) = journal
        .open_execution(id, "approval", "", &())
        .await
        .unwrap()
    else {
        unreachable!("a new execution is never finished");
    };
    journal
        .write(move |conn| {
            conn.execute(
                "INSERT INTO runtime_executions (execution_id, version) VALUES (?1, 1)",
                [id.to_string()],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    (id, execution)
}

/// Every row of every table, in a stable order.
pub fn snapshot(journal: &Journal) -> Vec<(String, Vec<Vec<Value>>)> {
    journal
        .read(|conn| {
            let tables: Vec<String> = conn
                .prepare(
                    "SELECT name FROM sqlite_schema WHERE type = 'table' \
                     AND name NOT LIKE 'sqlite_%' ORDER BY name",
                )?
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            let mut all = Vec::new();
            for table in tables {
                let mut statement = conn.prepare(&format!("SELECT * FROM \"{table}\""))?;
                let columns = statement.column_count();
                let mut rows: Vec<Vec<Value>> = statement
                    .query_map([], |row| (0..columns).map(|i| row.get(i)).collect())?
                    .collect::<Result<_, _>>()?;
                rows.sort_by_key(|row| format!("{row:?}"));
                all.push((table, rows));
            }
            Ok(all)
        })
        .unwrap()
}

/// Runs `call`, asserts that it failed as `expected` says, that the failure is not
/// retryable, and that the journal is as it was before.
pub async fn refused<T: std::fmt::Debug>(
    journal: &Journal,
    call: impl Future<Output = durably_runtime::Result<T>>,
    expected: impl FnOnce(&Error) -> bool,
) -> Error {
    let before = snapshot(journal);
    let error = call.await.expect_err("the call must be refused");
    assert!(expected(&error), "unexpected error: {error:?}");
    assert!(
        !error.is_retryable(),
        "{error:?} is input, not a transient condition"
    );
    assert_eq!(
        snapshot(journal),
        before,
        "a refused call changed the journal"
    );
    error
}

/// A journal at `path` on a `TestClock` of its own, and the clock, for a runtime the test
/// moves in time.
pub fn on_test_clock(path: &Path) -> (Arc<TestClock>, Journal) {
    let clock = Arc::new(TestClock::default());
    let journal = Journal::builder(path).clock(clock.clone()).open().unwrap();
    (clock, journal)
}

/// The newest step row the `cancel_requested` event of `id` names (`last_step_id`), and the
/// newest step row of `id` now: equal when no step row was committed after the request.
pub fn request_and_newest_row(journal: &Journal, id: Uuid) -> (Option<i64>, Option<i64>) {
    let requested = journal
        .events(id)
        .unwrap()
        .into_iter()
        .find(|event| event.kind == "cancel_requested")
        .expect("a cancel_requested event");
    let named = requested.detail.to_value().unwrap()["last_step_id"].as_i64();
    let newest = journal
        .read(|conn| durably_journal::lifecycle::newest_step_row(conn, id))
        .unwrap();
    (named, newest)
}

/// Waits (at most a minute, so a broken test fails instead of hanging) until the execution
/// ends, which must be cancelled, and returns the reason.
pub async fn cancelled_reason<O: serde::de::DeserializeOwned + std::fmt::Debug>(
    handle: &WorkflowHandle<O>,
) -> String {
    let result = tokio::time::timeout(Duration::from_mins(1), handle.result())
        .await
        .expect("the execution ends");
    match result {
        Err(Error::Cancelled { reason, .. }) => reason,
        other => panic!("expected a cancellation, got {other:?}"),
    }
}
