//! On PostgreSQL a send that commits while a receive's park is still in its transaction wakes
//! the parked receiver: it is never left `waiting` on a topic whose message is already stored.
//! Each transaction runs at `READ COMMITTED` on its own writer session, so the park's look for
//! a message and the send's wake-up of a `waiting` row cannot see each other without a lock.
//!
//! Method: two journals on one schema stand for two hosts. Host A runs a workflow that parks
//! at once (`park_after` zero) on a receive. A callback at `journal::before-release-commit`,
//! inside the park's transaction after its look, sends the message from host B on another
//! thread and holds the park open until the send has committed or is seen waiting for the
//! park (an advisory lock not granted in `pg_locks`). Then A's result must come within 30 s.
//! Needs `DURABLY_POSTGRES_URL` (`eval "$(.ci/pg start)"`) and `--features failpoints`.
#![cfg(all(feature = "postgres", feature = "failpoints"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use durably_journal::Journal;
use durably_runtime::{Client, Runtime, StartOptions};
use durably_testkit::{Backend, TestDb};

/// How long the receiver's result may take, and the callback may hold the park open.
const WITHIN: Duration = Duration::from_secs(30);

/// Whether a session of this database waits for an advisory lock it was not granted.
fn a_send_waits_for_the_park(journal: &Journal) -> bool {
    journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND NOT granted",
                [],
                |row| row.get::<_, i64>(0),
            )? > 0)
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_committed_during_the_parks_transaction_wakes_the_receiver() {
    let db = TestDb::on(Backend::Postgres);
    let id = durably_journal::new_execution_id();
    let host_b = Client::new(db.open()).await.unwrap();
    let armed = Arc::new(AtomicBool::new(true));
    fail::cfg_callback("journal::before-release-commit", move || {
        if !armed.swap(false, Ordering::SeqCst) {
            return;
        }
        let sender = host_b.clone();
        let sending = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(sender.send(id, "t", &"hello", None))
                .unwrap();
        });
        let deadline = Instant::now() + WITHIN;
        while !sending.is_finished() && !a_send_waits_for_the_park(host_b.journal()) {
            assert!(
                Instant::now() < deadline,
                "the send neither committed nor waited"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    })
    .unwrap();

    let host_a = Runtime::builder(db.open())
        .park_after(Duration::ZERO)
        .register("receiver", 1, support::receiver)
        .start()
        .await
        .unwrap();
    let handle = host_a
        .start::<_, Option<String>>("receiver", id, &(), StartOptions::default())
        .await
        .unwrap();
    let received = tokio::time::timeout(WITHIN, handle.result())
        .await
        .expect("the receiver is woken by the send that committed during its park")
        .unwrap();
    fail::remove("journal::before-release-commit");
    assert_eq!(received.as_deref(), Some("hello"));
    host_a.drain().await;
}
