//! On PostgreSQL a key stays unique when starts and sends race on two hosts: of many starts
//! with one deduplication key through two journals on one schema, exactly one creates an
//! execution and every other answers with that one; of many sends with one idempotency key to
//! it, exactly one stores the message and every other answers with its id. None fails: a
//! unique violation would abort its whole transaction.
//!
//! Method: two clients (two hosts) run the starts, then the sends, all at once on a
//! multi-threaded runtime, so that several pass the look at the key before the first commits.
//! Needs `DURABLY_POSTGRES_URL` (`eval "$(.ci/pg start)"`); fails without it.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use durably_journal::Journal;
use durably_runtime::{Client, OnDuplicate, SendOutcome, StartOptions, StartOutcome};
use durably_testkit::{Backend, TestDb};
use tokio::task::JoinSet;

/// Racing calls per test, split between the two hosts.
const RACERS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_starts_and_sends_on_two_hosts_keep_one_per_key() {
    let db = TestDb::on(Backend::Postgres);
    let hosts = [
        Client::new(Journal::open(db.target()).unwrap())
            .await
            .unwrap(),
        Client::new(Journal::open(db.target()).unwrap())
            .await
            .unwrap(),
    ];

    let mut starts = JoinSet::new();
    for at in 0..RACERS {
        let host = hosts[at % 2].clone();
        starts.spawn(async move {
            let options = StartOptions::default()
                .dedup("nightly", OnDuplicate::ReturnExisting)
                .allow_unregistered_kind();
            let id = durably_journal::new_execution_id();
            let (handle, outcome) = host
                .start_with_outcome::<_, ()>("report", id, &at, options)
                .await
                .unwrap();
            (handle.id(), outcome)
        });
    }
    let started = starts.join_all().await;
    let new: Vec<_> = started
        .iter()
        .filter(|(_, outcome)| *outcome == StartOutcome::New)
        .collect();
    assert_eq!(new.len(), 1, "{started:?}");
    let holder = new[0].0;
    assert!(started.iter().all(|(id, _)| *id == holder), "{started:?}");

    let mut sends = JoinSet::new();
    for at in 0..RACERS {
        let host = hosts[at % 2].clone();
        sends.spawn(async move { host.send(holder, "t", &"once", Some("k")).await.unwrap() });
    }
    let sent = sends.join_all().await;
    let stored: Vec<i64> = sent
        .iter()
        .filter_map(|outcome| match outcome {
            SendOutcome::Sent { message_id } => Some(*message_id),
            _ => None,
        })
        .collect();
    assert_eq!(stored.len(), 1, "{sent:?}");
    let answered = |outcome: &SendOutcome| match outcome {
        SendOutcome::Sent { message_id } | SendOutcome::AlreadySent { message_id } => {
            Some(*message_id)
        }
        _ => None,
    };
    assert!(
        sent.iter()
            .all(|outcome| answered(outcome) == Some(stored[0])),
        "{sent:?}"
    );
}
