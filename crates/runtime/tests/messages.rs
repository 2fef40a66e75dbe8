//! Messages (plan §5.2, §5.3, invariant R4): a `recv` returns the messages sent to its
//! execution on its topic, first sent first received, whether they were sent before it waited
//! or while it waited (in memory or parked); each message is consumed by exactly one recv
//! step, in that step's transaction; a repeated idempotency key delivers nothing; a message
//! that does not decode is consumed and recorded as the step's failure instead of blocking the
//! topic; a receive times out at its deadline on the runtime's clock; a send wakes a receiver
//! parked on its topic in the send's own transaction; and a workflow's own `send` is a step
//! that stores its message once.
//!
//! Everything runs on a `TestClock` the test moves; what is checked is read back from the
//! journal's tables.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::{IdempotencyKey, Status, StepState};
use durably_runtime::{
    Error, Runtime, SendOutcome, StartOptions, WorkflowContext, WorkflowError, WorkflowHandle,
};
use support::{
    Clocked, WEEK_MINUTES, approval, consumption, event_kinds, locked, start_queued,
    wait_for_status, wait_for_steps,
};
use uuid::Uuid;

/// Receives on topic "t" until a receive finds nothing at once, and returns what it got.
async fn drain(context: WorkflowContext, (): ()) -> Result<Vec<String>, WorkflowError> {
    let mut got = Vec::new();
    while let Some(text) = context.recv::<String>("t", Duration::ZERO).await? {
        got.push(text);
    }
    Ok(got)
}

async fn runtime(f: &Clocked) -> Runtime {
    f.runtime()
        .register("approval", 1, approval)
        .register("drain", 1, drain)
        .start()
        .await
        .unwrap()
}

/// A message sent before its receiver waits is kept, and the receive takes it at once without
/// parking, consuming it in the recv step (seq 2, after the event and the deadline).
#[tokio::test]
async fn a_message_sent_before_the_receive_is_kept_for_it() {
    let f = Clocked::new();
    let (client, id) = start_queued(&f.journal, "approval", &WEEK_MINUTES).await;
    let sent = client.send(id, "approval", &true, None).await.unwrap();
    assert!(matches!(sent, SendOutcome::Sent { .. }), "{sent:?}");

    let runtime = runtime(&f).await;
    assert_eq!(
        runtime.handle::<Option<bool>>(id).result().await.unwrap(),
        Some(true)
    );
    assert_eq!(
        consumption(&f.journal, id),
        [("approval".to_owned(), Some(2))]
    );
    let steps = f.journal.steps(id).unwrap();
    assert_eq!(steps[1].name, "durably:recv-deadline/approval");
    assert_eq!(steps[2].name, "durably:recv/approval");
    let recorded: serde_json::Value = steps[2].result.as_ref().unwrap().decode().unwrap();
    assert_eq!(recorded["message"], true, "{recorded}");
    assert!(!event_kinds(&f.journal, id).contains(&"parked".to_owned()));
}

/// Messages on a topic are received in the order they were sent; a message on another topic
/// is left for a receive of that topic.
#[tokio::test]
async fn messages_on_a_topic_arrive_first_sent_first_received() {
    let f = Clocked::new();
    let (client, id) = start_queued(&f.journal, "drain", &()).await;
    for (topic, text) in [("t", "first"), ("other", "elsewhere"), ("t", "second")] {
        client.send(id, topic, &text, None).await.unwrap();
    }
    let runtime = runtime(&f).await;
    let got = runtime.handle::<Vec<String>>(id).result().await.unwrap();
    assert_eq!(got, ["first", "second"]);
    let consumed = consumption(&f.journal, id);
    assert_eq!(consumed[1], ("other".to_owned(), None), "{consumed:?}");
}

/// A second send with the same key delivers nothing: it answers with the first message's id,
/// and the receiver gets the message once.
#[tokio::test]
async fn a_repeated_key_is_delivered_once() {
    let f = Clocked::new();
    let (client, id) = start_queued(&f.journal, "drain", &()).await;
    let first = client.send(id, "t", &"once", Some("k")).await.unwrap();
    let SendOutcome::Sent { message_id } = first else {
        panic!("{first:?}");
    };
    let again = client.send(id, "t", &"once", Some("k")).await.unwrap();
    assert_eq!(again, SendOutcome::AlreadySent { message_id });

    let runtime = runtime(&f).await;
    assert_eq!(
        runtime.handle::<Vec<String>>(id).result().await.unwrap(),
        ["once"]
    );
    assert_eq!(consumption(&f.journal, id).len(), 1);
}

