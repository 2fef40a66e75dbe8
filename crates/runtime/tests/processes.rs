//! Across processes: a handle awaiting a result wakes when another process completes the
//! execution, and a message sent from another process is stored for the receiver. The other
//! process is this test binary run again with `CHILD_ENV` set, which runs only the child test
//! named there; the parent waits for it to exit and checks what it wrote.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::pin::pin;
use std::process::Command;
use std::task::{Context, Waker};

use durably_journal::{Journal, Opened};
use durably_runtime::Client;
use uuid::Uuid;

/// Set in the child: `<role> <database path> <execution id>`.
const CHILD_ENV: &str = "DURABLY_RUNTIME_TEST_CHILD";

/// Runs `role` in a child process and waits for it to succeed.
fn run_child(role: &str, db: &std::path::Path, id: Uuid) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, format!("{role} {} {id}", db.display()))
        .status()
        .unwrap();
    assert!(status.success(), "child {role} failed: {status}");
}

/// The child's side; does nothing when run as an ordinary test.
#[tokio::test]
async fn child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut words = spec.splitn(3, ' ');
    let (role, db, id) = (
        words.next().unwrap(),
        words.next().unwrap(),
        words.next().unwrap(),
    );
    let journal = Journal::open(db).unwrap();
    let id: Uuid = id.parse().unwrap();
    match role {
        "complete" => {
            let Opened::Running(execution) = journal
                .open_execution(id, "approval", "", &())
                .await
                .unwrap()
            else {
                panic!("execution {id} has ended");
            };
            execution
                .complete(&"approved in another process")
                .await
                .unwrap();
        }
        "send" => support::send_approval(journal, id).await,
        other => panic!("unknown child role {other}"),
    }
}

/// A result awaited here arrives when another process completes the execution.
#[tokio::test]
async fn a_result_completed_by_another_process_arrives() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let journal = Journal::open(&db).unwrap();
    let client = Client::new(journal.clone()).await.unwrap();
    let (id, execution) = support::runtime_execution(&journal).await;
    drop(execution);
    // The release was queued on this journal's writer by the drop; a later request on the
    // same writer returns after it committed, so the child finds the execution unlocked.
    journal.write(|_| Ok(())).await.unwrap();

    let handle = client.handle::<String>(id);
    let mut result = pin!(handle.result());
    assert!(
        result
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    );
    run_child("complete", &db, id);
    assert_eq!(result.await.unwrap(), "approved in another process");
}

/// A message sent from another process is kept for the receiver, with its key.
#[tokio::test]
async fn a_message_sent_from_another_process_is_kept() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let journal = Journal::open(&db).unwrap();
    let _client = Client::new(journal.clone()).await.unwrap();
    let (id, _execution) = support::runtime_execution(&journal).await;
    run_child("send", &db, id);
    let kept: (String, String, String) = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT execution_id, topic, idempotency_key FROM runtime_messages",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )?)
        })
        .unwrap();
    assert_eq!(
        kept,
        (id.to_string(), "approval".to_owned(), "click-1".to_owned())
    );
}
