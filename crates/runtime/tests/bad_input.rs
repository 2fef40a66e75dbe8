//! The runtime's answer to bad input (plan §9): a name with a control character, an empty or
//! oversized name, an oversized message, a send to an unknown, hand-driven or finished
//! execution, a reused idempotency key with another payload, an event of an unknown
//! execution. Each must be a typed error, and none may change the journal: every test takes a
//! snapshot of every row of every table (journal's and runtime's) before the call and compares
//! it after.
//!
//! Executions "started through the runtime" are stood in for by a hand-opened execution plus
//! the `runtime_executions` row that starting writes, inserted here with SQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::{Opened, Status};
use durably_runtime::{Client, Error, KEY_BYTES_MAX, MESSAGE_ENVELOPE_BYTES, SendOutcome};
use support::{PAYLOAD_BYTES_MAX, Scratch};

struct Fixture {
    scratch: Scratch,
    client: Client,
}

async fn fixture() -> Fixture {
    let scratch = Scratch::new();
    let client = Client::new(scratch.journal.clone()).await.unwrap();
    Fixture { scratch, client }
}

impl std::ops::Deref for Fixture {
    type Target = Scratch;

    fn deref(&self) -> &Scratch {
        &self.scratch
    }
}

/// A send to an id no execution has is `ReceiverNotFound`.
#[tokio::test]
async fn send_to_an_unknown_id() {
    let f = fixture().await;
    let nobody = durably_journal::new_execution_id();
    let error = f
        .refused(f.client.send(nobody, "approval", &true, None), |error| {
            matches!(error, Error::ReceiverNotFound { execution_id } if *execution_id == nobody)
        })
        .await;
    assert!(error.to_string().contains(&nobody.to_string()), "{error}");
}

/// A send to an execution a program drives by hand (no runtime row) is `NotRuntimeExecution`:
/// nothing in it could ever receive the message.
#[tokio::test]
async fn send_to_a_hand_driven_execution() {
    let f = fixture().await;
    let id = durably_journal::new_execution_id();
    let Opened::Running(_execution) = f
        .journal
        .open_execution(id, "report", "", &())
        .await
        .unwrap()
    else {
        unreachable!("a new execution is never finished");
    };
    f.refused(
        f.client.send(id, "approval", &true, None),
        |error| matches!(error, Error::NotRuntimeExecution { execution_id } if *execution_id == id),
    )
    .await;
}

/// A send to an execution that has ended is `ReceiverFinished`, naming its status.
#[tokio::test]
async fn send_to_a_finished_execution() {
    let f = fixture().await;
    let (id, execution) = f.runtime_execution().await;
    execution.complete(&"approved").await.unwrap();
    let error = f
        .refused(f.client.send(id, "approval", &true, Some("k")), |error| {
            matches!(
                error,
                Error::ReceiverFinished { execution_id, status: Status::Completed }
                    if *execution_id == id
            )
        })
        .await;
    assert!(error.to_string().contains("completed"), "{error}");
}

/// A message over the journal's payload cap less the recv step's envelope is
/// `PayloadTooLarge` with its size and that maximum; one at the maximum is accepted.
#[tokio::test]
async fn oversized_message() {
    let f = fixture().await;
    let (id, _execution) = f.runtime_execution().await;
    let message_max = PAYLOAD_BYTES_MAX - MESSAGE_ENVELOPE_BYTES;
    let over = "x".repeat(PAYLOAD_BYTES_MAX); // plus its two quotes
    f.refused(f.client.send(id, "approval", &over, None), |error| {
        matches!(error, Error::PayloadTooLarge { bytes, max, .. }
            if *bytes == PAYLOAD_BYTES_MAX + 2 && *max == message_max)
    })
    .await;
    let at_cap = "x".repeat(message_max - 2);
    let sent = f.client.send(id, "approval", &at_cap, None).await.unwrap();
    assert!(matches!(sent, SendOutcome::Sent { .. }));
}

/// Topics and keys with control characters, empty ones and overlong ones are `InvalidName`,
/// checked before the receiver is looked up.
#[tokio::test]
async fn bad_topics_and_keys() {
    let f = fixture().await;
    let (id, _execution) = f.runtime_execution().await;
    let long = "t".repeat(KEY_BYTES_MAX + 1);
    for topic in [
        "",
        "appro\u{0}val",
        "approval\n",
        "\u{1b}[2J",
        "\u{9b}",
        long.as_str(),
    ] {
        f.refused(f.client.send(id, topic, &true, None), |error| {
            matches!(error, Error::InvalidName { what: "topic", .. })
        })
        .await;
    }
    for key in ["", "key\r", long.as_str()] {
        f.refused(f.client.send(id, "approval", &true, Some(key)), |error| {
            matches!(
                error,
                Error::InvalidName {
                    what: "idempotency key",
                    ..
                }
            )
        })
        .await;
    }
    f.refused(
        f.client.get_event::<bool>(id, "status\t", Duration::ZERO),
        |error| {
            matches!(
                error,
                Error::InvalidName {
                    what: "event key",
                    ..
                }
            )
        },
    )
    .await;
}

/// A repeated idempotency key with the same payload delivers nothing and names the first
/// message; with another payload it is `IdempotencyKeyReused`. Keys are per receiver.
#[tokio::test]
async fn repeated_idempotency_keys() {
    let f = fixture().await;
    let (id, _execution) = f.runtime_execution().await;
    let (other, _other_execution) = f.runtime_execution().await;
    let first = f
        .client
        .send(id, "approval", &true, Some("click-1"))
        .await
        .unwrap();
    let SendOutcome::Sent { message_id } = first else {
        panic!("first send: {first:?}")
    };
    let before = f.snapshot();
    let again = f
        .client
        .send(id, "approval", &true, Some("click-1"))
        .await
        .unwrap();
    assert_eq!(again, SendOutcome::AlreadySent { message_id });
    assert_eq!(f.snapshot(), before, "a repeated send wrote something");
    f.refused(
        f.client.send(id, "approval", &false, Some("click-1")),
        |error| {
            matches!(error, Error::IdempotencyKeyReused { message_id: first, .. }
            if *first == message_id)
        },
    )
    .await;
    let elsewhere = f
        .client
        .send(other, "approval", &true, Some("click-1"))
        .await
        .unwrap();
    assert!(
        matches!(elsewhere, SendOutcome::Sent { .. }),
        "{elsewhere:?}"
    );
}

/// Reading an event of an unknown execution is `NotFound`; of a known one that published
/// nothing, `None`.
#[tokio::test]
async fn events_of_unknown_executions() {
    let f = fixture().await;
    let nobody = durably_journal::new_execution_id();
    f.refused(
        f.client
            .get_event::<String>(nobody, "status", Duration::ZERO),
        |error| matches!(error, Error::NotFound(id) if *id == nobody),
    )
    .await;
    let (id, _execution) = f.runtime_execution().await;
    let read = f.client.get_event::<String>(id, "status", Duration::ZERO);
    assert_eq!(read.await.unwrap(), None);
}