/// A message that does not decode as the receive's type is consumed and recorded as the recv
/// step's failure, without its contents; the next message on the topic is received as usual.
#[tokio::test]
async fn an_undecodable_message_is_consumed_and_recorded_as_the_steps_failure() {
    let f = Clocked::new();
    let runtime = f
        .runtime()
        .register(
            "numbers",
            1,
            |context: WorkflowContext, (): ()| async move {
                let first = context.recv::<u32>("n", Duration::ZERO).await;
                let error = match first {
                    Err(Error::Journal(durably_journal::Error::StepFailed { error, .. })) => {
                        error.to_string()
                    }
                    other => panic!("the undecodable message gave {other:?}"),
                };
                let second = context.recv::<u32>("n", Duration::ZERO).await?;
                Ok::<_, WorkflowError>((error, second))
            },
        )
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let options = StartOptions::default().not_before(f.now() + Duration::from_secs(1));
    let handle = runtime
        .start::<_, (String, Option<u32>)>("numbers", id, &(), options)
        .await
        .unwrap();
    runtime.send(id, "n", &"secret text", None).await.unwrap();
    runtime.send(id, "n", &7_u32, None).await.unwrap();
    f.clock.advance(Duration::from_secs(1));

    let (error, second) = handle.result().await.unwrap();
    assert_eq!(second, Some(7));
    assert!(error.contains("does not decode as u32"), "{error}");
    assert!(
        !error.contains("secret"),
        "the failure repeats the payload: {error}"
    );
    assert_eq!(
        consumption(&f.journal, id),
        [("n".to_owned(), Some(1)), ("n".to_owned(), Some(3))]
    );
    let steps = f.journal.steps(id).unwrap();
    assert_eq!(steps[1].state, StepState::Failed);
    assert_eq!(steps[3].state, StepState::Completed);
}

/// An approval with a 10 minute timeout on a runtime that parks only waits over an hour,
/// once it waits in memory (its deadline recorded).
async fn receiving_in_memory(f: &Clocked) -> (Runtime, Uuid, WorkflowHandle<Option<bool>>) {
    let runtime = f
        .runtime()
        .register("approval", 1, approval)
        .park_after(Duration::from_hours(1))
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, Option<bool>>("approval", id, &10_u64, StartOptions::default())
        .await
        .unwrap();
    wait_for_steps(&f.journal, id, 2).await;
    (runtime, id, handle)
}

/// A receive with a timeout shorter than `park_after` waits in memory and returns `None` at
/// its deadline, recorded as timed out no earlier than the deadline.
#[tokio::test]
async fn a_short_receive_times_out_in_memory() {
    let f = Clocked::new();
    let started = f.now();
    let (_runtime, id, handle) = receiving_in_memory(&f).await;
    assert!(locked(&f.journal, id), "an in-memory wait keeps its lock");
    f.clock.advance(Duration::from_mins(10));
    assert_eq!(handle.result().await.unwrap(), None);
    let steps = f.journal.steps(id).unwrap();
    let recorded: serde_json::Value = steps[2].result.as_ref().unwrap().decode().unwrap();
    assert_eq!(recorded["timed_out"], true, "{recorded}");
    assert!(steps[2].result_at.unwrap() >= started + Duration::from_mins(10));
}

/// A receive waiting in memory takes a message sent while it waits.
#[tokio::test]
async fn a_short_receive_takes_a_message_sent_while_it_waits() {
    let f = Clocked::new();
    let (runtime, id, handle) = receiving_in_memory(&f).await;
    runtime.send(id, "approval", &false, None).await.unwrap();
    assert_eq!(handle.result().await.unwrap(), Some(false));
    assert_eq!(
        f.journal.get(id).unwrap().unwrap().opens,
        1,
        "it never parked"
    );
}

