//! Schema migrations on journals written by earlier versions: a journal at schema version 4
//! (`steps` as a WITHOUT ROWID table) is migrated at open to `steps` in commit order, and every
//! recorded step keeps replaying exactly as before, including an intent left ambiguous.
//!
//! Method: build the version-4 file from the numbered schema files as an earlier build applied
//! them (frozen in tests/fixtures/schema-v5), write the rows that build wrote for a half-done
//! execution, then open it with this build and drive the execution.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicU32, Ordering};

use durably_journal::{APPLICATION_ID, Guarded, Policy, SCHEMA_VERSION, StepError};
use rusqlite::{Connection, params};
use serde_json::{Value, json};
use support::{Scratch, start};
use uuid::Uuid;

/// The SQL of migrations 1 to 4 as the builds of schema version 5 applied them.
const SCHEMA_V4: [&str; 4] = [
    include_str!("../../../tests/fixtures/schema-v5/0001_locks.sql"),
    include_str!("../../../tests/fixtures/schema-v5/0002_journal.sql"),
    include_str!("../../../tests/fixtures/schema-v5/0003_scheduler.sql"),
    include_str!("../../../tests/fixtures/schema-v5/0004_views.sql"),
];

const AT: &str = "2026-11-01T10:00:00.000Z";

/// Writes a version-4 journal holding one running execution with a completed idempotent step
/// (seq 0) and a guarded step whose intent committed but whose result never did (seq 1).
fn write_v4_journal(scratch: &Scratch, id: Uuid) {
    let conn = Connection::open(scratch.path()).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL").unwrap();
    for sql in SCHEMA_V4 {
        conn.execute_batch(sql).unwrap();
    }
    conn.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 4;"
    ))
    .unwrap();
    let id = id.to_string();
    conn.execute(
        "INSERT INTO executions (execution_id, kind, name, status, input, created_at, updated_at)
         VALUES (?1, 'test', 'a test', 'running', '\"input\"', ?2, ?2)",
        params![id, AT],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO steps (execution_id, seq, name, effect, state, idempotency_key, result,
                            attempts, result_at)
         VALUES (?1, 0, 'fetch', 'idempotent', 'completed', 'key-0', '{\"n\":7}', 1, ?2)",
        params![id, AT],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO steps (execution_id, seq, name, effect, policy, state, idempotency_key,
                            attempts, intent_at)
         VALUES (?1, 1, 'charge', 'guarded', 'skip', 'intent', 'key-1', 1, ?2)",
        params![id, AT],
    )
    .unwrap();
}

#[tokio::test]
async fn a_version_4_journal_is_migrated_and_replays_its_steps_and_its_ambiguous_intent() {
    let scratch = Scratch::new();
    let id = Uuid::now_v7();
    write_v4_journal(&scratch, id);

    let journal = scratch.open();
    let calls = AtomicU32::new(0);
    let execution = start(&journal, id).await;
    assert!(execution.is_resume());
    let fetched: Value = execution
        .idempotent("fetch", |_key| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!({ "n": 0 })) }
        })
        .await
        .unwrap();
    assert_eq!(
        fetched,
        json!({ "n": 7 }),
        "the recorded result, not a new one"
    );
    let charged = execution
        .guarded("charge", Policy::Skip, |_key| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, StepError>(1_u32) }
        })
        .await
        .unwrap();
    assert!(
        matches!(charged, Guarded::Skipped(_)),
        "the intent survived the migration and is still ambiguous: {charged:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no closure ran");
    let after: u32 = execution
        .idempotent("after", |_key| async { Ok(3_u32) })
        .await
        .unwrap();
    execution.complete(&after).await.unwrap();
    drop(journal);

    let conn = Connection::open(scratch.path()).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let in_commit_order: Vec<(i64, i64, String)> = conn
        .prepare("SELECT id, seq, state FROM steps WHERE execution_id = ?1 ORDER BY id")
        .unwrap()
        .query_map(params![id.to_string()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let seqs: Vec<i64> = in_commit_order.iter().map(|(_, seq, _)| *seq).collect();
    assert_eq!(seqs, [0, 1, 2], "rows keep their order and gain an id");
    assert_eq!(in_commit_order[1].2, "skipped");
    let summary: (String, i64, i64) = conn
        .query_row(
            "SELECT status, steps, steps_skipped FROM execution_summary WHERE execution_id = ?1",
            params![id.to_string()],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        summary,
        ("completed".to_owned(), 3, 1),
        "the views were recreated"
    );
    let duplicate = conn.execute(
        "INSERT INTO steps (execution_id, seq, name, effect, state, idempotency_key, attempts,
                            result_at)
         VALUES (?1, 0, 'again', 'pure', 'completed', 'k', 0, ?2)",
        params![id.to_string(), AT],
    );
    assert!(duplicate.is_err(), "(execution_id, seq) stays unique");
    for (effect, policy, state) in [
        ("bogus", None, "completed"),
        ("guarded", Some("bogus"), "completed"),
        ("pure", None, "bogus"),
    ] {
        let refused = conn.execute(
            "INSERT INTO steps (execution_id, seq, name, effect, policy, state, idempotency_key,
                                attempts, result_at)
             VALUES (?1, 9, 'bad', ?2, ?3, ?4, 'k', 0, ?5)",
            params![id.to_string(), effect, policy, state, AT],
        );
        assert!(
            refused.is_err(),
            "the CHECKs still refuse {effect}/{policy:?}/{state}"
        );
    }
    scratch.assert_sqlite_integrity();
}
