//! Write-behind and the deferred open keep every promise of write-through while cutting the
//! commits to one per effect: the commit counts per workload (docs/design.md, "Hooks, releases
//! and write-behind"), rules W1–W5, `FencingToken(0)` before the open, a lost open race that
//! writes nothing, hooks that decline without losing what is pending, and a finalize that
//! rides on the last step's write.
//!
//! Method: executions begun with `Journal::begin_execution` and `defer_results`, driven in
//! this process; commits are counted with the writer's statistics, and what is durable is read
//! through the read pool from inside step closures and between steps. Crashes at the new
//! failpoints are in `tests/tests/journal_deferred_crash.rs` (real child processes).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use durably_journal::durably_db::params;
use durably_journal::{
    Begun, DEFERRED_STEPS_MAX, Effect, Error, Execution, FencingToken, Guarded, Journal, Policy,
    Release, Status, StepError, Timing,
};
use serde_json::json;
use support::{Scratch, create_table, start};
use uuid::Uuid;

fn input(journal: &Journal) -> durably_journal::Payload {
    journal.encode_payload(&"input", "the input").unwrap()
}

/// A deferring handle on a new execution.
fn begin(journal: &Journal, id: Uuid) -> Execution {
    match journal
        .begin_execution(id, "test", "a test", &input(journal), |_| Ok(()))
        .unwrap()
    {
        Begun::New(mut execution) => {
            execution.defer_results();
            execution
        }
        Begun::Exists(record) => panic!("{id} exists: {record:?}"),
    }
}

fn durable_steps(journal: &Journal, id: Uuid) -> usize {
    journal.steps(id).unwrap().len()
}

async fn idempotent(execution: &mut Execution, seq: u32) -> u32 {
    execution
        .idempotent(&format!("i{seq}"), |_key| async move { Ok(seq) })
        .await
        .unwrap()
}

async fn guarded(execution: &mut Execution, seq: u32) -> u32 {
    let done = execution
        .guarded(
            &format!("g{seq}"),
            Policy::Fail,
            |_key| async move { Ok(seq) },
        )
        .await
        .unwrap();
    let Guarded::Done(value) = done else {
        panic!("nothing crashed")
    };
    value
}

async fn pure(execution: &mut Execution, seq: u32) -> u32 {
    execution
        .pure(&format!("p{seq}"), || async move { Ok(seq) })
        .await
        .unwrap()
}

/// Commits of a whole execution, open to finalize, for each workload: one per effect.
#[tokio::test]
async fn each_workload_costs_one_commit_per_effect() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let commits = |before: u64| journal.writer_stats().commits - before;

    let before = journal.writer_stats().commits;
    let mut execution = begin(&journal, durably_journal::new_execution_id());
    for seq in 0..10 {
        idempotent(&mut execution, seq).await;
    }
    execution.complete(&"done").await.unwrap();
    assert_eq!(commits(before), 10, "10 idempotent steps");

    let before = journal.writer_stats().commits;
    let mut execution = begin(&journal, durably_journal::new_execution_id());
    for seq in 0..10 {
        guarded(&mut execution, seq).await;
    }
    execution.complete(&"done").await.unwrap();
    assert_eq!(commits(before), 11, "10 guarded steps");

    let before = journal.writer_stats().commits;
    let id = durably_journal::new_execution_id();
    let mut execution = begin(&journal, id);
    pure(&mut execution, 0).await;
    pure(&mut execution, 1).await;
    idempotent(&mut execution, 2).await;
    guarded(&mut execution, 3).await;
    execution.complete(&"done").await.unwrap();
    assert_eq!(commits(before), 3, "pure, pure, idempotent, guarded");
    assert_eq!(durable_steps(&journal, id), 4);
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Completed);

    let before = journal.writer_stats().commits;
    let id = durably_journal::new_execution_id();
    begin(&journal, id)
        .complete(&"nothing to do")
        .await
        .unwrap();
    assert_eq!(commits(before), 1, "no steps");
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Completed);

    // A hand-driven execution writes through: open, 10 results, finalize.
    let before = journal.writer_stats().commits;
    let mut execution = start(&journal, durably_journal::new_execution_id()).await;
    for seq in 0..10 {
        idempotent(&mut execution, seq).await;
    }
    execution.complete(&"done").await.unwrap();
    assert_eq!(commits(before), 12, "hand-driven");
}

