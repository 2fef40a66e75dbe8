//! The life of an execution as a user relies on it: a new file is private (mode 0600); a
//! completed or failed execution reopens as `Finished` and runs nothing; cancel is refused
//! while a live process holds the execution, and a cancelled one never reopens; a handle
//! dropped without finalizing leaves the execution `running` and listed by `recoverable()`;
//! the retention sweep deletes old finalized executions in batches, with separate ages for
//! completed and failed, and keeps recent ones; a retryable step error is retried up to the
//! policy's bound with every attempt recorded.
//!
//! Method: each test drives the public API in one process; time is an injected clock the
//! test moves, so ages are exact rather than slept for.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use chrono::{TimeDelta, TimeZone, Utc};
use durably_journal::{
    Error, GcOptions, Opened, Policy, RetryPolicy, Status, StepError, event_kind,
};
use support::{ManualClock, Scratch, barrier, count_rows, create_table, start};
use uuid::Uuid;

fn mode_of(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn a_new_database_and_its_wal_are_created_private() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    start(&journal, Uuid::new_v4())
        .await
        .complete(&1)
        .await
        .unwrap();
    scratch.sqlite_only("the modes of the database file and its WAL", |path| {
        assert_eq!(mode_of(path), 0o600, "the database file");
        let wal = path.with_extension("db-wal");
        assert_eq!(mode_of(&wal), 0o600, "the WAL file");
    });
}

#[tokio::test]
async fn a_finished_execution_reopens_as_finished_and_runs_nothing() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let (done, failed) = (Uuid::new_v4(), Uuid::new_v4());
    let execution = start(&journal, done).await;
    let _: u32 = execution.pure("work", || async { Ok(5) }).await.unwrap();
    execution.complete(&"the output").await.unwrap();
    start(&journal, failed)
        .await
        .fail(&"the reason")
        .await
        .unwrap();

    for _ in 0..2 {
        let Opened::Finished(finished) =
            journal.open_execution(done, "test", "", &"").await.unwrap()
        else {
            panic!("a completed execution must not run again");
        };
        assert_eq!(finished.status, Status::Completed);
        assert_eq!(
            finished
                .output
                .as_ref()
                .map(durably_journal::Payload::as_json),
            Some("\"the output\"")
        );
        let Opened::Finished(finished) = journal
            .open_execution(failed, "test", "", &"")
            .await
            .unwrap()
        else {
            panic!("a failed execution must not run again");
        };
        assert_eq!(finished.status, Status::Failed);
        assert_eq!(
            finished
                .error
                .as_ref()
                .map(durably_journal::Payload::as_json),
            Some("\"the reason\"")
        );
    }
    // Reopening neither took the lock nor touched the rows.
    let record = journal.get(done).unwrap().unwrap();
    assert_eq!((record.status.as_str(), record.opens), ("completed", 1));
    assert_eq!(journal.steps(done).unwrap().len(), 1);
    assert!(journal.lock_holders().unwrap().is_empty());
}

#[tokio::test]
async fn cancel_asks_a_holder_to_stop_and_a_cancelled_execution_never_reopens() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let execution = start(&journal, id).await;

    let outcome = journal.operator().cancel(id, "operator").await.unwrap();
    assert_eq!(
        outcome,
        durably_journal::CancelOutcome::Requested {
            pid: i64::from(std::process::id())
        }
    );
    assert_eq!(
        journal.get(id).unwrap().unwrap().status,
        durably_journal::Status::Running
    );

    drop(execution);
    journal.operator().cancel(id, "operator").await.unwrap();
    let record = journal.get(id).unwrap().unwrap();
    assert_eq!(record.status, durably_journal::Status::Cancelled);
    assert!(record.finalized_at.is_some());
    assert!(
        journal
            .events(id)
            .unwrap()
            .iter()
            .any(|event| event.kind == event_kind::CANCELLED)
    );

    for _ in 0..2 {
        let error = journal
            .open_execution(id, "test", "", &"")
            .await
            .unwrap_err();
        assert!(matches!(error, Error::Cancelled(_)), "{error:?}");
    }
    let error = journal.operator().cancel(id, "again").await.unwrap_err();
    assert!(matches!(error, Error::Refused(_)), "{error:?}");
    let error = journal
        .operator()
        .cancel(Uuid::new_v4(), "nothing")
        .await
        .unwrap_err();
    assert!(matches!(error, Error::NotFound(_)), "{error:?}");
}

