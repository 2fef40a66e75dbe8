//! A caller's hook commits with the journal's own write or not at all: a pure or idempotent
//! step's hook ([`Execution::step_with`]) in the one commit that records the step, a release's
//! hook ([`Execution::release_to`]) with the status change, the event and the lock's release.
//! A hook that declines with `Error::Aborted` leaves nothing written and the handle usable; a
//! replayed step runs no hook; each release target leaves the row, the event and the lock as
//! documented, also from a halted handle.
//!
//! Method: hooks write rows into a side table of the journal's database; the tests read the
//! execution row, its steps, its events, its lock row and the side table after each call, and
//! count commits with the writer's statistics. Crashes between the hook and the commit are in
//! `tests/tests/journal_hooks_crash.rs` (real child processes).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use chrono::{TimeDelta, Utc};
use durably_journal::durably_db::{self, Connection, params};
use durably_journal::{
    Effect, Error, Execution, Journal, Opened, Release, STATUS_DETAIL_BYTES_MAX, Status, StepError,
    StepRef, StepState, Timing, event_kind,
};
use serde_json::json;
use support::{Scratch, start};
use uuid::Uuid;

async fn with_side_table(journal: &Journal) {
    journal
        .write(|conn| {
            // `n` numbers the rows in insertion order, in SQL both backends speak.
            conn.execute_batch(
                "CREATE TABLE side (n INTEGER NOT NULL, execution_id TEXT, seq INTEGER, note TEXT)",
            )?;
            Ok(())
        })
        .await
        .unwrap();
}

fn side_rows(journal: &Journal) -> Vec<(String, Option<u32>, String)> {
    journal
        .read(|conn| {
            let mut statement =
                conn.prepare("SELECT execution_id, seq, note FROM side ORDER BY n")?;
            let rows =
                statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
            Ok(rows.collect::<durably_db::Result<_>>()?)
        })
        .unwrap()
}

fn note(conn: &Connection, step: StepRef, note: &str) -> durably_journal::Result<()> {
    conn.execute(
        "INSERT INTO side (n, execution_id, seq, note)
         SELECT coalesce(max(n), 0) + 1, ?1, ?2, ?3 FROM side",
        params![step.execution_id.to_string(), step.seq, note],
    )?;
    Ok(())
}

fn note_release(conn: &Connection, id: Uuid, what: &str) -> durably_journal::Result<()> {
    conn.execute(
        "INSERT INTO side (n, execution_id, seq, note)
         SELECT coalesce(max(n), 0) + 1, ?1, NULL, ?2 FROM side",
        params![id.to_string(), what],
    )?;
    Ok(())
}

/// The execution's status, due_at, wait_topic and status_detail, and whether its lock is held.
fn parked_row(
    journal: &Journal,
    id: Uuid,
) -> (String, Option<String>, Option<String>, Option<String>, bool) {
    journal
        .read(|conn| {
            let row = conn.query_row(
                "SELECT status, due_at, wait_topic, status_detail FROM executions
                 WHERE execution_id = ?1",
                [id.to_string()],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )?;
            let held = durably_lock::read(conn, &id.to_string())
                .unwrap()
                .is_some_and(|lock| lock.holder.is_some());
            Ok((row.0, row.1, row.2, row.3, held))
        })
        .unwrap()
}

fn event_kinds(journal: &Journal, id: Uuid) -> Vec<String> {
    journal
        .events(id)
        .unwrap()
        .into_iter()
        .map(|event| event.kind)
        .collect()
}

async fn hooked_step(
    execution: &mut Execution,
    name: &str,
    value: u32,
    what: &'static str,
) -> durably_journal::Result<u32> {
    execution
        .step_with(
            name,
            Effect::Idempotent,
            Timing::Now,
            move |_key| async move { Ok(value) },
            move |conn, step| note(conn, step, what),
        )
        .await
}

/// The hook's row and the step's row are written by one commit, and the hook learns the
/// step's seq and how it ended; a failed closure is recorded with its hook run too.
#[tokio::test]
async fn a_hook_commits_with_its_step_in_one_commit() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    with_side_table(&journal).await;
    let id = durably_journal::new_execution_id();
    let mut execution = start(&journal, id).await;

    let before = journal.writer_stats().commits;
    assert_eq!(
        hooked_step(&mut execution, "first", 7, "first")
            .await
            .unwrap(),
        7
    );
    assert_eq!(journal.writer_stats().commits - before, 1);

    let states = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&states);
    let failed = execution
        .step_with(
            "refused",
            Effect::Pure,
            Timing::Deferred,
            |_key| async { Err::<u32, _>(StepError::fatal("no")) },
            move |conn, step| {
                seen.lock().unwrap().push(step.state);
                note(conn, step, "refused")
            },
        )
        .await;
    assert!(
        matches!(failed, Err(Error::StepFailed { seq: 1, .. })),
        "{failed:?}"
    );
    assert_eq!(*states.lock().unwrap(), [StepState::Failed]);
    execution.complete(&"done").await.unwrap();

    let steps = journal.steps(id).unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(
        side_rows(&journal),
        [
            (id.to_string(), Some(0), "first".to_owned()),
            (id.to_string(), Some(1), "refused".to_owned())
        ]
    );
}

