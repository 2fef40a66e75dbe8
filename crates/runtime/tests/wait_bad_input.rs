//! Bad input to timers, messages and events (plan §9): a name with a control character, an
//! empty or overlong one, a message or event value over the payload cap, a duration whose end
//! the journal cannot store. Each is a typed error, not retryable, and changes nothing in the
//! journal: inside a workflow, the journal is read before and after each refused call, from the
//! workflow itself, so nothing else writes in between.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::Journal;
use durably_runtime::{
    Error, MESSAGE_ENVELOPE_BYTES, StartOptions, WorkflowContext, WorkflowError,
};
use support::{Clocked, PAYLOAD_BYTES_MAX, snapshot};

/// Runs `call` and checks that it was refused as `expected` says, with the journal unchanged.
async fn refused<T: std::fmt::Debug>(
    journal: &Journal,
    call: impl Future<Output = durably_runtime::Result<T>>,
    expected: fn(&Error) -> bool,
) -> String {
    let before = snapshot(journal);
    let error = call.await.expect_err("the call must be refused");
    assert!(expected(&error), "unexpected error: {error:?}");
    assert!(!error.is_retryable(), "{error:?}");
    assert_eq!(
        snapshot(journal),
        before,
        "a refused call changed the journal"
    );
    error.to_string()
}

fn invalid_name(error: &Error) -> bool {
    matches!(error, Error::InvalidName { .. })
}

fn invalid_option(error: &Error) -> bool {
    matches!(error, Error::InvalidOption(_))
}

fn too_large(error: &Error) -> bool {
    matches!(error, Error::PayloadTooLarge { .. })
}

/// Every bad call a workflow can make to the waiting steps.
async fn bad_calls(context: WorkflowContext, journal: Journal) -> Result<u32, WorkflowError> {
    let me = context.id();
    let big = "x".repeat(PAYLOAD_BYTES_MAX);
    let far = chrono::NaiveDate::from_ymd_opt(10_000, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let j = &journal;
    refused(
        j,
        context.sleep("line\nbreak", Duration::from_secs(1)),
        invalid_name,
    )
    .await;
    refused(j, context.sleep("", Duration::from_secs(1)), invalid_name).await;
    refused(j, context.sleep("forever", Duration::MAX), invalid_option).await;
    refused(j, context.sleep_until("far", far), invalid_option).await;
    refused(
        j,
        context.recv::<bool>("tab\there", Duration::ZERO),
        invalid_name,
    )
    .await;
    refused(
        j,
        context.recv::<bool>(&"t".repeat(257), Duration::ZERO),
        invalid_name,
    )
    .await;
    refused(
        j,
        context.recv::<bool>("approval", Duration::MAX),
        invalid_option,
    )
    .await;
    refused(j, context.send(me, "del\u{7f}", &true), invalid_name).await;
    refused(j, context.send(me, "approval", &big), too_large).await;
    refused(j, context.set_event("c1\u{85}", &1), invalid_name).await;
    refused(j, context.set_event("status", &big), too_large).await;
    // The runtime's own step names cannot be forged by a workflow's steps.
    refused(
        j,
        context.pure("durably:sleep/nap", || async { Ok(()) }),
        invalid_name,
    )
    .await;
    Ok(12)
}

/// A workflow's bad calls are refused, the journal unchanged by each, and the workflow goes
/// on: none of them stops its execution.
#[tokio::test]
async fn bad_waits_in_a_workflow_are_refused_and_change_nothing() {
    let f = Clocked::new();
    let journal = f.journal.clone();
    let runtime = f
        .runtime()
        .register("bad", 1, move |context: WorkflowContext, (): ()| {
            bad_calls(context, journal.clone())
        })
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, u32>("bad", id, &(), StartOptions::default())
        .await
        .unwrap();
    assert_eq!(handle.result().await.unwrap(), 12);
    assert!(
        f.journal.steps(id).unwrap().is_empty(),
        "a refused call recorded a step"
    );
}

/// Bad sends and reads from outside a workflow are refused the same way; a message that fits
/// the journal's cap but not the recv step's envelope around it is refused too, so every
/// message sent can be received.
#[tokio::test]
async fn bad_sends_and_reads_are_refused_and_change_nothing() {
    let f = Clocked::new();
    let client = durably_runtime::Client::new(f.journal.clone())
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let options = StartOptions::default().allow_unregistered_kind();
    client
        .start::<_, ()>("approval", id, &(), options)
        .await
        .unwrap();
    let j = &f.journal;
    refused(j, client.send(id, "approval\r", &true, None), invalid_name).await;
    refused(
        j,
        client.send(id, "approval", &true, Some("")),
        invalid_name,
    )
    .await;
    // JSON quotes add 2 bytes: this string is exactly at the journal's cap less 1.
    let almost = "x".repeat(PAYLOAD_BYTES_MAX - 3);
    let message = refused(j, client.send(id, "approval", &almost, None), too_large).await;
    let max = PAYLOAD_BYTES_MAX - MESSAGE_ENVELOPE_BYTES;
    assert!(message.contains(&max.to_string()), "{message}");
    let fits = "x".repeat(max - 2);
    client.send(id, "approval", &fits, None).await.unwrap();

    refused(
        j,
        client.get_event::<u32>(id, "\u{0}", Duration::ZERO),
        invalid_name,
    )
    .await;
    refused(
        j,
        client.get_event::<u32>(id, "status", Duration::MAX),
        invalid_option,
    )
    .await;
}
