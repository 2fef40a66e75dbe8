//! Claims and the status changes of parked executions (`lifecycle`), as the runtime uses them:
//! a queued execution is claimed by exactly one of two racing journals (two lock instances, as
//! two processes); a claim moves it to `running` under its lock and opens without another
//! write; a claim dropped unopened releases the lock, and the sweep then finds the execution
//! interrupted; claim candidates come highest priority first and first come, first served,
//! among the kinds asked for however many of other kinds wait ahead; an execution's end
//! claims its successor in its own commit, and a failing claim there leaves the end alone;
//! a `not_before` time, a wake-up and the operator's reopen each move exactly the rows they
//! name; interrupted executions are listed a page at a time, each page after the last.
//!
//! Method: executions are inserted `queued` through `lifecycle::insert_execution` in a journal
//! write, claimed through `Journal::claim_executions`, and their rows read back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chrono::{TimeDelta, Utc};
use durably_journal::durably_db::Connection;
use durably_journal::lifecycle::{self, Inserted, NewExecution, Wake};
use durably_journal::{Claim, Claimer, Execution, Journal, Status};
use support::{Scratch, barrier};
use uuid::Uuid;

/// The kind of the executions the tests insert.
const KIND: &str = "test";

/// Inserts execution `id`, queued in `queue` with `priority`, not claimable before `due_in`.
async fn insert(
    journal: &Journal,
    id: Uuid,
    queue: Option<&'static str>,
    priority: i64,
    due_in: Option<TimeDelta>,
) -> Inserted {
    let input = journal.encode_payload(&"input", "the input").unwrap();
    journal
        .write(move |conn| {
            let new = NewExecution {
                id,
                kind: KIND,
                name: "a test",
                input: &input,
                queue,
                priority,
                due_at: due_in.map(|delta| Utc::now() + delta),
                detail: None,
            };
            lifecycle::insert_execution(conn, &new, Utc::now())
        })
        .await
        .unwrap()
}

/// A new queued execution (see [`insert`]).
async fn enqueue(
    journal: &Journal,
    queue: Option<&'static str>,
    priority: i64,
    due_in: Option<TimeDelta>,
) -> Uuid {
    let id = durably_journal::new_execution_id();
    assert_eq!(
        insert(journal, id, queue, priority, due_in).await,
        Inserted::New
    );
    id
}

async fn claim(journal: &Journal, id: Uuid, from: Status) -> Vec<Claim> {
    journal
        .claim_executions(move |conn, claimer| {
            claimer.claim(conn, id, from)?;
            Ok(())
        })
        .await
        .unwrap()
}

fn status(journal: &Journal, id: Uuid) -> Status {
    journal.get(id).unwrap().unwrap().status
}

#[tokio::test]
async fn two_claimers_of_one_queued_execution_make_one_winner_who_runs_it() {
    let scratch = Scratch::new();
    let (first, second) = (scratch.open(), scratch.open());
    let id = enqueue(&first, Some("q"), 0, None).await;
    assert_eq!(first.get(id).unwrap().unwrap().opens, 0);

    let (a, b) = tokio::join!(
        claim(&first, id, Status::Queued),
        claim(&second, id, Status::Queued)
    );
    assert_eq!(a.len() + b.len(), 1, "exactly one claim wins");
    let (winner, claims) = if a.is_empty() {
        (&second, b)
    } else {
        (&first, a)
    };
    let claimed = claims.into_iter().next().unwrap();
    assert_eq!(claimed.row().opens, 1);
    assert_eq!(claimed.row().queue.as_deref(), Some("q"));
    assert_eq!(status(winner, id), Status::Running);
    let commits = winner.writer_stats().commits;

    let execution = winner.open_claim(claimed).unwrap();
    assert_eq!(
        winner.writer_stats().commits,
        commits,
        "opening a claim writes nothing"
    );
    assert!(!execution.is_resume());
    assert_eq!(execution.input::<String>().unwrap(), "input");
    let value: u32 = execution.pure("step", || async { Ok(5) }).await.unwrap();
    assert_eq!(value, 5);
    execution.complete(&value).await.unwrap();
    assert_eq!(status(winner, id), Status::Completed);
    assert!(
        claim(winner, id, Status::Queued).await.is_empty(),
        "a finished row is not claimed"
    );
}

/// Claims `id` beside the end of `execution`, completed with `failing_claim` false, else
/// failed after a claim whose caller's own write fails.
async fn end_claiming(execution: Execution, id: Uuid, failing_claim: bool) -> Vec<Claim> {
    let select = move |conn: &Connection, claimer: &mut Claimer| {
        claimer.claim(conn, id, Status::Queued)?;
        if failing_claim {
            conn.execute("INSERT INTO no_such_table VALUES (1)", [])?;
        }
        Ok(())
    };
    if failing_claim {
        execution.fail_claiming(&"failed", select).await.unwrap()
    } else {
        execution.complete_claiming(&1, select).await.unwrap()
    }
}

