//! Starting executions (plan §2, §9): a start is durable and idempotent by id, and every bad
//! start (an unknown kind, a wrong input or output type, an oversized input, a bad name, an
//! unknown queue, a deadline not in the future, an id of another kind, a taken
//! deduplication key) is a typed error that leaves the journal unchanged. Every refusal is
//! checked against a snapshot of every row of every table taken before the call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::Status;
use durably_runtime::{
    Client, Deadline, Error, OnDuplicate, QueueConfig, Runtime, StartOptions, WorkflowContext,
    WorkflowError,
};
use support::{PAYLOAD_BYTES_MAX, Scratch};

async fn double(_context: WorkflowContext, n: u32) -> Result<u64, WorkflowError> {
    Ok(u64::from(n) * 2)
}

struct Fixture {
    scratch: Scratch,
    runtime: Runtime,
}

/// A runtime registering `double` (u32 → u64) with queue `q`, stopped before its dispatcher's
/// first pass (these tests run on one thread, so the dispatcher task has not run yet): what
/// the tests start stays queued, and the journal changes only by their calls.
async fn fixture() -> Fixture {
    let scratch = Scratch::new();
    let runtime = Runtime::builder(scratch.journal.clone())
        .register("double", 1, double)
        .queue(
            "q",
            QueueConfig {
                concurrency_max: Some(2),
                ..QueueConfig::default()
            },
        )
        .start()
        .await
        .unwrap();
    runtime.shutdown();
    Fixture { scratch, runtime }
}

impl std::ops::Deref for Fixture {
    type Target = Scratch;

    fn deref(&self) -> &Scratch {
        &self.scratch
    }
}

/// A kind no runtime registered is `UnknownKind`; with `allow_unregistered_kind` it starts.
#[tokio::test]
async fn unknown_kinds_are_refused_unless_allowed() {
    let f = fixture().await;
    let id = durably_journal::new_execution_id();
    f.refused(
        f.runtime
            .start::<_, u64>("triple", id, &1_u32, StartOptions::default()),
        |error| matches!(error, Error::UnknownKind { kind } if kind == "triple"),
    )
    .await;
    let handle = f
        .runtime
        .start::<_, u64>(
            "triple",
            id,
            &1_u32,
            StartOptions::default().allow_unregistered_kind(),
        )
        .await
        .unwrap();
    assert_eq!(handle.status().unwrap(), Status::Queued);
}

/// A start from the registering process with another input or output type is `WrongType`,
/// naming both types.
#[tokio::test]
async fn wrong_input_and_output_types_are_refused() {
    let f = fixture().await;
    let id = durably_journal::new_execution_id();
    let error = f
        .refused(
            f.runtime
                .start::<_, u64>("double", id, &"two", StartOptions::default()),
            |error| matches!(error, Error::WrongType { what: "input", .. }),
        )
        .await;
    assert!(error.to_string().contains("u32"), "{error}");
    assert!(error.to_string().contains("&str"), "{error}");
    f.refused(
        f.runtime.start::<_, String>("double", id, &2_u32, StartOptions::default()),
        |error| matches!(error, Error::WrongType { what: "output", expected, .. } if *expected == "u64"),
    )
    .await;
}

/// An input over the journal's payload cap is `PayloadTooLarge`.
#[tokio::test]
async fn oversized_inputs_are_refused() {
    let f = fixture().await;
    let runtime = Runtime::builder(f.journal.clone())
        .register(
            "echo",
            1,
            |_context: WorkflowContext, text: String| async move { Ok::<_, WorkflowError>(text) },
        )
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let input = "x".repeat(PAYLOAD_BYTES_MAX);
    f.refused(
        runtime.start::<_, String>("echo", id, &input, StartOptions::default()),
        |error| matches!(error, Error::PayloadTooLarge { max, .. } if *max == PAYLOAD_BYTES_MAX),
    )
    .await;
}

/// Kinds, queues, deduplication keys and names with control characters, empty or too long,
/// are `InvalidName`.
#[tokio::test]
async fn bad_names_are_refused() {
    let f = fixture().await;
    let id = durably_journal::new_execution_id();
    let long = "k".repeat(200);
    for kind in ["", "dou\nble", long.as_str()] {
        f.refused(
            f.runtime
                .start::<_, u64>(kind, id, &1_u32, StartOptions::default()),
            |error| {
                matches!(
                    error,
                    Error::InvalidName {
                        what: "workflow kind",
                        ..
                    }
                )
            },
        )
        .await;
    }
    let cases = [
        (StartOptions::default().queue("q\u{7f}"), "queue"),
        (
            StartOptions::default().dedup("", OnDuplicate::Reject),
            "deduplication key",
        ),
        (StartOptions::default().name("order\r42"), "execution name"),
    ];
    for (options, what) in cases {
        f.refused(
            f.runtime.start::<_, u64>("double", id, &1_u32, options),
            |error| matches!(error, Error::InvalidName { what: found, .. } if *found == what),
        )
        .await;
    }
}

