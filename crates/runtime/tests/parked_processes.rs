//! Waits across processes (plan §4.1, §5, invariants R3 and R4), with real processes killed
//! with SIGKILL:
//! - a receiver parked by a runtime process that is then killed is woken by a send from a
//!   third process and finished by a runtime in a fourth, which receives the message exactly
//!   once;
//! - a send from another process wakes a receiver parked by a live runtime, which notices
//!   through its watcher (no table scan) and finishes it;
//! - a sleep waiting in memory in a killed process is resumed by another process, which waits
//!   only what is left of it: the recorded wake time is kept.
//!
//! The other processes are this test binary run again with `CHILD_ENV` set, which runs only
//! the `child` test, in the role named there. The parent polls the journal for the states the
//! children reach on their own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use durably_journal::{Journal, Status};
use durably_runtime::testing::TestClock;
use durably_runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError};
use support::{WEEK_MINUTES, approval, consumption, kill, locked, wait_for_status, wait_for_steps};
use uuid::Uuid;

/// Set in the child: `<role> <database path> <execution id>`.
const CHILD_ENV: &str = "DURABLY_RUNTIME_PARKED_TEST_CHILD";

/// Sleeps an hour, then records a step.
async fn nap(context: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    context.sleep("nap", Duration::from_hours(1)).await?;
    context
        .pure("after", || async { Ok("woke".to_owned()) })
        .await
        .map_err(Into::into)
}

fn child_command(role: &str, db: &std::path::Path, id: Uuid) -> Command {
    support::role_command(CHILD_ENV, role, db, id)
}

/// Runs `role` in a child process and waits for it to succeed.
fn run_child(role: &str, db: &std::path::Path, id: Uuid) {
    let status = child_command(role, db, id).status().unwrap();
    assert!(status.success(), "child {role} failed: {status}");
}

/// Starts `role` in a child process that runs until it is killed.
fn spawn_child(role: &str, db: &std::path::Path, id: Uuid) -> Child {
    child_command(role, db, id).spawn().unwrap()
}

/// The child's side; does nothing when run as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Some((role, db, id)) = support::child_spec(CHILD_ENV) else {
        return;
    };
    let journal = Journal::open(db).unwrap();
    match role.as_str() {
        // Starts the receiver and serves it until killed: it parks at once.
        "park-recv" => {
            let runtime = Runtime::builder(journal)
                .register("approval", 1, approval)
                .start()
                .await
                .unwrap();
            runtime
                .start::<_, Option<bool>>("approval", id, &WEEK_MINUTES, StartOptions::default())
                .await
                .unwrap();
            std::future::pending::<()>().await;
        }
        // Starts the sleeper and sleeps in memory until killed.
        "sleep" => {
            let runtime = Runtime::builder(journal)
                .register("nap", 1, nap)
                .park_after(Duration::from_hours(2))
                .start()
                .await
                .unwrap();
            runtime
                .start::<_, String>("nap", id, &(), StartOptions::default())
                .await
                .unwrap();
            std::future::pending::<()>().await;
        }
        "send" => support::send_approval(journal, id).await,
        other => panic!("unknown child role {other}"),
    }
}

/// A receiver parked by a process that is then SIGKILLed keeps waiting (a row, no lock); a
/// send from another process wakes it, a runtime in this process finishes it, and the
/// message is consumed exactly once, by the recv step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_parked_by_a_killed_process_is_finished_elsewhere() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let journal = Journal::open(&db).unwrap();
    let id = durably_journal::new_execution_id();
    let parker = spawn_child("park-recv", &db, id);
    wait_for_status(&journal, id, Status::Waiting).await;
    kill(parker);
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Waiting);
    assert!(!locked(&journal, id), "a parked execution holds no lock");

    run_child("send", &db, id);
    assert_eq!(
        journal.get(id).unwrap().unwrap().status,
        Status::Queued,
        "the send woke the receiver in its own transaction"
    );
    let runtime = Runtime::builder(journal.clone())
        .register("approval", 1, approval)
        .start()
        .await
        .unwrap();
    let handle = runtime.handle::<Option<bool>>(id);
    assert_eq!(handle.result().await.unwrap(), Some(true));
    let consumed = consumption(&journal, id);
    assert_eq!(consumed.len(), 1, "{consumed:?}");
    assert_eq!(consumed[0].1, Some(2), "consumed by the recv step, seq 2");
    // The sender's retry with its key delivers nothing more: the receiver has ended.
    let again = runtime
        .send(id, "approval", &true, Some("click-1"))
        .await
        .unwrap_err();
    assert!(
        matches!(again, durably_runtime::Error::ReceiverFinished { .. }),
        "{again:?}"
    );
}

/// A send from another process wakes a receiver parked by a live runtime here, which finds
/// it through its watcher and finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_from_another_process_wakes_a_parked_receiver() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let journal = Journal::open(&db).unwrap();
    let runtime = Runtime::builder(journal.clone())
        .register("approval", 1, approval)
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, Option<bool>>("approval", id, &WEEK_MINUTES, StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&journal, id, Status::Waiting).await;
    run_child("send", &db, id);
    assert_eq!(handle.result().await.unwrap(), Some(true));
    assert_eq!(consumption(&journal, id).len(), 1);
}

/// A sleep waiting in memory in a process that is SIGKILLed is resumed by a runtime here on a
/// test clock: it keeps the wake time the dead process recorded, parks until then (the rest is
/// longer than `park_after`), and wakes when the clock reaches it, not an hour after the
/// resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_in_a_killed_process_resumes_with_what_is_left() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let id = durably_journal::new_execution_id();
    {
        let journal = Journal::open(&db).unwrap();
        let sleeper = spawn_child("sleep", &db, id);
        wait_for_steps(&journal, id, 1).await;
        kill(sleeper);
    }
    let clock = Arc::new(TestClock::new(chrono::Utc::now()));
    let journal = Journal::builder(&db).clock(clock.clone()).open().unwrap();
    let recorded = journal.steps(id).unwrap()[0].result.clone().unwrap();
    let wake_at: serde_json::Value = recorded.decode().unwrap();
    let wake_at = durably_lock::parse_timestamp(wake_at["wake_at"].as_str().unwrap()).unwrap();

    let runtime = Runtime::builder(journal.clone())
        .register("nap", 1, nap)
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    wait_for_status(&journal, id, Status::Waiting).await;
    assert_eq!(journal.get(id).unwrap().unwrap().due_at, Some(wake_at));
    clock.set(wake_at);
    assert_eq!(runtime.handle::<String>(id).result().await.unwrap(), "woke");
    let steps = journal.steps(id).unwrap();
    assert_eq!(
        steps[0].result.as_ref(),
        Some(&recorded),
        "the wake time was kept"
    );
    assert!(steps[1].result_at.unwrap() >= wake_at);
}
