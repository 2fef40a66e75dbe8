//! Steps on PostgreSQL: an execution's pure, idempotent and guarded steps are written by the
//! writer's workers and replayed, unchanged and without calling a closure, by a journal opened
//! afresh on the same schema; 64 executions written at once each keep their own steps' order;
//! the writer's counters count one commit per request; a worker whose session the server ended
//! opens a new one, and no request fails for it; of two requests that deadlock, one is told
//! `Conflict` with nothing of it committed, and the other commits; a step whose session is
//! lost during its `COMMIT` is told `CommitUnknown`.
//!
//! Method: each test gets a scratch schema of the server `DURABLY_POSTGRES_URL` names
//! (`durably_testkit::TestDb`, which fails loudly without one). Replay is checked by closures
//! that count their calls; order by reading each execution's steps back by `seq` and by `id`
//! (the insertion order), which must agree.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};

use durably_journal::{Execution, Guarded, Journal, Opened, Policy, StepError};
use durably_testkit::{Backend, TestDb};
use serde_json::{Value, json};
use uuid::Uuid;

const STEPS: u32 = 30;

fn value_of(seq: u32) -> Value {
    json!({ "seq": seq, "text": format!("step {seq}: \"quoted\" \u{1F980}"), "extremes": [i64::MIN, u64::MAX] })
}

/// Runs step `seq` as pure, idempotent or guarded in turn; `calls` counts closure calls.
async fn run_step(execution: &Execution, seq: u32, calls: &AtomicU32) -> Value {
    let name = format!("step-{seq}");
    let value = value_of(seq);
    let body = || {
        calls.fetch_add(1, Ordering::SeqCst);
        let value = value.clone();
        async move { Ok::<_, StepError>(value) }
    };
    match seq % 3 {
        0 => execution.pure(&name, body).await.unwrap(),
        1 => execution.idempotent(&name, |_key| body()).await.unwrap(),
        _ => match execution
            .guarded(&name, Policy::Fail, |_key| body())
            .await
            .unwrap()
        {
            Guarded::Done(value) => value,
            Guarded::Skipped(skipped) => panic!("nothing was ambiguous: {skipped}"),
        },
    }
}

