//! The runtime keeps its tables in the journal's file under its own schema owner: building a
//! `Client` applies `schema/runtime/` once (the version is recorded under owner `runtime`),
//! building another on the same file changes nothing, and the views read what a send wrote.
//! Checked by reading `schema_versions` and `sqlite_schema` before and after.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_journal::Journal;
use durably_runtime::Client;

fn schema_text(journal: &Journal) -> Vec<(String, String)> {
    journal
        .read(|conn| {
            Ok(conn
                .prepare("SELECT name, coalesce(sql, '') FROM sqlite_schema ORDER BY name")?
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?)
        })
        .unwrap()
}

/// A client migrates the file once; a second client, as another process would, finds it
/// current.
#[tokio::test]
async fn clients_migrate_once_under_the_runtime_owner() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path().join("journal.db")).unwrap();
    let _client = Client::new(journal.clone()).await.unwrap();
    let version: i64 = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT version FROM schema_versions WHERE owner = 'runtime'",
                [],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(
        version, 3,
        "migrations 0001, 0002 (children) and 0003 (patches and forks)"
    );
    let schema = schema_text(&journal);
    for name in [
        "runtime_executions",
        "queues",
        "workflow_kinds",
        "dedup_keys",
        "messages",
        "workflow_events",
        "runtime_patches",
        "runtime_messages",
        "runtime_events",
        "patch_answers",
        "forks",
        "runtime_children",
        "runtime_children_by_parent",
    ] {
        assert!(
            schema.iter().any(|(found, _)| found == name),
            "{name} missing"
        );
    }
    let writes = journal.writer_stats();
    let other = Journal::open(dir.path().join("journal.db")).unwrap();
    let _again = Client::new(other.clone()).await.unwrap();
    assert_eq!(
        schema_text(&other),
        schema,
        "a second client changed the schema"
    );
    assert_eq!(journal.writer_stats(), writes);
}

/// `runtime_messages` shows a sent message with its size and preview, pending until consumed.
#[tokio::test]
async fn runtime_messages_view_shows_a_pending_message() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path().join("journal.db")).unwrap();
    let client = Client::new(journal.clone()).await.unwrap();
    let (id, _execution) = support::runtime_execution(&journal).await;
    client
        .send(id, "approval", &"yes", Some("k1"))
        .await
        .unwrap();
    let row: (String, String, Option<String>, Option<i64>, i64, String) = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT execution_id, topic, idempotency_key, consumed_seq, bytes, preview \
                 FROM runtime_messages",
                [],
                |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                        row.get(5)?,
                    ))
                },
            )?)
        })
        .unwrap();
    assert_eq!(
        row,
        (
            id.to_string(),
            "approval".to_owned(),
            Some("k1".to_owned()),
            None,
            5,
            "\"yes\"".to_owned()
        )
    );
}

/// `queue_positions` orders claimable executions by priority, then start order, per queue,
/// leaving out those not yet due; `queue_load` counts them against the queue's limit. The
/// queued rows are inserted with SQL, as a start would leave them.
#[tokio::test]
async fn queue_views_show_positions_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path().join("journal.db")).unwrap();
    let _client = Client::new(journal.clone()).await.unwrap();
    let ids: Vec<String> = (0..4)
        .map(|_| durably_journal::new_execution_id().to_string())
        .collect();
    let rows = ids.clone();
    journal
        .write(move |conn| {
            conn.execute(
                "INSERT INTO queues (queue, concurrency_max, updated_at) VALUES ('q', 2, 'now')",
                [],
            )?;
            // (priority, due_at): the second runs first, the fourth is not yet due.
            for (id, (priority, due_at)) in
                rows.iter()
                    .zip([(0, None), (5, None), (0, None), (9, Some("2999-01-01"))])
            {
                conn.execute(
                    "INSERT INTO executions (execution_id, kind, name, status, input, opens, \
                     created_at, updated_at, queue, priority, due_at) \
                     VALUES (?1, 'k', 'k', 'queued', 'null', 0, 'now', 'now', 'q', ?2, ?3)",
                    durably_db::params![id, priority, due_at],
                )?;
            }
            Ok(())
        })
        .await
        .unwrap();
    let positions: Vec<(String, i64)> = journal
        .read(|conn| {
            Ok(conn
                .prepare("SELECT execution_id, position FROM queue_positions WHERE queue = 'q'")?
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?)
        })
        .unwrap();
    assert_eq!(
        positions,
        vec![
            (ids[1].clone(), 1),
            (ids[0].clone(), 2),
            (ids[2].clone(), 3)
        ]
    );
    let load: (i64, i64, i64, i64) = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT concurrency_max, running, queued, waiting FROM queue_load",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )?)
        })
        .unwrap();
    assert_eq!(load, (2, 0, 4, 0));
}