/// Before the first write there is no row and no lock, and closures get token 0; the first
/// idempotent closure may run then, the second runs only after the open and step 0's row are
/// durable (W1), under the lock's token.
#[tokio::test]
async fn the_open_rides_on_the_first_write_and_tokens_are_zero_before_it() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = durably_journal::new_execution_id();
    let execution = begin(&journal, id);
    assert_eq!(execution.fencing_token(), FencingToken(0));

    let seen = Arc::new(Mutex::new(Vec::new()));
    for seq in 0..2 {
        let (seen, reader) = (Arc::clone(&seen), journal.clone());
        execution
            .idempotent(&format!("i{seq}"), move |key| {
                let durable = (
                    reader.get(id).unwrap().is_some(),
                    durable_steps(&reader, id),
                );
                seen.lock().unwrap().push((key.fencing_token(), durable));
                async move { Ok(seq) }
            })
            .await
            .unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0], (FencingToken(0), (false, 0)));
    assert!(seen[1].0 > FencingToken(0), "{seen:?}");
    assert_eq!(
        seen[1].1,
        (true, 1),
        "step 0 was not durable before step 1's closure"
    );
    assert_eq!(execution.fencing_token(), seen[1].0);
    assert_eq!(durable_steps(&journal, id), 1, "step 1 is pending");
    execution.complete(&"done").await.unwrap();
    assert_eq!(durable_steps(&journal, id), 2);
}

/// Pure results stay pending until a bound (W3) or a forced flush; a dropped handle loses what
/// is pending (W5): an unopened one leaves no row at all, an opened one a gapless prefix that
/// the next open replays.
#[tokio::test]
async fn pure_results_wait_until_a_bound_and_a_drop_loses_only_them() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = durably_journal::new_execution_id();
    let mut execution = begin(&journal, id);
    for seq in 0..3 {
        pure(&mut execution, seq).await;
    }
    assert!(
        journal.get(id).unwrap().is_none(),
        "a pure step opened the execution"
    );
    drop(execution);
    assert!(journal.get(id).unwrap().is_none());

    let mut execution = begin(&journal, id);
    let limit = u32::try_from(DEFERRED_STEPS_MAX).unwrap();
    for seq in 0..limit {
        pure(&mut execution, seq).await;
    }
    assert_eq!(durable_steps(&journal, id), DEFERRED_STEPS_MAX);
    pure(&mut execution, limit).await;
    execution.flush().await.unwrap();
    pure(&mut execution, limit + 1).await;
    assert_eq!(durable_steps(&journal, id), DEFERRED_STEPS_MAX + 1);
    drop(execution);
    support::barrier(&journal).await;

    let mut execution = start(&journal, id).await;
    assert_eq!(execution.recorded_steps(), limit + 1);
    for seq in 0..=limit + 1 {
        pure(&mut execution, seq).await;
    }
    execution.complete(&"done").await.unwrap();
}

/// A guarded step's result waits only until the next closure: a pure closure after it runs
/// once the result is durable.
#[tokio::test]
async fn a_guarded_result_is_durable_before_the_next_closure_runs() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = durably_journal::new_execution_id();
    let mut execution = begin(&journal, id);
    guarded(&mut execution, 0).await;
    let reader = journal.clone();
    let state = execution
        .pure("after", move || {
            let state = reader.steps(id).unwrap()[0].state;
            async move { Ok(state.as_str().to_owned()) }
        })
        .await
        .unwrap();
    assert_eq!(state, "completed");
    execution.complete(&"done").await.unwrap();
}

/// Two handles begin the same id; the second to write loses: `OpenRaced`, nothing of its
/// write (its pending rows) committed, the winner's execution untouched. A second begin in the
/// same journal while a handle lives is refused at once.
#[tokio::test]
async fn a_lost_open_race_writes_nothing() {
    let scratch = Scratch::new();
    let (winner_journal, loser_journal) = (scratch.open(), scratch.open());
    let id = durably_journal::new_execution_id();
    let mut winner = begin(&winner_journal, id);
    let loser = begin(&loser_journal, id);
    let again = winner_journal.begin_execution(id, "test", "", &input(&winner_journal), |_| Ok(()));
    assert!(
        matches!(again, Err(Error::OpenRaced(raced)) if raced == id),
        "{again:?}"
    );

    pure(&mut winner, 0).await;
    winner.flush().await.unwrap();
    loser.pure("other", || async { Ok(5_u32) }).await.unwrap();
    let lost = loser.flush().await;
    assert!(
        matches!(lost, Err(Error::OpenRaced(raced)) if raced == id),
        "{lost:?}"
    );
    let halted = loser.pure("after", || async { Ok(1_u32) }).await;
    assert!(matches!(halted, Err(Error::Halted { .. })), "{halted:?}");
    drop(loser);

    let steps = winner_journal.steps(id).unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].name, "p0");
    winner.complete(&"won").await.unwrap();
    assert_eq!(
        winner_journal.get(id).unwrap().unwrap().status,
        Status::Completed
    );
    assert!(matches!(
        winner_journal.begin_execution(id, "test", "", &input(&winner_journal), |_| Ok(())),
        Ok(Begun::Exists(_))
    ));
}

