//! Cancelling at once on PostgreSQL: when another transaction moves a parked execution's
//! status while `cancel_now` runs, `cancel_now` reports the status it finds after that
//! transaction, and never fails the request as inconsistent.
//!
//! Method: a scratch schema of the server `DURABLY_POSTGRES_URL` names (`durably_testkit::TestDb`,
//! which fails loudly without one) and a journal with two writer workers. One request moves a
//! queued execution to `running` and, before committing, waits until another session waits on a
//! row lock (polled in `pg_stat_activity`, with a deadline); the other request, sent meanwhile,
//! is `cancel_now` of the same execution. Without a lock taken before its status read, it read
//! `queued`, then its compare-and-swap found the row `running` and the request failed.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use durably_journal::durably_db::{Connection, PgConnection};
use durably_journal::lifecycle::{self, Inserted, NewExecution};
use durably_journal::{Status, execution_status};
use durably_testkit::{Backend, TestDb};

/// How long the moving request waits for the cancel to wait on its row.
const WAITER_DEADLINE: Duration = Duration::from_secs(20);

/// Waits until a session of this database other than `watcher` waits on a lock.
fn wait_for_a_lock_waiter(watcher: &Connection) {
    let started = Instant::now();
    loop {
        let waiting: i64 = watcher
            .query_row(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'
                   AND pid <> pg_backend_pid()",
                [],
                |row| row.get(0),
            )
            .unwrap();
        if waiting > 0 {
            return;
        }
        assert!(
            started.elapsed() < WAITER_DEADLINE,
            "the cancel never waited on the execution's row"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_a_status_change_sees_the_new_status() {
    let db = TestDb::on(Backend::Postgres);
    let journal = db.builder().pg_writers(2).open().unwrap();
    let id = durably_journal::new_execution_id();
    let now = chrono::Utc::now();
    let input = journal.encode_payload(&"input", "the input").unwrap();
    let inserted = journal
        .write(move |conn| {
            let new = NewExecution {
                id,
                kind: "test",
                name: "queued",
                input: &input,
                queue: None,
                priority: 0,
                due_at: None,
                detail: None,
            };
            lifecycle::insert_execution(conn, &new, now)
        })
        .await
        .unwrap();
    assert_eq!(inserted, Inserted::New);
    assert_eq!(
        journal.read(|conn| execution_status(conn, id)).unwrap(),
        Some(Status::Queued)
    );

    let watcher = Connection::from(PgConnection::connect(&db.target(), "test:watcher").unwrap());
    let (moved_tx, moved_rx) = tokio::sync::oneshot::channel();
    // Requests about no execution take the workers in turn: the two run on different workers.
    let mover = journal.write(move |conn| {
        conn.execute(
            "UPDATE executions SET status = 'running' WHERE execution_id = ?1",
            [id.to_string()],
        )?;
        moved_tx.send(()).unwrap();
        wait_for_a_lock_waiter(&watcher);
        Ok(())
    });
    let cancel = async {
        moved_rx.await.unwrap();
        journal
            .write(move |conn| lifecycle::cancel_now(conn, id, chrono::Utc::now(), "test"))
            .await
    };
    let (moved, cancelled) = tokio::join!(mover, cancel);
    moved.unwrap();
    assert!(
        matches!(cancelled, Ok(None)),
        "a running execution is not cancelled at once, and nothing is inconsistent: \
         {cancelled:?}"
    );
    assert_eq!(
        journal.read(|conn| execution_status(conn, id)).unwrap(),
        Some(Status::Running)
    );
}
