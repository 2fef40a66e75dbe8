//! Parked executions (`queued`, `waiting`, `stuck`, `awaiting_operator`) are rows that no open
//! resumes: opening one is refused with a typed error, and the refusal writes nothing (no lock
//! taken, no epoch bumped, no event, the row unchanged). And each index of the rebuilt
//! `executions` table serves the query it is documented for.
//!
//! Method: a finished execution's row is set to each parked status through the journal's writer
//! (as the runtime's journal functions will), then opened; the lock row, the events and the
//! execution row are compared before and after. The index plans are read with `EXPLAIN QUERY
//! PLAN` on a fresh journal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_journal::{Error, Journal, Status};
use support::{Scratch, pure_steps, start};
use uuid::Uuid;

/// The columns of an execution row that an open could change: status, opens, updated_at and
/// status_detail.
type ExecutionColumns = (String, i64, String, Option<String>);

/// Everything an open could change: the execution row, its lock row and the number of events.
fn footprint(
    journal: &Journal,
    id: Uuid,
) -> (ExecutionColumns, Option<(i64, Option<String>)>, i64) {
    journal
        .read(|conn| {
            let row = conn.query_row(
                "SELECT status, opens, updated_at, status_detail FROM executions
                 WHERE execution_id = ?1",
                [id.to_string()],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )?;
            let lock = conn
                .query_row(
                    "SELECT epoch, instance_id FROM locks WHERE resource = ?1",
                    [id.to_string()],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .ok();
            let events = conn.query_row("SELECT count(*) FROM events", [], |row| row.get(0))?;
            Ok((row, lock, events))
        })
        .unwrap()
}

async fn park(journal: &Journal, id: Uuid, status: Status, detail: &'static str) {
    journal
        .write(move |conn| {
            conn.execute(
                "UPDATE executions SET status = ?2, status_detail = ?3 WHERE execution_id = ?1",
                durably_journal::durably_db::params![id.to_string(), status.as_str(), detail],
            )?;
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn an_open_of_a_parked_execution_is_refused_and_writes_nothing() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = durably_journal::new_execution_id();
    let mut execution = start(&journal, id).await;
    pure_steps(&mut execution, 0..1).await;
    drop(execution);
    support::barrier(&journal).await;

    for status in Status::ALL
        .iter()
        .copied()
        .filter(|status| status.is_parked())
    {
        park(&journal, id, status, r#"{"seq":0,"reason":"policy_fail"}"#).await;
        let before = footprint(&journal, id);
        let refused = journal
            .open_execution(id, "test", "a test", &"input")
            .await
            .unwrap_err();
        match (status, &refused) {
            (Status::AwaitingOperator, Error::AwaitingOperator { execution_id, seq }) => {
                assert_eq!((*execution_id, *seq), (id, 0));
            }
            (
                _,
                Error::NotRunnable {
                    execution_id,
                    status: found,
                },
            ) => {
                assert_eq!((*execution_id, *found), (id, status));
            }
            _ => panic!("{status}: {refused:?}"),
        }
        assert!(
            !refused.is_retryable(),
            "{status}: only a claim or an operator moves it"
        );
        assert_eq!(
            footprint(&journal, id),
            before,
            "{status}: the refusal wrote nothing"
        );
    }
    assert_eq!(
        Status::ALL
            .iter()
            .filter(|status| status.is_parked())
            .count(),
        4,
        "queued, waiting, stuck and awaiting_operator are the parked statuses"
    );
    assert!(
        Status::ALL
            .iter()
            .all(|status| !(status.is_parked() && status.is_final()))
    );
}

/// The query plans of the rebuilt table's indexes, as documented in
/// schema/0007_runtime_statuses.sql.
#[test]
fn each_index_of_executions_serves_its_query() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let plan = |sql: &str| -> String {
        journal
            .read(|conn| {
                conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?
                    .query_map([], |row| row.get::<_, String>(3))?
                    .collect::<durably_db::Result<Vec<_>>>()
                    .map_err(Into::into)
            })
            .unwrap()
            .join("; ")
    };
    scratch.sqlite_only("SQLite's query plans", |_| check_plans(plan));
}

/// Asserts that SQLite's `plan` of each query uses the index its migration names.
fn check_plans(plan: impl Fn(&str) -> String) {
    for (sql, expected) in [
        (
            "SELECT status FROM executions WHERE execution_id = 'x'",
            "SEARCH executions USING INDEX executions_by_execution_id (execution_id=?)",
        ),
        (
            "SELECT id FROM executions WHERE status = 'queued' AND due_at IS NULL
             AND queue IS 'q' ORDER BY priority DESC, id LIMIT 10",
            "SEARCH executions USING INDEX executions_claimable (queue=?)",
        ),
        (
            "SELECT count(*) FROM executions WHERE status = 'running' AND queue = 'q'",
            "SEARCH executions USING COVERING INDEX executions_running_in_queue (queue=?)",
        ),
        (
            "SELECT id FROM executions WHERE due_at IS NOT NULL AND due_at <= 'z'
             ORDER BY due_at LIMIT 10",
            "SEARCH executions USING COVERING INDEX executions_due (due_at>? AND due_at<?)",
        ),
        (
            "SELECT execution_id FROM executions INDEXED BY executions_cancel_requested
             WHERE cancel_requested_at IS NOT NULL AND status = 'running'",
            "SCAN executions USING INDEX executions_cancel_requested",
        ),
        (
            "SELECT execution_id FROM executions WHERE status = 'interrupted'",
            "SEARCH executions USING INDEX executions_by_status (status=?)",
        ),
        (
            "SELECT id, execution_id, kind FROM executions
             WHERE status = 'interrupted' AND finalized_at IS NULL AND id > 5
             ORDER BY id LIMIT 10",
            "SEARCH executions USING INDEX executions_by_status \
             (status=? AND finalized_at=? AND rowid>?)",
        ),
    ] {
        assert_eq!(plan(sql), expected, "{sql}");
    }
}
