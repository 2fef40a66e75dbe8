//! Fixtures shared by the runtime's integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use durably_journal::rusqlite::types::Value;
use durably_journal::{Execution, Journal, Opened};
use durably_runtime::Error;
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