/// A hook that returns `Aborted` leaves neither the step nor its own rows, the caller gets
/// `Aborted`, and the same step can be called again at the same seq and then completes.
#[tokio::test]
async fn an_aborting_hook_writes_nothing_and_the_handle_goes_on() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    with_side_table(&journal).await;
    let id = durably_journal::new_execution_id();
    let mut execution = start(&journal, id).await;

    let declined = execution
        .step_with(
            "consume",
            Effect::Pure,
            Timing::Now,
            |_key| async { Ok(1_u32) },
            move |conn, step| {
                note(conn, step, "written before the abort")?;
                Err(Error::Aborted("nothing to consume"))
            },
        )
        .await;
    assert!(
        matches!(declined, Err(Error::Aborted("nothing to consume"))),
        "{declined:?}"
    );
    assert!(journal.steps(id).unwrap().is_empty());
    assert!(side_rows(&journal).is_empty());
    assert_eq!(execution.next_seq(), 0);

    assert_eq!(
        hooked_step(&mut execution, "consume", 2, "again")
            .await
            .unwrap(),
        2
    );
    execution.complete(&"done").await.unwrap();
    assert_eq!(journal.steps(id).unwrap().len(), 1);
    assert_eq!(
        side_rows(&journal),
        [(id.to_string(), Some(0), "again".to_owned())]
    );
}

/// A recorded step replays its outcome on a later open without calling its closure or its
/// hook: the hook's rows committed once, with the step, on the first run.
#[tokio::test]
async fn replay_returns_the_recorded_outcome_and_runs_no_hook() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    with_side_table(&journal).await;
    let id = durably_journal::new_execution_id();
    let mut execution = start(&journal, id).await;
    hooked_step(&mut execution, "first", 7, "first")
        .await
        .unwrap();
    drop(execution);

    let Opened::Running(execution) = journal
        .open_execution(id, "test", "", &"input")
        .await
        .unwrap()
    else {
        panic!("the execution finished");
    };
    let (calls, hooks) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let (called, hooked) = (Arc::clone(&calls), Arc::clone(&hooks));
    let value: u32 = execution
        .step_with(
            "first",
            Effect::Idempotent,
            Timing::Now,
            move |_key| {
                called.fetch_add(1, Ordering::SeqCst);
                async { Ok(99) }
            },
            move |conn, step| {
                hooked.fetch_add(1, Ordering::SeqCst);
                note(conn, step, "replayed")
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (
            value,
            calls.load(Ordering::SeqCst),
            hooks.load(Ordering::SeqCst)
        ),
        (7, 0, 0)
    );
    assert_eq!(
        side_rows(&journal),
        [(id.to_string(), Some(0), "first".to_owned())]
    );
}

/// `step_with` records pure and idempotent steps only; a guarded effect is refused before
/// anything runs, and the handle goes on.
#[tokio::test]
async fn a_guarded_effect_is_refused_before_it_runs() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = durably_journal::new_execution_id();
    let execution = start(&journal, id).await;
    let refused = execution
        .step_with(
            "charge",
            Effect::Guarded,
            Timing::Now,
            |_key| async { panic!("a refused step ran") },
            |_, _| -> durably_journal::Result<()> { panic!("a refused hook ran") },
        )
        .await;
    assert!(
        matches!(refused, Err::<u32, _>(Error::Refused(_))),
        "{refused:?}"
    );
    assert_eq!(execution.next_seq(), 0);
    execution.complete(&"done").await.unwrap();
}