#[tokio::test]
async fn a_dropped_handle_leaves_the_execution_running_and_recoverable() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let (dropped, held, finished) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let execution = start(&journal, dropped).await;
    let _: u32 = execution.pure("first", || async { Ok(1) }).await.unwrap();
    let still_held = start(&journal, held).await;
    start(&journal, finished).await.complete(&0).await.unwrap();
    drop(execution);
    barrier(&journal).await;

    assert_eq!(
        journal.get(dropped).unwrap().unwrap().status,
        durably_journal::Status::Running
    );
    let recoverable: Vec<Uuid> = journal
        .recoverable()
        .unwrap()
        .into_iter()
        .map(|record| record.execution_id)
        .collect();
    assert_eq!(
        recoverable,
        [dropped],
        "held and finished ones are not recoverable"
    );

    let Opened::Running(resumed) = journal
        .open_execution(dropped, "test", "", &"")
        .await
        .unwrap()
    else {
        panic!("resumable");
    };
    assert!(resumed.is_resume());
    let replayed: u32 = resumed.pure("first", || async { Ok(2) }).await.unwrap();
    assert_eq!(replayed, 1);
    resumed.complete(&"resumed").await.unwrap();
    drop(still_held);
    let record = journal.get(dropped).unwrap().unwrap();
    assert_eq!((record.status.as_str(), record.opens), ("completed", 2));
}

