//! An operator resolves an ambiguous step with its seen token. A wire transfer is a guarded
//! step with `Policy::Fail`: after a crash between its intent and its result, no program may
//! guess whether the money left, so the execution waits for a person who checks with the bank.
//!
//! The example runs the transfer in a worker process (itself, started again) and kills it with
//! SIGKILL inside the step's ambiguous window: the bank has the transfer, the journal does not
//! have its receipt. It then plays the operator, in its own process, with the library calls
//! behind the `durably` commands:
//! 1. it starts a runtime, whose recovery resumes the execution; the run finds the step
//!    ambiguous and, under `Fail`, parks the execution `awaiting_operator`;
//! 2. it lists the steps awaiting an operator (`durably ls --status awaiting-operator`);
//! 3. it reads the step's seen token (`durably show ID`) before checking the outside world;
//! 4. it asks the fake bank about the step's idempotency key;
//! 5. it answers with the token: completed with the bank's receipt, or not done
//!    (`durably resolve ID SEQ --seen TOKEN --completed JSON | --not-done`); the token makes
//!    the answer apply only to the intent that was checked;
//! 6. the runtime resumes the execution, which replays the answer and completes: the bank
//!    served the transfer once.
//!
//! The fake bank and the worker harness are in `examples/support/`.
//!
//! ```sh
//! cargo run -p durably --example operator -- operator.db
//! ```

#[path = "support/fake_provider.rs"]
mod fake_provider;
#[path = "support/worker.rs"]
mod worker;

use std::time::{Duration, Instant};

use durably::operator::Resolution;
use durably::runtime::{Runtime, WorkflowContext, WorkflowError};
use durably::{Journal, Policy, Status, StepError};
use fake_provider::FakeProvider;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use worker::{BoxError, Crash, Env};

/// The workflow kind.
const KIND: &str = "wire-transfer";
/// What the worker prints once it is inside the step's ambiguous window.
const IN_WINDOW: &str = "in its ambiguous window";
/// How often the runtime looks for executions to recover, an operator's answer among them.
/// The default is 5 s; shorter, so the example ends soon after the answer.
const RECOVERY_INTERVAL: Duration = Duration::from_millis(250);
/// How long the example waits for the resumed run to reach the operator before it gives up.
const AWAIT_OPERATOR_MAX: Duration = Duration::from_secs(30);

/// The workflow's input.
#[derive(Serialize, Deserialize)]
struct Transfer {
    to: String,
    cents: u32,
}

/// Prepares the transfer and sends it through the bank, once.
async fn wire_transfer(
    ctx: WorkflowContext,
    transfer: Transfer,
    env: Env,
) -> Result<String, WorkflowError> {
    let bank = FakeProvider::next_to(&env.db, "bank");
    let reference: String = ctx
        .pure("prepare", || async move {
            Ok(format!("invoice {}", transfer.cents % 1_000))
        })
        .await?;
    let (to, cents, reference) = (&transfer.to, transfer.cents, &reference);
    // `Fail`: a crash in this step's window leaves the decision to an operator. `Retry` could
    // send the money twice (this bank does not deduplicate), `Skip` could lose it, and this
    // bank's records are not a query the program may trust on its own.
    let sent = ctx
        .guarded("send transfer", Policy::Fail, |key| {
            let (bank, env) = (&bank, &env);
            async move {
                let order = format!("{cents} cents to {to} for {reference}");
                let receipt = bank.serve(key.idempotency_key(), &order)?;
                env.crash_point(&format!(
                    "send transfer {IN_WINDOW}: the bank has it, the journal has no receipt"
                ))
                .await;
                Ok::<_, StepError>(receipt)
            }
        })
        .await?;
    sent.into_result()
        .map_err(|skipped| WorkflowError::new(skipped.to_string()))
}

/// A runtime serving the workflow, on `env`'s journal.
async fn runtime(env: Env) -> Result<Runtime, BoxError> {
    Ok(Runtime::builder(Journal::open(&env.db)?)
        .register(KIND, 1, move |ctx, transfer| {
            wire_transfer(ctx, transfer, env.clone())
        })
        .sweep_interval(RECOVERY_INTERVAL)
        .start()
        .await?)
}

/// The worker: starts the transfer, which hangs inside its step's window.
async fn work(env: Env, id: Uuid) -> Result<(), BoxError> {
    let transfer = Transfer {
        to: "ada@example.com".to_owned(),
        cents: 125_000,
    };
    let runtime = runtime(env).await?;
    worker::start_and_wait::<_, String>(&runtime, KIND, id, &transfer).await
}

/// The operator's side, after the crash.
async fn operate(env: Env, id: Uuid) -> Result<(), BoxError> {
    // 1. The recovery at start-up resumes the execution; its run parks it for an operator.
    let db = env.db.clone();
    let runtime = runtime(env).await?;
    let handle = runtime.handle::<String>(id);
    let deadline = Instant::now() + AWAIT_OPERATOR_MAX;
    while handle.status()? != Status::AwaitingOperator {
        if Instant::now() > deadline {
            return Err(format!("execution {id} never came to await an operator").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // 2. The steps awaiting an operator.
    let journal = runtime.journal();
    let Some(waiting) = journal
        .awaiting_operator()?
        .into_iter()
        .find(|step| step.execution_id == id)
    else {
        return Err(format!("execution {id} has no step awaiting an operator").into());
    };
    let seq = waiting.seq;
    println!(
        "execution {id} awaits an operator: step {seq} ({}), policy {}, because {}",
        waiting.step, waiting.policy, waiting.reason
    );

    // 3. The token of the intent about to be checked, taken BEFORE the check.
    let Some(seen) = journal.operator().seen_intent(id, seq)? else {
        return Err(format!("step {seq} of {id} is no longer ambiguous").into());
    };
    println!("seen token: {seen}");

    // 4. The outside world: did the bank serve this step's idempotency key?
    let Some(key) = journal
        .steps(id)?
        .into_iter()
        .find(|step| step.seq == seq)
        .map(|step| step.idempotency_key)
    else {
        return Err(format!("execution {id} has no step {seq}").into());
    };
    let bank = FakeProvider::next_to(&db, "bank");
    let (resolution, answer) = if let Some(receipt) = bank.find(key)? {
        println!("the bank has a transfer with key {key}: {receipt}");
        let answer = format!("--completed '{}'", serde_json::to_string(&receipt)?);
        (
            Resolution::Completed(serde_json::Value::String(receipt)),
            answer,
        )
    } else {
        println!("the bank has no transfer with key {key}");
        (Resolution::NotDone, "--not-done".to_owned())
    };

    // 5. The answer, for that intent only. The run that parked the execution holds its lock
    //    until its halted handle drops, an instant after the status changed: an answer given
    //    in between is refused with `Locked`, and given again.
    loop {
        match journal
            .operator()
            .resolve_seen(id, seq, seen, resolution.clone())
            .await
        {
            Err(durably::Error::Locked { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            answered => break answered?,
        }
    }
    println!(
        "resolved, as `durably --db {} resolve {id} {seq} --seen {seen} {answer}` would",
        db.display()
    );

    // 6. The runtime's next recovery pass resumes the execution.
    let receipt = handle.result().await?;
    println!("execution {id} completed: {receipt}");
    println!("the bank served key {key} {} time(s)", bank.served(key)?);
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let crash = Crash {
        default_db: "operator.db",
        needle: IN_WINDOW,
        count: 1,
    };
    worker::main(&crash, work, operate)
}
