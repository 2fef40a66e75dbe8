//! On PostgreSQL a message sent from another host wakes a parked receiver by notification,
//! not by the change feed's poll: two journals on one schema stand for two hosts, both with
//! `pg_poll_ms` at 60 s, so only a notification can deliver the wake-up sooner.
//!
//! Method: host A runs a workflow that parks at once (`park_after` zero) on a receive; the test
//! waits on A's change feed until the journal says it is waiting, then sends the message
//! through host B's client and requires A's result within 30 s, half the poll. The send wakes
//! the execution in its own transaction; A's feed hears the NOTIFY of that commit, A's
//! dispatcher claims and resumes it, and its `recv` returns the message.
//! Needs `DURABLY_POSTGRES_URL` (`eval "$(.ci/pg start)"`); fails without it.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use durably_journal::{Journal, Status};
use durably_runtime::{Client, Runtime, StartOptions};
use durably_testkit::{Backend, TestDb};

/// The change feed's poll on both hosts: far longer than the wake-up may take.
const POLL_MS: u64 = 60_000;

/// The longest the wake-up may take: half the poll, so a poll tick cannot have caused it.
const WAKE_WITHIN: Duration = Duration::from_secs(30);

fn journal(db: &TestDb) -> Journal {
    Journal::builder(db.target())
        .pg_poll_ms(POLL_MS)
        .open()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_on_another_host_wakes_a_parked_receiver_before_any_poll() {
    let db = TestDb::on(Backend::Postgres);
    let host_a = Runtime::builder(journal(&db))
        .park_after(Duration::ZERO)
        .register("receiver", 1, support::receiver)
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = host_a
        .start::<_, Option<String>>("receiver", id, &(), StartOptions::default())
        .await
        .unwrap();

    let mut changes = host_a.journal().changes().unwrap();
    while handle.status().unwrap() != Status::Waiting {
        tokio::time::timeout(WAKE_WITHIN, changes.changed())
            .await
            .expect("the receiver parks, and its commit is heard, within 30 s")
            .unwrap();
    }

    let host_b = Client::new(journal(&db)).await.unwrap();
    let sent_at = Instant::now();
    host_b.send(id, "t", &"hello", None).await.unwrap();
    let received = tokio::time::timeout(WAKE_WITHIN, handle.result())
        .await
        .expect("the receiver is woken within 30 s, before a 60 s poll could tick")
        .unwrap();
    assert_eq!(received.as_deref(), Some("hello"));
    assert!(sent_at.elapsed() < WAKE_WITHIN);
    host_a.drain().await;
}
