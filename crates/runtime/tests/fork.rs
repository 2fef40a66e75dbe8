//! `Client::fork` (docs/design.md, "Fork"): a fork of a failed execution from seq N copies its
//! recorded steps before N as recorded (their effects are not run again: an effect ledger
//! counts them; their idempotency keys are the original's) and runs the rest on current code,
//! under its own idempotency keys; a fork from before a guarded step runs its effect again
//! under a new key. The fork is linked to its original, with an event on each. Every refusal
//! (the original may still run: queued, waiting, running; a seq past its recorded steps; a
//! step to copy in the ambiguous window; a hand-driven execution; an unknown id or version)
//! is a typed error, and the journal is unchanged.
//!
//! Method: the broken code runs in one runtime and fails at its last step; the fixed code
//! runs in another, which claims the forks. The ledger is a process-wide list of the keys
//! each guarded effect ran under.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Mutex;
use std::time::Duration;

use durably_journal::{Guarded, Policy, Status, StepError};
use durably_runtime::{
    Client, EVENT_FORKED, EVENT_FORKED_FROM, Error, ForkOptions, ForkRefusal, Runtime,
    StartOptions, WorkflowContext, WorkflowError,
};
use support::{Scratch, event_kinds, locked, wait_for_status, wait_until};
use uuid::Uuid;

const KIND: &str = "charged";

/// The key of every charge that ran, in order.
static LEDGER: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Reads an amount, charges it once (guarded), then reports; `report_fails` makes the report
/// fail for good (the bug the fork recovers from).
async fn charge(ctx: &WorkflowContext, report_fails: bool) -> Result<String, WorkflowError> {
    let amount: u32 = ctx.pure("amount", || async { Ok(42) }).await?;
    let charged = ctx
        .guarded("charge", Policy::Retry, |key| async move {
            LEDGER.lock().unwrap().push(key.to_string());
            Ok::<_, StepError>(format!("charged {amount}"))
        })
        .await?;
    let Guarded::Done(receipt) = charged else {
        return Err(WorkflowError::new("skipped"));
    };
    ctx.pure("report", || {
        let receipt = receipt.clone();
        async move {
            if report_fails {
                Err(StepError::fatal("the report is broken"))
            } else {
                Ok(format!("{receipt}, reported"))
            }
        }
    })
    .await
    .map_err(Into::into)
}

async fn broken(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    charge(&ctx, true).await
}

async fn fixed(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    charge(&ctx, false).await
}

fn ledger_count(key: &str) -> usize {
    LEDGER.lock().unwrap().iter().filter(|k| *k == key).count()
}

/// (name, state, idempotency key) of each step of `id`.
fn steps(scratch: &Scratch, id: Uuid) -> Vec<(String, String, String)> {
    scratch
        .journal
        .steps(id)
        .unwrap()
        .into_iter()
        .map(|step| {
            (
                step.name,
                step.state.to_string(),
                step.idempotency_key.to_string(),
            )
        })
        .collect()
}

/// A failed execution of the broken code, and a runtime of the fixed code.
async fn failed_original(scratch: &Scratch) -> (Uuid, Runtime) {
    let old = Runtime::builder(scratch.journal.clone())
        .register(KIND, 1, broken)
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = old
        .start::<_, String>(KIND, id, &(), StartOptions::default())
        .await
        .unwrap();
    assert!(matches!(
        handle.result().await,
        Err(Error::WorkflowFailed { .. })
    ));
    old.shutdown();
    let new = Runtime::builder(scratch.journal.clone())
        .register(KIND, 1, fixed)
        .start()
        .await
        .unwrap();
    (id, new)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_copies_the_steps_before_n_and_runs_the_rest() {
    let scratch = Scratch::new();
    let (original, runtime) = failed_original(&scratch).await;
    let recorded = steps(&scratch, original);
    let charge_key = recorded[1].2.clone();
    assert_eq!(ledger_count(&charge_key), 1);

    let fork = runtime
        .fork(original, ForkOptions::from_seq(2))
        .await
        .unwrap();
    assert_ne!(fork, original);
    let output = runtime.handle::<String>(fork).result().await.unwrap();
    assert_eq!(output, "charged 42, reported");
    assert_eq!(ledger_count(&charge_key), 1, "the copied charge ran again");
    let copied = steps(&scratch, fork);
    assert_eq!(
        copied[..2],
        recorded[..2],
        "steps before N are copied as recorded"
    );
    assert_eq!(copied[2].1, "completed");
    assert_eq!(
        scratch.journal.get(original).unwrap().unwrap().status,
        Status::Failed,
        "the original is left as it was"
    );
    assert!(event_kinds(&scratch.journal, original).contains(&EVENT_FORKED.to_owned()));
    assert!(event_kinds(&scratch.journal, fork).contains(&EVENT_FORKED_FROM.to_owned()));
    let link: (String, u32) = scratch
        .journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT forked_from, fork_seq FROM runtime_executions WHERE execution_id = ?1",
                [fork.to_string()],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?)
        })
        .unwrap();
    assert_eq!(link, (original.to_string(), 2));

    // From before the charge: it runs again, under the fork's own key.
    let again = runtime
        .fork(original, ForkOptions::from_seq(1))
        .await
        .unwrap();
    runtime.handle::<String>(again).result().await.unwrap();
    let new_key = steps(&scratch, again)[1].2.clone();
    assert_ne!(
        new_key, charge_key,
        "a step at or after N runs under a new key"
    );
    assert_eq!(ledger_count(&new_key), 1);
    assert_eq!(ledger_count(&charge_key), 1);
    runtime.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_runs_on_the_version_it_is_given() {
    let scratch = Scratch::new();
    let (original, runtime) = failed_original(&scratch).await;
    runtime.shutdown();
    let two = Runtime::builder(scratch.journal.clone())
        .register(KIND, 2, fixed)
        .start()
        .await
        .unwrap();
    let fork = two
        .fork(original, ForkOptions::from_seq(2).version(2))
        .await
        .unwrap();
    two.handle::<String>(fork).result().await.unwrap();
    two.shutdown();
}