#[tokio::test]
async fn an_end_claims_its_successor_in_its_own_commit() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let (first, successor) = (
        enqueue(&journal, Some("q"), 0, None).await,
        enqueue(&journal, Some("q"), 0, None).await,
    );
    let claimed = claim(&journal, first, Status::Queued).await.pop().unwrap();
    let execution = journal.open_claim(claimed).unwrap();
    let commits = journal.writer_stats().commits;

    let claims = end_claiming(execution, successor, false).await;
    assert_eq!(journal.writer_stats().commits, commits + 1, "one commit");
    assert_eq!(status(&journal, first), Status::Completed);
    assert_eq!(status(&journal, successor), Status::Running);
    let running = journal
        .read(|conn| lifecycle::running_in_queue(conn, "q"))
        .unwrap();
    assert_eq!(running, 1, "the successor took the place the end gave up");
    let [successor_claim] = <[Claim; 1]>::try_from(claims).unwrap();
    let execution = journal.open_claim(successor_claim).unwrap();
    let value: u32 = execution.pure("step", || async { Ok(5) }).await.unwrap();
    assert_eq!(value, 5, "the successor's handle writes under its lock");

    // A claim beside an end that fails is taken back whole; the end commits alone.
    let third = enqueue(&journal, Some("q"), 0, None).await;
    assert!(end_claiming(execution, third, true).await.is_empty());
    assert_eq!(status(&journal, successor), Status::Failed);
    assert_eq!(status(&journal, third), Status::Queued);
    barrier(&journal).await;
    assert!(
        journal.lock_holders().unwrap().is_empty(),
        "no lock is held"
    );
    assert_eq!(claim(&journal, third, Status::Queued).await.len(), 1);
}

#[tokio::test]
async fn a_claim_dropped_unopened_releases_its_lock_and_the_sweep_interrupts_it() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = enqueue(&journal, None, 0, None).await;
    let claims = claim(&journal, id, Status::Queued).await;
    assert_eq!(claims.len(), 1);
    drop(claims);
    barrier(&journal).await;
    assert!(
        journal.lock_holders().unwrap().is_empty(),
        "the lock was released"
    );
    let report = journal.operator().sweep(false).await.unwrap();
    assert_eq!(report.unlocked, [id]);
    assert_eq!(status(&journal, id), Status::Interrupted);

    // The runtime's recovery puts it back in its queue, and a second claim resumes it.
    let now = Utc::now();
    let requeued = journal
        .write(move |conn| lifecycle::requeue_interrupted(conn, id, now, None))
        .await
        .unwrap();
    assert!(requeued);
    let claimed = claim(&journal, id, Status::Queued).await.pop().unwrap();
    assert_eq!(claimed.row().opens, 2);
    assert!(journal.open_claim(claimed).unwrap().is_resume());
}

#[tokio::test]
async fn candidates_come_by_priority_then_first_come_and_not_before_their_time() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let low = enqueue(&journal, Some("q"), 0, None).await;
    let high = enqueue(&journal, Some("q"), 5, None).await;
    let low_later = enqueue(&journal, Some("q"), 0, None).await;
    let later = enqueue(&journal, Some("q"), 9, Some(TimeDelta::hours(1))).await;
    let other_queue = enqueue(&journal, Some("other"), 9, None).await;
    let input = journal.encode_payload(&"input", "the input").unwrap();
    journal
        .write(move |conn| {
            let mut new = NewExecution {
                id: durably_journal::new_execution_id(),
                kind: "another kind",
                name: "ahead of all, of a kind not asked for",
                input: &input,
                queue: Some("q"),
                priority: 9,
                due_at: None,
                detail: None,
            };
            for _ in 0..3 {
                new.id = durably_journal::new_execution_id();
                lifecycle::insert_execution(conn, &new, Utc::now())?;
            }
            Ok(())
        })
        .await
        .unwrap();

    let (candidates, positions, next) = journal
        .read(move |conn| {
            Ok((
                lifecycle::claimable(conn, Some("q"), &[KIND], 10)?,
                lifecycle::queue_positions(conn, &[low_later, high, later, other_queue])?,
                lifecycle::next_due(conn)?,
            ))
        })
        .unwrap();
    let order: Vec<Uuid> = candidates.iter().map(|(id, _)| *id).collect();
    assert_eq!(order, [high, low, low_later]);
    // Positions count every claimable execution of the queue, whatever its kind.
    assert_eq!(positions, [(low_later, 6), (high, 4), (other_queue, 1)]);
    assert!(next.is_some(), "the not-before time is the next due time");

    let in_two_hours = Utc::now() + TimeDelta::hours(2);
    let due = journal
        .read(move |conn| lifecycle::due(conn, in_two_hours, 10))
        .unwrap();
    assert_eq!(due, [(later, Status::Queued)]);
    let cleared = journal
        .write(move |conn| lifecycle::clear_not_before(conn, later))
        .await
        .unwrap();
    assert!(cleared);
    let first = journal
        .read(|conn| lifecycle::claimable(conn, Some("q"), &[KIND], 1))
        .unwrap();
    assert_eq!(first[0].0, later, "due now, and the highest priority");

    let claimed = claim(&journal, high, Status::Queued).await;
    let running = journal
        .read(|conn| lifecycle::running_in_queue(conn, "q"))
        .unwrap();
    assert_eq!(running, 1);
    drop(claimed);
}