/// The open hook's rows commit with the first write; a hook that declines a write made at
/// once leaves what is pending pending (the open included), and the handle goes on.
#[tokio::test]
async fn a_declined_write_keeps_what_is_pending() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    create_table(&journal, "CREATE TABLE side (note TEXT)").await;
    let id = durably_journal::new_execution_id();
    let Begun::New(mut execution) = journal
        .begin_execution(id, "test", "", &input(&journal), |conn| {
            conn.execute("INSERT INTO side (note) VALUES ('opened')", [])?;
            Ok(())
        })
        .unwrap()
    else {
        panic!("the execution exists")
    };
    execution.defer_results();
    pure(&mut execution, 0).await;
    let declined = execution
        .step_with(
            "consume",
            Effect::Pure,
            Timing::Now,
            |_key| async { Ok(1_u32) },
            |_, _| Err(Error::Aborted("nothing to consume")),
        )
        .await;
    assert!(matches!(declined, Err(Error::Aborted(_))), "{declined:?}");
    let parked = execution
        .release_to(Release::Queued { due_at: None }, json!(null), |_| {
            Err(Error::Aborted("not now"))
        })
        .await;
    assert!(matches!(parked, Err(Error::Aborted(_))), "{parked:?}");
    // The declined step's hook had to see its execution's row, so the open committed first
    // (with the pending pure step); nothing of the declined step or release did.
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Running);
    assert_eq!(durable_steps(&journal, id), 1);

    execution
        .step_with(
            "consume",
            Effect::Pure,
            Timing::Now,
            |_key| async { Ok(2_u32) },
            move |conn, step| {
                conn.execute(
                    "INSERT INTO side (note) VALUES (?1)",
                    params![format!("consumed at {}", step.seq)],
                )?;
                Ok(())
            },
        )
        .await
        .unwrap();
    assert_eq!(durable_steps(&journal, id), 2);
    let notes: Vec<String> = journal
        .read(|conn| {
            let mut statement = conn.prepare("SELECT note FROM side ORDER BY note")?;
            let rows = statement.query_map([], |row| row.get(0))?;
            Ok(rows.collect::<durably_journal::durably_db::Result<_>>()?)
        })
        .unwrap();
    let mut notes = notes;
    notes.sort();
    assert_eq!(notes, ["consumed at 1", "opened"]);
    execution.complete(&"done").await.unwrap();
}

/// A deferred hook runs in a write its step did not make, so it cannot decline it: its
/// `Aborted` halts the handle as an inconsistency, and nothing of that write commits.
#[tokio::test]
async fn a_deferred_hook_cannot_decline() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = durably_journal::new_execution_id();
    let execution = begin(&journal, id);
    execution
        .step_with(
            "later",
            Effect::Pure,
            Timing::Deferred,
            |_key| async { Ok(1_u32) },
            |_, _| Err(Error::Aborted("too late to decline")),
        )
        .await
        .unwrap();
    let flushed = execution.flush().await;
    assert!(
        matches!(flushed, Err(Error::Inconsistent(_))),
        "{flushed:?}"
    );
    assert!(journal.get(id).unwrap().is_none());
}

/// A release or a failure of a handle that never wrote opens the execution and ends it in
/// the same commit, with the pending rows.
#[tokio::test]
async fn an_end_before_any_write_opens_and_ends_in_one_commit() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = durably_journal::new_execution_id();
    let mut execution = begin(&journal, id);
    pure(&mut execution, 0).await;
    let before = journal.writer_stats().commits;
    execution
        .release_to(Release::Stuck, json!({ "reason": "test" }), |_| Ok(()))
        .await
        .unwrap();
    assert_eq!(journal.writer_stats().commits - before, 1);
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Stuck);
    assert_eq!(durable_steps(&journal, id), 1);

    let id = durably_journal::new_execution_id();
    let execution = begin(&journal, id);
    let failed = execution
        .pure("refused", || async {
            Err::<u32, _>(StepError::fatal("no"))
        })
        .await;
    assert!(
        matches!(failed, Err(Error::StepFailed { .. })),
        "{failed:?}"
    );
    execution.fail(&"gave up").await.unwrap();
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Failed);
    assert_eq!(durable_steps(&journal, id), 1);
}