/// A queue no runtime configured is `UnknownQueue`.
#[tokio::test]
async fn unknown_queues_are_refused() {
    let f = fixture().await;
    let id = durably_journal::new_execution_id();
    f.refused(
        f.runtime
            .start::<_, u64>("double", id, &1_u32, StartOptions::default().queue("other")),
        |error| matches!(error, Error::UnknownQueue { queue } if queue == "other"),
    )
    .await;
}

/// A deadline not after now is `InvalidOption`. (A negative duration cannot be written:
/// `Deadline::In` takes a `std::time::Duration`, which is never negative.)
#[tokio::test]
async fn past_deadlines_are_refused() {
    let f = fixture().await;
    let id = durably_journal::new_execution_id();
    let past = chrono::Utc::now() - Duration::from_secs(1);
    f.refused(
        f.runtime.start::<_, u64>(
            "double",
            id,
            &1_u32,
            StartOptions::default().deadline(Deadline::At(past)),
        ),
        |error| matches!(error, Error::InvalidOption(_)),
    )
    .await;
    f.refused(
        f.runtime.start::<_, u64>(
            "double",
            id,
            &1_u32,
            StartOptions::default().deadline(Deadline::In(Duration::MAX)),
        ),
        |error| matches!(error, Error::InvalidOption(_)),
    )
    .await;
}

/// Registration problems are reported together by `start`, and nothing is written.
#[tokio::test]
async fn bad_registrations_are_refused() {
    let f = fixture().await;
    let before = f.snapshot();
    let error = Runtime::builder(f.journal.clone())
        .register("double", 0, double)
        .register("twice", 1, double)
        .register("twice", 1, double)
        .register("bad\tkind", 1, double)
        .start()
        .await
        .unwrap_err();
    let Error::InvalidConfig(message) = &error else {
        panic!("expected InvalidConfig, got {error:?}")
    };
    assert!(message.contains("not 0"), "{message}");
    assert!(message.contains("registered twice"), "{message}");
    assert!(message.contains("control character"), "{message}");
    let error = Runtime::builder(f.journal.clone())
        .queue(
            "q",
            QueueConfig {
                concurrency_max: Some(0),
                ..QueueConfig::default()
            },
        )
        .start()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::InvalidConfig(_)), "{error:?}");
    assert_eq!(f.snapshot(), before);
}

/// A start is durable and queued when it returns; starting the same id again returns the
/// same execution and writes nothing; another kind under that id is `IdConflict`. A client
/// in a process that does not run the kind starts it too.
#[tokio::test]
async fn starts_are_idempotent_by_id() {
    let f = fixture().await;
    let id = durably_journal::new_execution_id();
    let handle = f
        .runtime
        .start::<_, u64>("double", id, &21_u32, StartOptions::default().queue("q"))
        .await
        .unwrap();
    assert_eq!(handle.id(), id);
    assert_eq!(handle.status().unwrap(), Status::Queued);
    let before = f.snapshot();
    let again = f
        .runtime
        .start::<_, u64>("double", id, &22_u32, StartOptions::default())
        .await
        .unwrap();
    assert_eq!(again.id(), id);
    assert_eq!(f.snapshot(), before, "a repeated start wrote something");

    let elsewhere = Client::new(f.journal.clone()).await.unwrap();
    let echo = Runtime::builder(f.journal.clone())
        .register(
            "echo",
            1,
            |_context: WorkflowContext, text: String| async move { Ok::<_, WorkflowError>(text) },
        )
        .start()
        .await
        .unwrap();
    drop(echo);
    f.refused(
        elsewhere.start::<_, String>("echo", id, &"hi", StartOptions::default()),
        |error| matches!(error, Error::IdConflict { existing_kind, .. } if existing_kind == "double"),
    )
    .await;
    let other = durably_journal::new_execution_id();
    let started = elsewhere
        .start::<_, String>("echo", other, &"hi", StartOptions::default())
        .await
        .unwrap();
    assert_eq!(started.status().unwrap(), Status::Queued);
}

/// A deduplication key held by an unfinished execution refuses another start with
/// `Duplicate`, or returns the holder with `ReturnExisting`.
#[tokio::test]
async fn taken_dedup_keys() {
    let f = fixture().await;
    let first = durably_journal::new_execution_id();
    let options = || {
        StartOptions::default()
            .queue("q")
            .dedup("order-42", OnDuplicate::Reject)
    };
    f.runtime
        .start::<_, u64>("double", first, &1_u32, options())
        .await
        .unwrap();
    let second = durably_journal::new_execution_id();
    f.refused(
        f.runtime
            .start::<_, u64>("double", second, &1_u32, options()),
        |error| matches!(error, Error::Duplicate { existing, .. } if *existing == first),
    )
    .await;
    let returned = f
        .runtime
        .start::<_, u64>(
            "double",
            second,
            &1_u32,
            StartOptions::default()
                .queue("q")
                .dedup("order-42", OnDuplicate::ReturnExisting),
        )
        .await
        .unwrap();
    assert_eq!(returned.id(), first);
}