/// A receive with a long timeout parks on its topic, with its deadline as `due_at`; a send
/// wakes it in the send's own transaction, and it is claimed again and takes the message.
#[tokio::test]
async fn a_parked_receive_is_woken_by_a_send() {
    let f = Clocked::new();
    let runtime = runtime(&f).await;
    let started = f.now();
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, Option<bool>>("approval", id, &WEEK_MINUTES, StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&f.journal, id, Status::Waiting).await;
    let record = f.journal.get(id).unwrap().unwrap();
    assert_eq!(record.wait_topic.as_deref(), Some("approval"));
    assert_eq!(record.due_at, Some(started + Duration::from_hours(7 * 24)));
    assert_eq!(record.status_detail.unwrap()["recv"], "approval");
    assert!(!locked(&f.journal, id));
    assert_eq!(
        runtime
            .get_event::<String>(id, "status", Duration::ZERO)
            .await
            .unwrap()
            .as_deref(),
        Some("awaiting approval")
    );

    runtime
        .send(id, "approval", &true, Some("click-1"))
        .await
        .unwrap();
    let status = f.journal.get(id).unwrap().unwrap().status;
    assert_ne!(
        status,
        Status::Waiting,
        "the send's own transaction wakes the receiver"
    );
    assert_eq!(handle.result().await.unwrap(), Some(true));
    assert_eq!(
        consumption(&f.journal, id),
        [("approval".to_owned(), Some(2))]
    );
    let kinds = event_kinds(&f.journal, id);
    let woken = kinds.iter().position(|k| k == "woken").unwrap();
    let event = &f.journal.events(id).unwrap()[woken];
    let detail = event.detail.to_value().unwrap();
    assert_eq!(detail["by"], "message", "{detail}");
    assert_eq!(detail["topic"], "approval", "{detail}");
}

/// A parked receive that gets no message is woken by the due pass at its deadline and
/// returns `None`.
#[tokio::test]
async fn a_parked_receive_times_out_at_its_deadline() {
    let f = Clocked::new();
    let runtime = runtime(&f).await;
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, Option<bool>>("approval", id, &60_u64, StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&f.journal, id, Status::Waiting).await;
    f.clock.advance(Duration::from_mins(59));
    assert_eq!(f.journal.get(id).unwrap().unwrap().status, Status::Waiting);
    f.clock.advance(Duration::from_mins(1));
    assert_eq!(handle.result().await.unwrap(), None);
    // Once it has ended, nothing could receive a message: a send is refused.
    let refused = runtime.send(id, "approval", &true, None).await.unwrap_err();
    assert!(
        matches!(refused, Error::ReceiverFinished { .. }),
        "{refused:?}"
    );
}

/// A send to a receiver parked on another topic stores the message without waking it.
#[tokio::test]
async fn a_send_on_another_topic_does_not_wake_a_parked_receiver() {
    let f = Clocked::new();
    let runtime = runtime(&f).await;
    let id = durably_journal::new_execution_id();
    runtime
        .start::<_, Option<bool>>("approval", id, &60_u64, StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&f.journal, id, Status::Waiting).await;
    runtime.send(id, "unrelated", &1, None).await.unwrap();
    assert_eq!(f.journal.get(id).unwrap().unwrap().status, Status::Waiting);
    assert_eq!(
        consumption(&f.journal, id),
        [("unrelated".to_owned(), None)]
    );
}

/// A workflow's own send is a step that stores its message once, with the step's idempotency
/// key, and wakes the parked receiver; a send to an execution that does not exist is recorded
/// as the step's failure.
#[tokio::test]
async fn a_workflows_send_is_a_step_that_delivers_once() {
    let f = Clocked::new();
    let runtime = f
        .runtime()
        .register("approval", 1, approval)
        .register(
            "approver",
            1,
            |context: WorkflowContext, to: Uuid| async move {
                context.send(to, "approval", &true).await?;
                let nobody = durably_journal::new_execution_id();
                let refused = context.send(nobody, "approval", &true).await.unwrap_err();
                Ok::<_, WorkflowError>(refused.to_string())
            },
        )
        .start()
        .await
        .unwrap();
    let receiver = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, Option<bool>>("approval", receiver, &600_u64, StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&f.journal, receiver, Status::Waiting).await;
    let sender = durably_journal::new_execution_id();
    let refused = runtime
        .start::<_, String>("approver", sender, &receiver, StartOptions::default())
        .await
        .unwrap()
        .result()
        .await
        .unwrap();
    assert!(refused.contains("does not exist"), "{refused}");
    assert_eq!(handle.result().await.unwrap(), Some(true));

    let key = IdempotencyKey::derive(sender, 0, "durably:send/approval").to_string();
    let stored: String = f
        .journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT idempotency_key FROM messages WHERE execution_id = ?1",
                [receiver.to_string()],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(stored, key);
    let steps = f.journal.steps(sender).unwrap();
    assert_eq!(steps[1].state, StepState::Failed);
}
