//! Child executions, in one process: a parent fans out to children on a queue of their own and
//! awaits each result; the children's ids are the documented derivation of (parent, seq); the
//! parent link is stored and listed by the `runtime_children` view; a failed or cancelled
//! child is a typed error recorded in the parent, so it replays; cancelling a parent cancels
//! its unfinished children (queued ones at once, recursively); and bad input (an unknown kind,
//! a wrong type, an unknown queue) is refused before anything is written.
//!
//! What is checked is read back from the journal's tables and views.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::{Journal, Status};
use durably_runtime::{
    ChildOptions, Client, Error, QueueConfig, Runtime, StartOptions, WorkflowContext,
    WorkflowError, child_execution_id,
};
use durably_testkit::TestDb;
use support::{wait_for_status, wait_until};
use uuid::Uuid;

/// Five pure steps, then `n * 10`; fails for 13.
async fn leaf(ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    let mut total = n;
    for step in 0..5 {
        total = ctx
            .pure(&format!("step {step}"), || async move { Ok(total) })
            .await?;
    }
    if n == 13 {
        return Err(WorkflowError::new("thirteen is unlucky"));
    }
    Ok(total * 10)
}

/// Starts one child per input on queue `kids`, then awaits each in order; a failed child is
/// reported in the output instead of failing the parent.
async fn fan_out(ctx: WorkflowContext, inputs: Vec<u32>) -> Result<Vec<String>, WorkflowError> {
    let mut handles = Vec::new();
    for n in inputs {
        let options = ChildOptions::default().queue("kids");
        handles.push(ctx.start_child::<u32, u32>("leaf", &n, options).await?);
    }
    let mut results = Vec::new();
    for handle in handles {
        results.push(match handle.result(&ctx).await {
            Ok(value) => value.to_string(),
            Err(Error::ChildFailed { error, .. }) => format!("failed: {error}"),
            Err(error) => return Err(error.into()),
        });
    }
    Ok(results)
}

/// Starts a child that waits for a message, which never comes, and awaits it.
async fn waits_on_child(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    Ok(ctx.child::<(), u32>("idle", &()).await?)
}

async fn idle(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    let got = ctx
        .recv::<u32>("never", Duration::from_hours(7 * 24))
        .await?;
    Ok(got.unwrap_or(0))
}

/// Asks for a child of a kind nobody registered, and returns the refusal's text.
async fn bad_child(ctx: WorkflowContext, which: String) -> Result<String, WorkflowError> {
    let refused = match which.as_str() {
        "kind" => ctx.child::<u32, u32>("nobody-serves-this", &1).await,
        "type" => ctx.child::<String, u32>("leaf", &"one".to_owned()).await,
        _ => {
            let options = ChildOptions::default().queue("no-such-queue");
            ctx.start_child::<u32, u32>("leaf", &1, options)
                .await
                .map(|_| 0)
        }
    };
    let error = refused.expect_err("a bad child was started");
    // Nothing was written: the next step is seq 0.
    ctx.pure("after", || async { Ok(()) }).await?;
    Ok(format!("{error:?}"))
}

struct Fixture {
    /// Declared before `_db`, so it is dropped first.
    journal: Journal,
    _db: TestDb,
}

fn fixture() -> Fixture {
    let db = TestDb::new();
    let journal = db.open();
    Fixture { journal, _db: db }
}

async fn runtime(journal: &Journal) -> Runtime {
    Runtime::builder(journal.clone())
        .queue(
            "kids",
            QueueConfig {
                concurrency_max: Some(2),
                process_concurrency_max: None,
            },
        )
        .register("leaf", 1, leaf)
        .register("fan-out", 1, fan_out)
        .register("waits-on-child", 1, waits_on_child)
        .register("idle", 1, idle)
        .register("bad-child", 1, bad_child)
        .park_after(Duration::from_millis(50))
        .start()
        .await
        .unwrap()
}

