//! A graceful stop: `Runtime::drain` stops claiming and returns only once the runs already
//! started in this process have ended; an execution started after it is left queued for the
//! next process.
//!
//! Method: the `gated` workflow holds inside a step until the test opens its gate, so the
//! drain is checked while a run is known to be in its step, without sleeping.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::pin::pin;
use std::sync::Arc;

use durably_journal::Status;
use durably_runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError};
use support::Scratch;
use tokio::sync::Notify;

/// The gate of the `gated` workflow's step, and the signal that a run reached it.
#[derive(Default)]
struct Gate {
    entered: Notify,
    open: Notify,
}

#[tokio::test]
async fn drain_waits_for_started_runs_and_claims_nothing_new() {
    let scratch = Scratch::new();
    let gate = Arc::new(Gate::default());
    let shared = Arc::clone(&gate);
    let runtime = Runtime::builder(scratch.journal.clone())
        .register("gated", 1, move |context: WorkflowContext, (): ()| {
            let gate = Arc::clone(&shared);
            async move {
                context
                    .idempotent("held", |_key| {
                        let gate = Arc::clone(&gate);
                        async move {
                            gate.entered.notify_one();
                            gate.open.notified().await;
                            Ok(1_u32)
                        }
                    })
                    .await?;
                Ok::<_, WorkflowError>(())
            }
        })
        .start()
        .await
        .unwrap();
    let started = durably_journal::new_execution_id();
    runtime
        .start::<_, ()>("gated", started, &(), StartOptions::default())
        .await
        .unwrap();
    gate.entered.notified().await;

    let mut drain = pin!(runtime.drain());
    // Polled once: it has stopped the dispatcher, and the run is still in its step.
    assert!(
        futures_poll_once(drain.as_mut()).await.is_none(),
        "drain returned while a run was in its step"
    );
    let later = durably_journal::new_execution_id();
    runtime
        .start::<_, ()>("gated", later, &(), StartOptions::default())
        .await
        .unwrap();

    gate.open.notify_one();
    drain.await;
    let status = |id| scratch.journal.get(id).unwrap().unwrap().status;
    assert_eq!(status(started), Status::Completed);
    assert_eq!(
        status(later),
        Status::Queued,
        "a drained runtime claimed a new execution"
    );
}

/// Polls `future` once; `Some` with its output if it was ready.
async fn futures_poll_once<F: Future + Unpin>(future: F) -> Option<F::Output> {
    let mut future = future;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(cx) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        })
    })
    .await
}
