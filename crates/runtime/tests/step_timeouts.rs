//! Per-step timeouts (plan §4.7): a step that runs past `ctx.step(name).timeout(d)` is
//! dropped. A pure or idempotent one is not recorded and the execution ends `failed` with
//! reason `step_timeout` in its status detail, which a resume takes back to run the step again;
//! a guarded one leaves its intent to its policy, as a crash would, and its execution goes back
//! to its queue.
//! A step that ends in time is recorded as any other.
//!
//! Method: the runtime and the journal share a `TestClock`; a step's closure hangs on its first
//! call, the test waits until the step's timer is the clock's only sleeper, then moves the
//! clock past the timeout. Nothing sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durably_journal::{Guarded, Policy, Status, StepState};
use durably_runtime::testing::TestClock;
use durably_runtime::{
    Error, ResumeOptions, Runtime, RuntimeBuilder, StartOptions, WorkflowContext, WorkflowError,
};
use tokio::sync::Notify;

const TIMEOUT: Duration = Duration::from_secs(10);

/// Closure calls, and a notice of each call.
#[derive(Default)]
struct Calls {
    count: AtomicU32,
    called: Notify,
}

impl Calls {
    /// Counts a call; the first one hangs forever.
    async fn call(&self) -> u32 {
        let count = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        self.called.notify_one();
        if count == 1 {
            std::future::pending::<()>().await;
        }
        count
    }
}

async fn runtime_with(
    register: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
) -> (support::Clocked, Runtime) {
    let clocked = support::Clocked::new();
    let runtime = register(clocked.runtime()).start().await.unwrap();
    (clocked, runtime)
}

/// Waits for the hanging call, then for its step's timer, and moves the clock past it.
async fn time_out(calls: &Calls, clock: &TestClock) {
    calls.called.notified().await;
    while clock.sleepers() == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(TIMEOUT);
}

/// A pure step past its timeout fails the execution, unrecorded, with the reason in its
/// status detail; resumed, the step runs again and the execution completes. A step that
/// ends in time is recorded.
#[tokio::test]
async fn a_pure_step_past_its_timeout_fails_the_execution_resumably() {
    let calls = Arc::new(Calls::default());
    let in_workflow = Arc::clone(&calls);
    let (clocked, runtime) = runtime_with(|builder| {
        builder.register("slow", 1, move |context: WorkflowContext, (): ()| {
            let calls = Arc::clone(&in_workflow);
            async move {
                let fast: u32 = context
                    .step("fast")
                    .timeout(TIMEOUT)
                    .pure(|| async { Ok(7) })
                    .await?;
                let slow = context
                    .step("slow")
                    .timeout(TIMEOUT)
                    .pure(|| {
                        let calls = Arc::clone(&calls);
                        async move { Ok(calls.call().await) }
                    })
                    .await?;
                Ok::<_, WorkflowError>(fast + slow)
            }
        })
    })
    .await;
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, u32>("slow", id, &(), StartOptions::default())
        .await
        .unwrap();
    time_out(&calls, &clocked.clock).await;

    let Err(Error::WorkflowFailed {
        error: Some(error), ..
    }) = handle.result().await
    else {
        panic!("the execution did not fail");
    };
    let error: WorkflowError = error.decode().unwrap();
    assert!(
        error.message.contains("timed out after 10000 ms"),
        "{error:?}"
    );
    let record = clocked.journal.get(id).unwrap().unwrap();
    assert_eq!(record.status, Status::Failed);
    assert_eq!(
        record.status_detail.unwrap(),
        serde_json::json!({ "reason": "step_timeout", "seq": 1, "step": "slow", "after_ms": 10_000 })
    );
    let steps = clocked.journal.steps(id).unwrap();
    assert_eq!(steps.len(), 1, "the timed-out step is not recorded");
    assert_eq!(steps[0].name, "fast");

    runtime.resume(id, ResumeOptions::default()).await.unwrap();
    assert_eq!(handle.result().await.unwrap(), 9);
    assert_eq!(calls.count.load(Ordering::SeqCst), 2);
}

/// A guarded step past its timeout keeps its intent: the execution goes back to its queue
/// (`yielded`), and its next run applies the step's policy as after a crash: `Retry` runs the
/// step again with the same key.
#[tokio::test]
async fn a_guarded_step_past_its_timeout_is_left_to_its_policy() {
    let calls = Arc::new(Calls::default());
    let in_workflow = Arc::clone(&calls);
    let (clocked, runtime) = runtime_with(|builder| {
        builder.register("charge", 1, move |context: WorkflowContext, (): ()| {
            let calls = Arc::clone(&in_workflow);
            async move {
                let charged = context
                    .step("charge")
                    .timeout(TIMEOUT)
                    .guarded(Policy::Retry, |_key| {
                        let calls = Arc::clone(&calls);
                        async move { Ok(calls.call().await) }
                    })
                    .await?;
                let Guarded::Done(attempt) = charged else {
                    return Err(WorkflowError::new("skipped"));
                };
                Ok::<_, WorkflowError>(attempt)
            }
        })
    })
    .await;
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, u32>("charge", id, &(), StartOptions::default())
        .await
        .unwrap();
    time_out(&calls, &clocked.clock).await;

    assert_eq!(handle.result().await.unwrap(), 2, "the second call's value");
    let steps = clocked.journal.steps(id).unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(
        (steps[0].state, steps[0].attempts),
        (StepState::Completed, 2)
    );
    let kinds = support::event_kinds(&clocked.journal, id);
    let yielded = kinds.iter().position(|kind| kind == "yielded");
    let retried = kinds.iter().position(|kind| kind == "ambiguity_retried");
    assert!(
        yielded.is_some() && yielded < retried,
        "requeued, then retried under its policy: {kinds:?}"
    );
}
