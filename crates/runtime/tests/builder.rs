//! A runtime's start records what other processes rely on: its workflow kinds (so their
//! starts of those kinds are not `UnknownKind`) and its queues' limits (one stored value all
//! processes agree on; a change is audited with a `queue_configured` event naming both
//! values). Checked by reading the tables and events after each start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use durably_journal::Journal;
use durably_runtime::{QueueConfig, Runtime, WorkflowContext, WorkflowError};

async fn noop(_context: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    Ok(())
}

fn rows(journal: &Journal, sql: &str) -> Vec<String> {
    journal
        .read(|conn| {
            Ok(conn
                .prepare(sql)?
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?)
        })
        .unwrap()
}

/// Kinds and versions are recorded once each; queue limits are stored, and a change writes
/// one `queue_configured` event while restarting with the same limit writes none.
#[tokio::test]
async fn starting_records_kinds_and_queue_limits() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path().join("journal.db")).unwrap();
    for _ in 0..2 {
        Runtime::builder(journal.clone())
            .register("report", 1, noop)
            .register("report", 2, noop)
            .register("refund", 1, noop)
            .queue(
                "q",
                QueueConfig {
                    concurrency_max: Some(4),
                    ..QueueConfig::default()
                },
            )
            .start()
            .await
            .unwrap();
    }
    assert_eq!(
        rows(
            &journal,
            "SELECT kind || ' v' || version FROM workflow_kinds ORDER BY 1"
        ),
        ["refund v1", "report v1", "report v2"]
    );
    assert_eq!(
        rows(
            &journal,
            "SELECT queue || '=' || concurrency_max FROM queues"
        ),
        ["q=4"]
    );
    let configured = "SELECT detail FROM events WHERE kind = 'queue_configured'";
    assert!(
        rows(&journal, configured).is_empty(),
        "an unchanged limit was audited"
    );

    Runtime::builder(journal.clone())
        .queue(
            "q",
            QueueConfig {
                concurrency_max: Some(8),
                ..QueueConfig::default()
            },
        )
        .start()
        .await
        .unwrap();
    assert_eq!(
        rows(
            &journal,
            "SELECT queue || '=' || concurrency_max FROM queues"
        ),
        ["q=8"]
    );
    let events = rows(&journal, configured);
    assert_eq!(events.len(), 1, "{events:?}");
    let detail: serde_json::Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(
        detail,
        serde_json::json!({"queue": "q", "previous_concurrency_max": 4, "concurrency_max": 8})
    );
}