/// A guarded step whose closure never returns, under a short timeout, with policy Fail: the
/// step is left in the ambiguous window and the execution waits for an operator.
async fn hangs(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    ctx.pure("before", || async { Ok(()) }).await?;
    let _: Guarded<()> = ctx
        .step("hang")
        .timeout(Duration::from_millis(20))
        .guarded(Policy::Fail, |_| {
            std::future::pending::<Result<(), StepError>>()
        })
        .await?;
    Ok(())
}

/// Waits for a message a week: it parks.
async fn waits(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    ctx.recv::<u32>("go", Duration::from_hours(168)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_typed_and_writes_nothing() {
    let scratch = Scratch::new();
    let (failed, runtime) = failed_original(&scratch).await;
    runtime.shutdown();
    let refused = |refusal: ForkRefusal| move |error: &Error| matches!(error, Error::ForkRefused { refusal: r, .. } if *r == refusal);
    let client = Client::new(scratch.journal.clone()).await.unwrap();

    let past = client.fork(failed, ForkOptions::from_seq(4));
    let recorded = 3;
    let expected = ForkRefusal::SeqPastEnd {
        from_seq: 4,
        recorded,
    };
    scratch.refused(past, refused(expected)).await;
    let unknown = client.fork(failed, ForkOptions::from_seq(1).version(9));
    let expected = ForkRefusal::UnknownVersion {
        kind: KIND.to_owned(),
        version: 9,
    };
    scratch.refused(unknown, refused(expected)).await;
    let nobody = durably_journal::new_execution_id();
    let missing = client.fork(nobody, ForkOptions::from_seq(0));
    scratch
        .refused(
            missing,
            |error| matches!(error, Error::NotFound(id) if *id == nobody),
        )
        .await;

    // Queued: nobody serves its kind yet.
    let (_, queued) = support::start_queued(&scratch.journal, "unserved", &()).await;
    let fork = client.fork(queued, ForkOptions::from_seq(0));
    let expected = ForkRefusal::Unfinished {
        status: Status::Queued,
    };
    scratch.refused(fork, refused(expected)).await;

    // Running: opened by hand, with the runtime's row.
    let (running, execution) = scratch.runtime_execution().await;
    let fork = client.fork(running, ForkOptions::from_seq(0));
    let expected = ForkRefusal::Unfinished {
        status: Status::Running,
    };
    scratch.refused(fork, refused(expected)).await;
    drop(execution);

    // Hand-driven: no runtime row.
    let hand = durably_journal::new_execution_id();
    let durably_journal::Opened::Running(execution) = scratch
        .journal
        .open_execution(hand, "by-hand", "", &())
        .await
        .unwrap()
    else {
        unreachable!("a new execution is never finished");
    };
    execution.complete(&()).await.unwrap();
    let fork = client.fork(hand, ForkOptions::from_seq(0));
    scratch
        .refused(fork, refused(ForkRefusal::HandDriven))
        .await;

    let others = Runtime::builder(scratch.journal.clone())
        .register("waits", 1, waits)
        .register("hangs", 1, hangs)
        .start()
        .await
        .unwrap();
    // Waiting: parked on a receive.
    let parked = durably_journal::new_execution_id();
    others
        .start::<_, ()>("waits", parked, &(), StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&scratch.journal, parked, Status::Waiting).await;
    let fork = client.fork(parked, ForkOptions::from_seq(0));
    let expected = ForkRefusal::Unfinished {
        status: Status::Waiting,
    };
    scratch.refused(fork, refused(expected)).await;

    // A step to copy in the ambiguous window: allowed from seq 1, refused past it.
    let ambiguous = durably_journal::new_execution_id();
    others
        .start::<_, ()>("hangs", ambiguous, &(), StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&scratch.journal, ambiguous, Status::AwaitingOperator).await;
    // The halted run parks the execution before it drops its handle, which holds the lock
    // until then; a cancel needs the lock.
    wait_until(
        &scratch.journal,
        "the halted run's lock released",
        |journal| !locked(journal, ambiguous),
    )
    .await;
    others.cancel(ambiguous, "given up").await.unwrap();
    let fork = client.fork(ambiguous, ForkOptions::from_seq(2));
    let expected = ForkRefusal::Ambiguous {
        seq: 1,
        step: "hang".to_owned(),
        from_seq: 2,
    };
    scratch.refused(fork, refused(expected)).await;
    others.shutdown();
    client
        .fork(ambiguous, ForkOptions::from_seq(1))
        .await
        .unwrap();
}