#[tokio::test]
async fn a_wake_moves_only_a_waiting_execution_whose_time_or_topic_came() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = enqueue(&journal, None, 0, None).await;
    let soon = Utc::now() + TimeDelta::minutes(5);
    journal
        .write(move |conn| {
            conn.execute(
                "UPDATE executions SET status = 'waiting', wait_topic = 'approval', due_at = ?2
                 WHERE execution_id = ?1",
                durably_journal::durably_db::params![
                    id.to_string(),
                    durably_lock::format_timestamp(soon)
                ],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    let wake = |by: Wake<'static>, at| journal.write(move |conn| lifecycle::wake(conn, id, at, by));
    assert!(!wake(Wake::Due, Utc::now()).await.unwrap(), "not due yet");
    assert!(!wake(Wake::Topic("other"), Utc::now()).await.unwrap());
    assert!(wake(Wake::Topic("approval"), Utc::now()).await.unwrap());
    let record = journal.get(id).unwrap().unwrap();
    assert_eq!(
        (record.status, record.due_at, record.wait_topic),
        (Status::Queued, None, None)
    );
    assert!(
        !wake(Wake::Due, soon).await.unwrap(),
        "a queued row is not woken again"
    );
}

#[tokio::test]
async fn stuck_and_finished_executions_reopen_only_from_the_statuses_named() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = enqueue(&journal, Some("q"), 0, None).await;
    drop(claim(&journal, id, Status::Queued).await);
    barrier(&journal).await;
    journal.operator().sweep(false).await.unwrap();
    let now = Utc::now();
    let detail = serde_json::json!({ "failures": 3 });
    let parked = journal
        .write(move |conn| lifecycle::park_stuck(conn, id, now, &detail))
        .await
        .unwrap();
    assert!(parked);
    assert_eq!(status(&journal, id), Status::Stuck);
    assert!(matches!(
        journal.open_execution(id, "test", "", &"input").await,
        Err(durably_journal::Error::NotRunnable {
            status: Status::Stuck,
            ..
        })
    ));

    let reopen = |from: &'static [Status]| {
        journal.write(move |conn| lifecycle::reopen(conn, id, Utc::now(), from))
    };
    assert_eq!(reopen(&[Status::Cancelled]).await.unwrap(), None);
    assert_eq!(reopen(&[Status::Stuck]).await.unwrap(), Some(Status::Stuck));
    let record = journal.get(id).unwrap().unwrap();
    assert_eq!(
        (record.status, record.status_detail),
        (Status::Queued, None)
    );

    let again = insert(&journal, id, None, 0, None).await;
    assert_eq!(
        again,
        Inserted::Exists {
            kind: "test".to_owned(),
            status: Status::Queued
        }
    );
}

/// The recovery pass's listing of interrupted executions comes in pages, in creation order,
/// each starting after the last row of the one before; executions in any other status are
/// left out.
#[tokio::test]
async fn interrupted_executions_are_listed_page_after_page_in_creation_order() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(enqueue(&journal, None, 0, None).await);
    }
    let claimed = ids.clone();
    let claims = journal
        .claim_executions(move |conn, claimer| {
            for id in claimed {
                claimer.claim(conn, id, Status::Queued)?;
            }
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(claims.len(), 5);
    drop(claims);
    barrier(&journal).await;
    journal.operator().sweep(false).await.unwrap();
    let requeued = ids[2];
    assert!(
        journal
            .write(move |conn| lifecycle::requeue_interrupted(conn, requeued, Utc::now(), None))
            .await
            .unwrap()
    );

    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = journal
            .read(|conn| lifecycle::interrupted_after(conn, after, 2))
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.position);
        assert!(page.iter().all(|row| row.kind == "test"));
        pages.push(page.iter().map(|row| row.id).collect::<Vec<_>>());
    }
    assert_eq!(pages, [vec![ids[0], ids[1]], vec![ids[3], ids[4]]]);
}