#[tokio::test]
async fn the_retention_sweep_deletes_old_finalized_executions_in_batches_by_age() {
    let scratch = Scratch::new();
    let clock = ManualClock::at(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
    let journal = scratch.builder().clock(clock.clone()).open().unwrap();
    let mut old_completed = Vec::new();
    let mut old_failed = Vec::new();
    for index in 0..5 {
        let id = Uuid::new_v4();
        let execution = start(&journal, id).await;
        let _: u32 = execution.pure("step", || async { Ok(1) }).await.unwrap();
        execution.complete(&index).await.unwrap();
        old_completed.push(id);
        let id = Uuid::new_v4();
        start(&journal, id).await.fail(&index).await.unwrap();
        old_failed.push(id);
    }
    let old_cancelled = Uuid::new_v4();
    drop(start(&journal, old_cancelled).await);
    journal
        .operator()
        .cancel(old_cancelled, "no longer wanted")
        .await
        .unwrap();
    let old_running = Uuid::new_v4();
    let running_handle = start(&journal, old_running).await;

    clock.advance(TimeDelta::days(3));
    let recent_completed = Uuid::new_v4();
    start(&journal, recent_completed)
        .await
        .complete(&"recent")
        .await
        .unwrap();
    let recent_failed = Uuid::new_v4();
    start(&journal, recent_failed)
        .await
        .fail(&"recent")
        .await
        .unwrap();
    clock.advance(TimeDelta::hours(1));

    // Completed after 2 days, failed and cancelled after 10: only the old completed go.
    let options = GcOptions {
        completed_older_than: Duration::from_hours(48),
        failed_older_than: Duration::from_hours(240),
        dry_run: false,
        batch_executions_max: 2,
    };
    let dry = journal
        .operator()
        .collect_garbage(
            GcOptions {
                dry_run: true,
                ..options
            },
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!((dry.completed, dry.failed, dry.batches), (5, 0, 0));
    assert!(
        journal.get(old_completed[0]).unwrap().is_some(),
        "a dry run deleted"
    );
    let mut progress = Vec::new();
    let report = journal
        .operator()
        .collect_garbage(options, |report| progress.push(*report))
        .await
        .unwrap();
    assert_eq!(
        (report.completed, report.failed, report.batches),
        (5, 0, 3),
        "{report:?}"
    );
    assert_eq!(
        progress.len(),
        3,
        "one progress call per batch of at most 2"
    );
    for id in &old_completed {
        assert!(
            journal.get(*id).unwrap().is_none(),
            "an old completed execution survived"
        );
        assert!(journal.steps(*id).unwrap().is_empty(), "its steps survived");
    }
    for id in old_failed.iter().chain([
        &old_cancelled,
        &old_running,
        &recent_completed,
        &recent_failed,
    ]) {
        assert!(
            journal.get(*id).unwrap().is_some(),
            "{id} was deleted too early"
        );
    }

    // Eleven days on, the failed and cancelled go too; recent completed ones are older than
    // two days by then, and the running one is never collected.
    clock.advance(TimeDelta::days(8));
    let report = journal
        .operator()
        .collect_garbage(options, |_| {})
        .await
        .unwrap();
    assert_eq!((report.completed, report.failed), (1, 6), "{report:?}");
    assert!(
        journal.get(recent_failed).unwrap().is_some(),
        "failed 8 days ago is kept"
    );
    assert!(
        journal.get(old_running).unwrap().is_some(),
        "a running execution was collected"
    );
    let lock_rows: i64 = journal
        .read(|conn| Ok(conn.query_row("SELECT count(*) FROM locks", [], |row| row.get(0))?))
        .unwrap();
    assert_eq!(
        lock_rows, 2,
        "the lock rows of deleted executions are deleted with them"
    );
    drop(running_handle);
}

#[tokio::test]
async fn a_retryable_step_error_is_retried_up_to_the_bound_and_each_attempt_recorded() {
    let scratch = Scratch::new();
    let journal = scratch
        .builder()
        .retry(RetryPolicy {
            attempts_max: 3,
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(2),
        })
        .open()
        .unwrap();
    let id = Uuid::new_v4();
    let execution = start(&journal, id).await;

    // Fails twice, then succeeds on the third and last allowed attempt.
    let calls = AtomicU32::new(0);
    let value = execution
        .guarded("flaky charge", Policy::Fail, |_key| {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if call < 3 {
                    Err(StepError::retryable(format!("timeout {call}")))
                } else {
                    Ok(call)
                }
            }
        })
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!((value, calls.load(Ordering::SeqCst)), (3, 3));

    // Always fails: three attempts, then the last error is journaled as the step's failure.
    let always = AtomicU32::new(0);
    let error = execution
        .pure("always down", || {
            always.fetch_add(1, Ordering::SeqCst);
            async { Err::<u32, _>(StepError::retryable("still down")) }
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::StepFailed { seq: 1, error, .. } if error.message == "still down"),
        "{error:?}"
    );
    assert_eq!(
        always.load(Ordering::SeqCst),
        3,
        "more or fewer attempts than the bound"
    );

    // A fatal error is not retried.
    let fatal = AtomicU32::new(0);
    let error = execution
        .pure("fatal", || {
            fatal.fetch_add(1, Ordering::SeqCst);
            async { Err::<u32, _>(StepError::fatal("bad request")) }
        })
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::StepFailed { seq: 2, .. }),
        "{error:?}"
    );
    assert_eq!(fatal.load(Ordering::SeqCst), 1);
    drop(execution);
    barrier(&journal).await;

    let steps = journal.steps(id).unwrap();
    assert_eq!(
        (steps[0].state.as_str(), steps[0].attempts),
        ("completed", 3)
    );
    assert_eq!((steps[1].state.as_str(), steps[1].attempts), ("failed", 3));
    assert_eq!((steps[2].state.as_str(), steps[2].attempts), ("failed", 1));
    let events = journal.events(id).unwrap();
    let failed_attempts = |seq: u32| {
        events
            .iter()
            .filter(|event| event.kind == event_kind::ATTEMPT_FAILED && event.seq == Some(seq))
            .count()
    };
    assert_eq!(
        failed_attempts(0),
        2,
        "each failed attempt before the success is recorded"
    );
    assert_eq!(
        failed_attempts(1),
        2,
        "each failed attempt before the last is recorded"
    );
    assert_eq!(failed_attempts(2), 0);

    // Replay returns the journaled failure without another attempt.
    let Opened::Running(execution) = journal.open_execution(id, "test", "", &"").await.unwrap()
    else {
        panic!("resumable");
    };
    let replayed = execution
        .guarded("flaky charge", Policy::Fail, |_key| async {
            Ok::<u32, StepError>(0)
        })
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(replayed, 3);
    let error = execution
        .pure("always down", || {
            always.fetch_add(1, Ordering::SeqCst);
            async { Ok(0_u32) }
        })
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::StepFailed { seq: 1, .. }),
        "{error:?}"
    );
    assert_eq!(always.load(Ordering::SeqCst), 3);
}

