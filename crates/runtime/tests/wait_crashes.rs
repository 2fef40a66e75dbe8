//! Crashes and races at the boundaries of a receive (plan §5.2, invariant R4), driven by the
//! runtime's failpoints (built with `--features failpoints`):
//! - a message sent between a receive's last look and its park's transaction makes the park
//!   decline (nothing written) and the receive take the message at once: a send can never slip
//!   between the look and the park and leave the receiver parked with a message waiting;
//! - a process that aborts right after the transaction that consumed a message and recorded
//!   the recv step is resumed by another, whose replay returns that same message and consumes
//!   no other.
//!
//! The race is made certain by a callback at `runtime::before-park` that sends the message
//! from another thread and waits for its commit. The crash is a child process (this binary run
//! again with `CHILD_ENV`) aborting at `runtime::after-consume-commit`.
#![cfg(feature = "failpoints")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_journal::{Journal, Status};
use durably_runtime::{Client, Runtime, StartOptions};
use support::{
    Clocked, WEEK_MINUTES, approval, child_command, consumption, event_kinds, start_queued,
};

/// Set in the child: `serve <database path> <execution id>`.
const CHILD_ENV: &str = "DURABLY_RUNTIME_CRASH_TEST_CHILD";

/// A message that arrives between the receive's look and its park is taken at once; the
/// execution never parks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_between_the_look_and_the_park_declines_the_park() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let f = Clocked::new();
    let id = durably_journal::new_execution_id();
    let sender = Client::new(f.journal.clone()).await.unwrap();
    fail::cfg_callback("runtime::before-park", move || {
        let sender = sender.clone();
        std::thread::spawn(move || {
            let sending = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            sending
                .block_on(sender.send(id, "approval", &true, None))
                .unwrap();
        })
        .join()
        .unwrap();
    })
    .unwrap();
    let runtime = f
        .runtime()
        .register("approval", 1, approval)
        .start()
        .await
        .unwrap();
    let handle = runtime
        .start::<_, Option<bool>>("approval", id, &WEEK_MINUTES, StartOptions::default())
        .await
        .unwrap();
    assert_eq!(handle.result().await.unwrap(), Some(true));
    fail::remove("runtime::before-park");

    let record = f.journal.get(id).unwrap().unwrap();
    assert_eq!(record.status, Status::Completed);
    assert_eq!(
        record.opens, 1,
        "the park declined: it ran once, start to end"
    );
    assert!(!event_kinds(&f.journal, id).contains(&"parked".to_owned()));
    assert_eq!(consumption(&f.journal, id)[0].1, Some(2));
}

/// The child: serves the receiver with `FAILPOINTS` from the parent, so it aborts right after
/// the consuming transaction. Does nothing when run as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Some((_role, db, id)) = support::child_spec(CHILD_ENV) else {
        return;
    };
    let _failpoints = fail::FailScenario::setup();
    let runtime = Runtime::builder(Journal::open(db).unwrap())
        .register("approval", 1, approval)
        .start()
        .await
        .unwrap();
    runtime.handle::<Option<bool>>(id).result().await.unwrap();
    panic!("the child was to abort after consuming the message");
}

/// A process that dies right after consuming a message leaves it consumed by the recorded
/// step; the run that resumes the execution replays the step and gets the same message,
/// leaving a later message on the topic untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_consuming_replays_the_same_message() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let journal = Journal::open(&db).unwrap();
    let (client, id) = start_queued(&journal, "approval", &WEEK_MINUTES).await;
    client.send(id, "approval", &true, None).await.unwrap();

    let status = child_command(CHILD_ENV, &format!("serve {} {id}", db.display()))
        .env("FAILPOINTS", "runtime::after-consume-commit=return")
        .status()
        .unwrap();
    assert!(!status.success(), "the child did not abort: {status}");
    let consumed = consumption(&journal, id);
    assert_eq!(consumed.len(), 1);
    assert_eq!(
        consumed[0].1,
        Some(2),
        "consumed with the recv step, before the crash"
    );
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Running);

    client.send(id, "approval", &false, None).await.unwrap();
    let runtime = Runtime::builder(journal.clone())
        .register("approval", 1, approval)
        .start()
        .await
        .unwrap();
    assert_eq!(
        runtime.handle::<Option<bool>>(id).result().await.unwrap(),
        Some(true)
    );
    let consumed = consumption(&journal, id);
    assert_eq!(consumed[0].1, Some(2));
    assert_eq!(consumed[1].1, None, "the replay consumed another message");
}
