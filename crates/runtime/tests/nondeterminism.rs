//! A code change that does not match an execution's recorded steps parks it `stuck` at once,
//! after one run, with a diff an operator can read (the step's seq, and the recorded and the
//! called step's kind and name); resuming it after deploying code that matches finishes it.
//! A code mismatch never heals by retrying, so the run is not counted as a failed run to retry
//! (issue 17: the execution used to stay `running` and be opened again on every start).
//!
//! Method: one runtime parks an execution on a receive; a second, with a step added at the
//! front, is woken by a message and meets the recorded first step; a third, with the fix
//! (the added step behind `patched`), is resumed with `Client::resume`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::Status;
use durably_runtime::{
    NON_DETERMINISM_REASON, ResumeOptions, Runtime, StartOptions, WorkflowContext, WorkflowError,
};
use serde_json::json;
use support::{Scratch, event_kinds, step_names, wait_for_status};

const KIND: &str = "changing";

async fn original(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    let a: u32 = ctx.pure("a", || async { Ok(1) }).await?;
    let b: u32 = ctx.recv("go", Duration::from_hours(24)).await?.unwrap_or(0);
    Ok(a + b)
}

/// A step added at the front, unguarded: replay meets step `a` at seq 0.
async fn broken(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    ctx.idempotent("inserted", |_| async { Ok(10_u32) }).await?;
    original(ctx, ()).await
}

/// The same change behind a patch: executions that passed seq 0 before it skip it.
async fn fixed(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    if ctx.patched("inserted").await? {
        ctx.idempotent("inserted", |_| async { Ok(10_u32) }).await?;
    }
    original(ctx, ()).await
}

async fn runtime_with<F, Fut>(scratch: &Scratch, code: F) -> Runtime
where
    F: Fn(WorkflowContext, ()) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u32, WorkflowError>> + Send + 'static,
{
    Runtime::builder(scratch.journal.clone())
        .register(KIND, 1, code)
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mismatch_parks_stuck_at_once_with_the_diff_and_resumes_after_a_fix() {
    let scratch = Scratch::new();
    let first = runtime_with(&scratch, original).await;
    let id = durably_journal::new_execution_id();
    first
        .start::<_, u32>(KIND, id, &(), StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&scratch.journal, id, Status::Waiting).await;
    first.shutdown();

    let second = runtime_with(&scratch, broken).await;
    second.send(id, "go", &5_u32, None).await.unwrap();
    wait_for_status(&scratch.journal, id, Status::Stuck).await;
    let record = scratch.journal.get(id).unwrap().unwrap();
    assert_eq!(
        record.status_detail,
        Some(json!({
            "reason": NON_DETERMINISM_REASON,
            "seq": 0,
            "recorded": "pure step \"a\"",
            "called": "idempotent step \"inserted\"",
        }))
    );
    assert_eq!(record.opens, 2, "parked after its first mismatching run");
    assert_eq!(event_kinds(&scratch.journal, id).last().unwrap(), "stuck");
    // A stuck execution is nobody's to retry: a restarted runtime leaves it alone.
    second.shutdown();
    let again = runtime_with(&scratch, broken).await;
    assert_eq!(again.recovery_report().requeued, 0);
    assert_eq!(scratch.journal.get(id).unwrap().unwrap().opens, 2);
    again.shutdown();

    let third = runtime_with(&scratch, fixed).await;
    third.resume(id, ResumeOptions::default()).await.unwrap();
    let total = third.handle::<u32>(id).result().await.unwrap();
    assert_eq!(
        total, 6,
        "the message sent to the stuck execution is received"
    );
    let names = step_names(&scratch.journal, id);
    assert_eq!(
        names[0], "a",
        "the fixed code answered false and skipped the new step"
    );
    third.shutdown();
}