/// `complete_with` commits the program's own rows with the execution's end, and an error in
/// them writes nothing: the execution stays running and can be reopened and finished.
#[tokio::test]
async fn complete_with_commits_the_extra_rows_with_the_end_or_nothing() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    create_table(&journal, "CREATE TABLE outbox (message TEXT NOT NULL)").await;
    let id = Uuid::now_v7();
    let execution = start(&journal, id).await;
    let refused = execution
        .complete_with(&"done", |conn| {
            conn.execute("INSERT INTO outbox (message) VALUES ('sent')", [])?;
            Err(Error::Refused("the outbox said no".to_owned()))
        })
        .await;
    assert!(matches!(refused, Err(Error::Refused(_))), "{refused:?}");
    barrier(&journal).await;
    let outbox_rows = || count_rows(&journal, "outbox");
    assert_eq!(outbox_rows(), 0, "the failed end wrote nothing");
    assert_eq!(
        journal.get(id).unwrap().unwrap().status,
        durably_journal::Status::Running
    );

    let execution = start(&journal, id).await;
    execution
        .complete_with(&"done", |conn| {
            conn.execute("INSERT INTO outbox (message) VALUES ('sent')", [])?;
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(outbox_rows(), 1);
    assert_eq!(
        journal.get(id).unwrap().unwrap().status,
        durably_journal::Status::Completed
    );
}

/// `guarded_with` commits the program's own rows with the step's intent, before the effect
/// runs; an error in them writes neither and runs nothing; and a step replayed on a later run
/// records no intent, so the rows are not written again.
#[tokio::test]
async fn guarded_with_commits_the_extra_rows_with_the_intent_or_nothing() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    create_table(&journal, "CREATE TABLE marks (step TEXT NOT NULL)").await;
    let marks = || count_rows(&journal, "marks");
    let mark = |conn: &durably_journal::durably_db::Connection| -> durably_journal::Result<()> {
        conn.execute("INSERT INTO marks (step) VALUES ('charge')", [])?;
        Ok(())
    };
    let id = Uuid::now_v7();

    let execution = start(&journal, id).await;
    let ran = AtomicU32::new(0);
    let refused = execution
        .guarded_with(
            "charge",
            Policy::Fail,
            move |conn| {
                mark(conn)?;
                Err(Error::Refused("the ledger said no".to_owned()))
            },
            |_key| async {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok::<u32, StepError>(7)
            },
        )
        .await;
    assert!(matches!(refused, Err(Error::Refused(_))), "{refused:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "no intent, so no effect");
    drop(execution);
    barrier(&journal).await;
    assert_eq!(marks(), 0, "the failed intent wrote nothing");
    assert!(journal.steps(id).unwrap().is_empty());

    let execution = start(&journal, id).await;
    let rows_at_effect = std::sync::Arc::new(AtomicU32::new(u32::MAX));
    let seen = std::sync::Arc::clone(&rows_at_effect);
    let reader = journal.clone();
    let done = execution
        .guarded_with("charge", Policy::Fail, mark, move |_key| {
            let (seen, reader) = (std::sync::Arc::clone(&seen), reader.clone());
            async move {
                // Committed with the intent, so visible to any reader once the effect runs.
                let count = u32::try_from(count_rows(&reader, "marks")).unwrap();
                seen.store(count, Ordering::SeqCst);
                Ok::<u32, StepError>(7)
            }
        })
        .await
        .unwrap();
    assert_eq!(done.into_result().unwrap(), 7);
    assert_eq!(rows_at_effect.load(Ordering::SeqCst), 1);
    drop(execution);
    barrier(&journal).await;

    let execution = start(&journal, id).await;
    let replayed = execution
        .guarded_with("charge", Policy::Fail, mark, |_key| async {
            Ok::<u32, StepError>(8)
        })
        .await
        .unwrap();
    assert_eq!(replayed.into_result().unwrap(), 7, "replayed, not run");
    execution.complete(&"done").await.unwrap();
    assert_eq!(marks(), 1, "the replay recorded no intent and no rows");
}