/// Each release target: the status, `due_at`, `wait_topic` and `status_detail` columns, the
/// audit event, the lock released, the hook's rows, and a handle that writes nothing more;
/// an open of the parked execution is refused.
#[tokio::test]
async fn each_release_target_parks_the_row_with_its_event_and_frees_the_lock() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    with_side_table(&journal).await;
    let due_at = Utc::now() + TimeDelta::minutes(5);
    let due_text = durably_lock::format_timestamp(due_at);
    let targets = [
        (
            Release::Waiting {
                due_at,
                topic: Some("approval".to_owned()),
            },
            (
                "waiting",
                Some(due_text.clone()),
                Some("approval".to_owned()),
            ),
            event_kind::PARKED,
        ),
        (
            Release::Waiting {
                due_at,
                topic: None,
            },
            ("waiting", Some(due_text.clone()), None),
            event_kind::PARKED,
        ),
        (
            Release::Queued {
                due_at: Some(due_at),
            },
            ("queued", Some(due_text.clone()), None),
            event_kind::YIELDED,
        ),
        (
            Release::Queued { due_at: None },
            ("queued", None, None),
            event_kind::YIELDED,
        ),
        (Release::Stuck, ("stuck", None, None), event_kind::STUCK),
    ];
    for (to, (status, due, topic), kind) in targets {
        let id = durably_journal::new_execution_id();
        let execution = start(&journal, id).await;
        execution
            .pure("before", || async { Ok(1_u32) })
            .await
            .unwrap();
        let before = journal.writer_stats().commits;
        execution
            .release_to(to.clone(), json!({ "reason": "test" }), move |conn| {
                note_release(conn, id, "released")
            })
            .await
            .unwrap();
        assert_eq!(journal.writer_stats().commits - before, 1, "{to:?}");
        let row = parked_row(&journal, id);
        assert_eq!(
            row,
            (
                status.to_owned(),
                due.clone(),
                topic,
                Some(r#"{"reason":"test"}"#.to_owned()),
                false
            ),
            "{to:?}"
        );
        assert_eq!(
            event_kinds(&journal, id).last().map(String::as_str),
            Some(kind)
        );
        assert!(side_rows(&journal).contains(&(id.to_string(), None, "released".to_owned())));

        let after = execution.pure("after", || async { Ok(2_u32) }).await;
        assert!(matches!(after, Err(Error::Refused(_))), "{after:?}");
        let again = execution
            .release_to(Release::Stuck, json!(null), |_| Ok(()))
            .await;
        assert!(matches!(again, Err(Error::Refused(_))), "{again:?}");
        assert!(matches!(
            execution.complete(&"x").await,
            Err(Error::Refused(_))
        ));
        let open = journal.open_execution(id, "test", "", &"input").await;
        assert!(matches!(open, Err(Error::NotRunnable { .. })), "{open:?}");
    }
}

/// A handle halted by non-determinism can still be released: the run's recorded steps stay,
/// and the execution is parked `stuck` with the reason, its lock free.
#[tokio::test]
async fn a_halted_handle_can_be_released() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = durably_journal::new_execution_id();
    let execution = start(&journal, id).await;
    execution.pure("a", || async { Ok(1_u32) }).await.unwrap();
    drop(execution);

    let Opened::Running(execution) = journal
        .open_execution(id, "test", "", &"input")
        .await
        .unwrap()
    else {
        panic!("the execution finished");
    };
    let diverged = execution.pure("b", || async { Ok(1_u32) }).await;
    assert!(
        matches!(diverged, Err(Error::NonDeterminism { .. })),
        "{diverged:?}"
    );
    execution
        .release_to(
            Release::Stuck,
            json!({ "reason": "non_determinism", "seq": 0 }),
            |_| Ok(()),
        )
        .await
        .unwrap();
    let (status, _, _, detail, held) = parked_row(&journal, id);
    assert_eq!((status.as_str(), held), ("stuck", false));
    assert!(detail.unwrap().contains("non_determinism"));
    assert_eq!(journal.steps(id).unwrap().len(), 1);
}

/// A release whose hook declines writes nothing (the row, the lock and the events are as
/// before) and the handle goes on: it runs a step and completes.
#[tokio::test]
async fn a_declined_release_writes_nothing_and_the_handle_goes_on() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    with_side_table(&journal).await;
    let id = durably_journal::new_execution_id();
    let execution = start(&journal, id).await;
    let before = (parked_row(&journal, id), event_kinds(&journal, id));
    let declined = execution
        .release_to(
            Release::Waiting {
                due_at: Utc::now(),
                topic: Some("t".to_owned()),
            },
            json!({ "waiting_for": "t" }),
            move |conn| {
                note_release(conn, id, "written before the abort")?;
                Err(Error::Aborted("a message is already there"))
            },
        )
        .await;
    assert!(matches!(declined, Err(Error::Aborted(_))), "{declined:?}");
    assert_eq!(
        (parked_row(&journal, id), event_kinds(&journal, id)),
        before
    );
    assert!(side_rows(&journal).is_empty());

    execution
        .pure("goes on", || async { Ok(3_u32) })
        .await
        .unwrap();
    execution.complete(&"done").await.unwrap();
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Completed);
}

/// A status detail over the column's bound is refused before anything is written.
#[tokio::test]
async fn an_oversized_detail_is_refused_without_writing() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = durably_journal::new_execution_id();
    let execution = start(&journal, id).await;
    let before = journal.writer_stats().commits;
    let detail = json!({ "reason": "x".repeat(STATUS_DETAIL_BYTES_MAX) });
    let refused = execution
        .release_to(Release::Stuck, detail, |_| Ok(()))
        .await;
    assert!(
        matches!(refused, Err(Error::PayloadTooLarge { .. })),
        "{refused:?}"
    );
    assert_eq!(journal.writer_stats().commits, before);
    execution.complete(&"done").await.unwrap();
}
