//! Recovery (plan §4.3, §4.4): a runtime resumes the unfinished executions of its kinds whose
//! run ended abnormally, leaves other kinds alone and reports them, and parks an execution
//! that keeps failing without progress as `stuck` with the reason instead of retrying it
//! forever.
//!
//! An abandoned run is a handle dropped without ending its execution (what a killed process
//! leaves once the sweep has judged it). A run that always fails is a workflow whose step
//! result is over the journal's payload cap: the journal stops the handle, every time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::Status;
use durably_runtime::{
    Error, ResumeOptions, Runtime, StartOptions, WorkflowContext, WorkflowError, WorkflowHandle,
};
use support::{PAYLOAD_BYTES_MAX, Scratch};

async fn approve(_context: WorkflowContext, _input: ()) -> Result<String, WorkflowError> {
    Ok("approved".to_owned())
}

/// Polls until the execution has `status`; the runtime gets there on its own, through
/// commits the test cannot wait on one by one.
async fn wait_for_status<O>(handle: &WorkflowHandle<O>, status: Status) {
    for _ in 0..1000 {
        if handle.status().unwrap() == status {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("execution {} never became {status}", handle.id());
}

/// An abandoned execution of a served kind is requeued at start and runs to its end; one of
/// another kind is left alone and counted.
#[tokio::test]
async fn abandoned_executions_resume_and_strangers_are_reported() {
    let scratch = Scratch::new();
    let _tables = durably_runtime::Client::new(scratch.journal.clone())
        .await
        .unwrap();
    let (id, execution) = scratch.runtime_execution().await;
    drop(execution);
    let runtime = Runtime::builder(scratch.journal.clone())
        .register("approval", 1, approve)
        .start()
        .await
        .unwrap();
    assert_eq!(runtime.recovery_report().requeued, 1);
    assert_eq!(
        runtime.handle::<String>(id).result().await.unwrap(),
        "approved"
    );

    let (stranger, execution) = scratch.runtime_execution().await;
    drop(execution);
    let other = Runtime::builder(scratch.journal.clone())
        .register("refund", 1, approve)
        .start()
        .await
        .unwrap();
    assert_eq!(
        other.recovery_report().unknown_kinds,
        [("approval".to_owned(), 1)]
    );
    assert_eq!(
        other.handle::<String>(stranger).status().unwrap(),
        Status::Interrupted
    );
}

/// A workflow that fails every run without recording a step is `stuck` after the configured
/// number of runs, with the count and the last failure in its status detail.
#[tokio::test]
async fn a_crash_loop_ends_stuck() {
    let scratch = Scratch::new();
    let runtime = Runtime::builder(scratch.journal.clone())
        .register(
            "oversized",
            1,
            |context: WorkflowContext, (): ()| async move {
                let text: String = context
                    .pure("too big", || async { Ok("x".repeat(PAYLOAD_BYTES_MAX)) })
                    .await?;
                Ok::<_, WorkflowError>(text)
            },
        )
        .resume_failures_max(3)
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, String>("oversized", id, &(), StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&handle, Status::Stuck).await;
    let record = scratch.journal.get(id).unwrap().unwrap();
    assert_eq!(record.opens, 3, "stuck after exactly three runs");
    let detail = record.status_detail.unwrap();
    assert_eq!(detail["failures"], 3, "{detail}");
    let last = detail["last"]["message"].as_str().unwrap();
    assert!(last.contains("byte cap"), "{last}");

    // Resumed, it is claimed again and, still failing, stuck again after three more runs:
    // its count started over.
    runtime.resume(id, ResumeOptions::default()).await.unwrap();
    wait_for_status(&handle, Status::Stuck).await;
    assert_eq!(scratch.journal.get(id).unwrap().unwrap().opens, 6);
}

/// Resuming an execution that is not stuck or cancelled, an unknown one or a hand-driven one
/// is refused, and changes nothing.
#[tokio::test]
async fn resumes_of_other_executions_are_refused() {
    let scratch = Scratch::new();
    let client = durably_runtime::Client::new(scratch.journal.clone())
        .await
        .unwrap();
    let (running, _execution) = scratch.runtime_execution().await;
    scratch
        .refused(client.resume(running, ResumeOptions::default()), |error| {
            matches!(
                error,
                Error::NotResumable {
                    status: Status::Running,
                    ..
                }
            )
        })
        .await;
    let nobody = durably_journal::new_execution_id();
    scratch
        .refused(
            client.resume(nobody, ResumeOptions::default()),
            |error| matches!(error, Error::NotFound(id) if *id == nobody),
        )
        .await;
    let hand = durably_journal::new_execution_id();
    let durably_journal::Opened::Running(_hand) = scratch
        .journal
        .open_execution(hand, "report", "", &())
        .await
        .unwrap()
    else {
        unreachable!("a new execution is never finished");
    };
    scratch
        .refused(client.resume(hand, ResumeOptions::default()), |error| {
            matches!(error, Error::NotRuntimeExecution { .. })
        })
        .await;
}