async fn running(journal: &Journal, id: Uuid) -> Execution {
    match journal
        .open_execution(id, "test", "pg", &json!({"n": 1}))
        .await
        .unwrap()
    {
        Opened::Running(execution) => execution,
        Opened::Finished(finished) => panic!("unexpectedly finished: {finished:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_written_on_postgres_replay_unchanged_without_calling_a_closure() {
    let db = TestDb::on(Backend::Postgres);
    let id = durably_journal::new_execution_id();
    let first_calls = AtomicU32::new(0);
    let mut first = Vec::new();
    {
        let journal = db.open();
        let execution = running(&journal, id).await;
        assert!(!execution.is_resume());
        for seq in 0..STEPS {
            first.push(run_step(&execution, seq, &first_calls).await);
        }
        drop(execution);
    }
    assert_eq!(first_calls.load(Ordering::SeqCst), STEPS);

    let journal = db.open();
    let execution = running(&journal, id).await;
    assert!(execution.is_resume());
    let replay_calls = AtomicU32::new(0);
    for (seq, value) in (0..STEPS).zip(&first) {
        assert_eq!(
            &run_step(&execution, seq, &replay_calls).await,
            value,
            "step {seq}"
        );
    }
    assert_eq!(
        replay_calls.load(Ordering::SeqCst),
        0,
        "a recorded step ran again"
    );
    execution.complete(&json!("done")).await.unwrap();
    let reopened = journal
        .open_execution(id, "test", "pg", &json!({"n": 1}))
        .await
        .unwrap();
    assert!(matches!(reopened, Opened::Finished(_)), "{reopened:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_executions_keep_their_own_order_and_each_request_is_one_commit() {
    const EXECUTIONS: usize = 64;
    const EACH: u32 = 6;
    let db = TestDb::on(Backend::Postgres);
    let journal = db.builder().pg_writers(4).open().unwrap();
    let before = journal.writer_stats();
    let mut tasks = Vec::new();
    for _ in 0..EXECUTIONS {
        let journal = journal.clone();
        tasks.push(tokio::spawn(async move {
            let id = durably_journal::new_execution_id();
            let execution = running(&journal, id).await;
            let calls = AtomicU32::new(0);
            for seq in 0..EACH {
                run_step(&execution, seq, &calls).await;
            }
            execution.complete(&json!(null)).await.unwrap();
            id
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    for id in ids {
        let (by_seq, by_id) = journal
            .read(move |conn| {
                let seqs = |order: &str| -> durably_journal::Result<Vec<u32>> {
                    let sql =
                        format!("SELECT seq FROM steps WHERE execution_id = ?1 ORDER BY {order}");
                    let mut statement = conn.prepare(&sql)?;
                    let rows = statement
                        .query_map([id.to_string()], |row| row.get(0))?
                        .collect::<durably_journal::durably_db::Result<Vec<u32>>>()?;
                    Ok(rows)
                };
                Ok((seqs("seq")?, seqs("id")?))
            })
            .unwrap();
        assert_eq!(by_seq, (0..EACH).collect::<Vec<_>>(), "execution {id}");
        assert_eq!(by_id, by_seq, "execution {id}: steps inserted out of order");
    }
    let after = journal.writer_stats();
    let requests = after.requests - before.requests;
    assert!(requests > 0);
    assert_eq!(
        after.commits - before.commits,
        requests,
        "{before:?} -> {after:?}"
    );
    assert_eq!(after.commits_failed, 0, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_whose_sessions_were_ended_open_new_ones_and_no_request_fails() {
    const WORKERS: usize = 3;
    let db = TestDb::on(Backend::Postgres);
    let journal = db.builder().pg_writers(WORKERS).open().unwrap();
    let instance = journal.locker().instance_id().simple().to_string();
    let writers = format!("durably:{}:writer", &instance[..8]);
    // Every worker has a session once each has taken a request.
    for _ in 0..WORKERS {
        journal.write(|_| Ok(())).await.unwrap();
    }
    let backends = |journal: &Journal, writers: &str| {
        let writers = writers.to_owned();
        journal
            .read(move |conn| {
                Ok(conn.query_row(
                    "SELECT CAST(count(*) AS BIGINT) FROM pg_stat_activity
                     WHERE application_name = ?1",
                    [writers],
                    |row| row.get::<_, i64>(0),
                )?)
            })
            .unwrap()
    };
    assert_eq!(backends(&journal, &writers), WORKERS as i64);

    let ended: i64 = journal
        .read({
            let writers = writers.clone();
            move |conn| {
                Ok(conn.query_row(
                    "SELECT CAST(count(pg_terminate_backend(pid, 10000)) AS BIGINT)
                     FROM pg_stat_activity WHERE application_name = ?1",
                    [writers],
                    |row| row.get(0),
                )?)
            }
        })
        .unwrap();
    assert_eq!(ended, WORKERS as i64);

    let id = durably_journal::new_execution_id();
    let execution = running(&journal, id).await;
    let calls = AtomicU32::new(0);
    for seq in 0..STEPS {
        run_step(&execution, seq, &calls).await;
    }
    for _ in 0..WORKERS * 2 {
        journal.write(|_| Ok(())).await.unwrap();
    }
    assert_eq!(backends(&journal, &writers), WORKERS as i64);
    assert_eq!(journal.writer_stats().commits_failed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_deadlocked_requests_one_is_a_conflict_and_commits_nothing() {
    let db = TestDb::on(Backend::Postgres);
    let journal = db.builder().pg_writers(2).open().unwrap();
    journal
        .write(|conn| {
            conn.execute_batch(
                "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);
                 INSERT INTO accounts VALUES (1, 0), (2, 0)",
            )?;
            Ok(())
        })
        .await
        .unwrap();
    // Each request locks one row, waits until the other has locked the other row, then asks
    // for it: a deadlock, which the server breaks by rolling one of them back. Requests about
    // no execution take the workers in turn, so the two run on different workers at once.
    let both_locked = std::sync::Arc::new(std::sync::Barrier::new(2));
    let transfer = |first: i64, second: i64| {
        let both_locked = std::sync::Arc::clone(&both_locked);
        move |conn: &durably_journal::durably_db::Connection| {
            conn.execute(
                "UPDATE accounts SET balance = balance + 1 WHERE id = ?1",
                [first],
            )?;
            both_locked.wait();
            conn.execute(
                "UPDATE accounts SET balance = balance + 1 WHERE id = ?1",
                [second],
            )?;
            Ok(())
        }
    };
    let (one, other) = tokio::join!(journal.write(transfer(1, 2)), journal.write(transfer(2, 1)));
    let outcomes = [one, other];
    let conflicts = outcomes
        .iter()
        .filter(|outcome| matches!(outcome, Err(durably_journal::Error::Conflict { .. })))
        .count();
    assert_eq!(conflicts, 1, "{outcomes:?}");
    // Nothing of it committed, so the same call may simply be made again.
    assert!(
        outcomes
            .iter()
            .filter_map(|outcome| outcome.as_ref().err())
            .all(durably_journal::Error::is_retryable),
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|outcome| outcome.is_ok()).count(),
        1,
        "{outcomes:?}"
    );
    let total: i64 = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT CAST(sum(balance) AS BIGINT) FROM accounts",
                [],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(total, 2, "only the committed request's two updates remain");
}

/// A step whose `COMMIT` is in flight when its session is lost: the server may or may not have
/// committed it, and the step is told so (`CommitUnknown`), never a plain failure; the writer
/// serves the next request on a new session. A deferred constraint trigger on `steps` waits at
/// `COMMIT` for an advisory lock another session holds, so the `COMMIT` is in flight, for
/// certain, when the test terminates the worker's session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_commit_loses_its_session_is_told_the_outcome_is_unknown() {
    use durably_journal::durably_db::{OptionalExtension, PgConnection};

    const WAIT_LOCK_KEY: i64 = 1919;
    let db = TestDb::on(Backend::Postgres);
    let journal = db.builder().pg_writers(1).open().unwrap();
    let instance = journal.locker().instance_id().simple().to_string();
    let writers = format!("durably:{}:writer", &instance[..8]);
    let execution = running(&journal, durably_journal::new_execution_id()).await;
    let holder = PgConnection::connect(&db.target(), "commit-lock-holder").unwrap();
    holder
        .batch_execute(&format!(
            "CREATE FUNCTION wait_at_commit() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN PERFORM pg_advisory_xact_lock({WAIT_LOCK_KEY}); RETURN NULL; END $$;
             CREATE CONSTRAINT TRIGGER steps_wait_at_commit AFTER INSERT ON steps
               DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION wait_at_commit()"
        ))
        .unwrap();
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({WAIT_LOCK_KEY})"
        ))
        .unwrap();

    let step = tokio::spawn(async move {
        execution
            .idempotent("charge", |_key| async { Ok::<_, StepError>(json!(1)) })
            .await
    });
    // The worker's session waits on the advisory lock only inside its COMMIT's trigger.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let waiting_pid = loop {
        let writers = writers.clone();
        let pid: Option<i32> = journal
            .read(move |conn| {
                Ok(conn
                    .query_row(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = ?1
                         AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                        [writers],
                        |row| row.get(0),
                    )
                    .optional()?)
            })
            .unwrap();
        if let Some(pid) = pid {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the step's COMMIT never reached the trigger"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    journal
        .read(move |conn| {
            Ok(conn.query_row(
                "SELECT pg_terminate_backend(?1, 10000)",
                [waiting_pid],
                |row| row.get::<_, bool>(0),
            )?)
        })
        .unwrap();

    let outcome = step.await.unwrap();
    assert!(
        matches!(outcome, Err(durably_journal::Error::CommitUnknown { .. })),
        "{outcome:?}"
    );
    holder.batch_execute("ROLLBACK").unwrap();
    journal
        .write(|conn| Ok(conn.execute_batch("SELECT 1")?))
        .await
        .unwrap();
    assert_eq!(journal.writer_stats().commits_failed, 1);
}