/// The `runtime_children` view of `parent`: (seq, child id, kind, status, queue).
fn children(journal: &Journal, parent: Uuid) -> Vec<(u32, Uuid, String, String, Option<String>)> {
    journal
        .read(|conn| {
            let mut statement = conn.prepare(
                "SELECT seq, child_id, kind, status, queue FROM runtime_children
                 WHERE parent_id = ?1 ORDER BY seq",
            )?;
            let rows = statement
                .query_map([parent.to_string()], |row| {
                    Ok((
                        row.get(0)?,
                        Uuid::parse_str(&row.get::<_, String>(1)?).unwrap(),
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                    ))
                })?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .unwrap()
}

/// A parent starts three children on queue `kids` and awaits them: each result comes back in
/// order, each child has the derived id of its start step and a row in the view, and the
/// parent's steps are the documented ones.
#[tokio::test]
async fn a_parent_fans_out_to_children_on_their_queue_and_gets_their_results() {
    let f = fixture();
    let runtime = runtime(&f.journal).await;
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, Vec<String>>("fan-out", id, &vec![1_u32, 13, 3], StartOptions::default())
        .await
        .unwrap();
    let results = handle.result().await.unwrap();
    assert_eq!(results, ["10", "failed: thirteen is unlucky", "30"]);

    let kids = children(&f.journal, id);
    assert_eq!(kids.len(), 3, "{kids:?}");
    for (index, (seq, child, kind, status, queue)) in kids.iter().enumerate() {
        assert_eq!(*seq, index as u32);
        assert_eq!(*child, child_execution_id(id, *seq));
        assert_eq!(kind, "leaf");
        let expected = if index == 1 { "failed" } else { "completed" };
        assert_eq!(status, expected);
        assert_eq!(queue.as_deref(), Some("kids"));
    }
    let names: Vec<String> = f
        .journal
        .steps(id)
        .unwrap()
        .into_iter()
        .map(|step| step.name)
        .collect();
    let first = kids[0].1;
    assert_eq!(names[0], "durably:child/leaf");
    assert_eq!(
        names[3],
        format!("durably:recv-deadline/durably:child/{first}")
    );
    assert_eq!(names[4], format!("durably:recv/durably:child/{first}"));
    assert_eq!(names[5], format!("durably:child-result/{first}"));
    assert_eq!(names.len(), 3 + 3 * 3, "{names:?}");
}

/// A cancelled parent cancels its unfinished children in the same transaction: a child
/// waiting (parked) is cancelled at once with a reason naming the parent.
#[tokio::test]
async fn cancelling_a_parent_cancels_its_waiting_child() {
    let f = fixture();
    let runtime = runtime(&f.journal).await;
    let id = durably_journal::new_execution_id();
    runtime
        .start::<_, u32>("waits-on-child", id, &(), StartOptions::default())
        .await
        .unwrap();
    let child = child_execution_id(id, 0);
    wait_for_status(&f.journal, child, Status::Waiting).await;
    wait_for_status(&f.journal, id, Status::Waiting).await;

    runtime.cancel(id, "operator said so").await.unwrap();
    let record = f.journal.get(child).unwrap().unwrap();
    assert_eq!(record.status, Status::Cancelled);
    let error: serde_json::Value = record.error.unwrap().decode().unwrap();
    assert_eq!(
        error["cancelled"],
        format!("its parent {id} was cancelled"),
        "{error}"
    );
    let parent = runtime.handle::<u32>(id).result().await.unwrap_err();
    assert!(matches!(parent, Error::Cancelled { .. }), "{parent:?}");
}

/// A child cancelled on its own is a typed error in its parent, recorded: the parent's result
/// step holds it as its failure.
#[tokio::test]
async fn a_cancelled_child_is_a_typed_error_in_its_parent() {
    let f = fixture();
    let runtime = runtime(&f.journal).await;
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, u32>("waits-on-child", id, &(), StartOptions::default())
        .await
        .unwrap();
    let child = child_execution_id(id, 0);
    wait_for_status(&f.journal, child, Status::Waiting).await;
    runtime.cancel(child, "not needed").await.unwrap();
    // The workflow's `?` turned the child's cancellation into its own failure.
    assert!(handle.result().await.is_err());
    let recorded = f.journal.get(id).unwrap().unwrap().error.unwrap();
    let text = recorded.decode::<WorkflowError>().unwrap().message;
    assert!(text.contains("was cancelled: not needed"), "{text}");
    assert!(text.contains(&child.to_string()), "{text}");
    let steps = f.journal.steps(id).unwrap();
    let last = steps.last().unwrap();
    assert_eq!(last.name, format!("durably:child-result/{child}"));
}

/// A child of a kind nobody registered, of the wrong input type, or on an unknown queue is a
/// typed error, and nothing is written: no child row, and the parent's next step is seq 0.
#[tokio::test]
async fn bad_children_are_refused_before_anything_is_written() {
    let f = fixture();
    let runtime = runtime(&f.journal).await;
    for (which, expected) in [
        ("kind", "UnknownKind"),
        ("type", "WrongType"),
        ("queue", "UnknownQueue"),
    ] {
        let id = durably_journal::new_execution_id();
        let text = runtime
            .run::<_, String>("bad-child", id, &which.to_owned(), StartOptions::default())
            .await
            .unwrap();
        assert!(text.starts_with(expected), "{which}: {text}");
        let steps = f.journal.steps(id).unwrap();
        assert_eq!(steps.len(), 1, "{steps:?}");
        assert_eq!(steps[0].name, "after");
        assert!(children(&f.journal, id).is_empty());
    }
}

/// Queued children are cancelled with their parent at once, recursively; a child's own child
/// goes too.
#[tokio::test]
async fn cancelling_a_parent_cancels_queued_children_recursively() {
    let f = fixture();
    // A runtime that registers the kinds (so they are known), then stops: nothing runs the
    // children, which stay queued.
    runtime(&f.journal).await.shutdown();
    let client = Client::new(f.journal.clone()).await.unwrap();
    let id = durably_journal::new_execution_id();
    client
        .start::<_, Vec<String>>("fan-out", id, &vec![1_u32, 2], StartOptions::default())
        .await
        .unwrap();
    // Run the parent alone, in a runtime that serves no `kids` queue and no `leaf`.
    let parents = Runtime::builder(f.journal.clone())
        .register("fan-out", 1, fan_out)
        .park_after(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    wait_until(&f.journal, "the parent parked", |journal| {
        journal.get(id).unwrap().unwrap().status == Status::Waiting
    })
    .await;
    let kids = children(&f.journal, id);
    assert_eq!(kids.len(), 2);
    assert!(kids.iter().all(|kid| kid.3 == "queued"), "{kids:?}");
    client.cancel(id, "enough").await.unwrap();
    let kids = children(&f.journal, id);
    assert!(kids.iter().all(|kid| kid.3 == "cancelled"), "{kids:?}");
    parents.shutdown();
}
