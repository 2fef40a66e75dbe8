//! The demo's child process (`durably demo-worker`, hidden): an agent-like checkout workflow
//! on the journal. It prints `say ...` lines for the parent to relay, and `ready` when it has
//! reached its crash point, inside a guarded step whose intent is durable. There it blocks
//! until the parent kills it with SIGKILL.

use std::cell::Cell;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use durably::{Error, Execution, Guarded, IdempotencyKey, Journal, Opened, Policy, StepError};
use serde_json::{Value, json};
use uuid::Uuid;

use super::ledger::Ledger;
use super::scenario::{CrashPoint, Scenario};
use crate::error::Result;

/// Exit code of a worker stopped by an ambiguous step under the Fail policy.
pub const EXIT_AMBIGUOUS: u8 = 3;
/// How long a worker waits at its crash point for the SIGKILL before giving up.
const CRASH_WAIT_MAX: Duration = Duration::from_secs(20);
/// Exit code of a worker that was never killed at its crash point.
const EXIT_NOT_KILLED: i32 = 4;

/// Arguments of `durably demo-worker`.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// The journal.
    #[arg(long)]
    pub journal: PathBuf,
    /// The effect ledger.
    #[arg(long)]
    pub ledger: PathBuf,
    /// Which policies the guarded steps have.
    #[arg(long, value_enum)]
    pub scenario: Scenario,
    /// The execution to start or resume.
    #[arg(long)]
    pub execution: Uuid,
    /// The order number (default: the scenario's).
    #[arg(long)]
    pub order: Option<u32>,
    /// Where to block and wait for SIGKILL.
    #[arg(long, value_enum, default_value = "none")]
    pub crash: CrashPoint,
}

/// Runs the worker to completion, to its crash point, or to an ambiguous step.
///
/// # Errors
/// A journal or ledger error.
pub fn run(args: &WorkerArgs) -> Result<ExitCode> {
    crate::db::runtime()?.block_on(drive(args))
}

struct Worker<'a> {
    args: &'a WorkerArgs,
    ledger: Ledger,
    execution_id: String,
    /// Set by the reconcile probe, which narrates for itself.
    probed: Arc<AtomicBool>,
}

async fn drive(args: &WorkerArgs) -> Result<ExitCode> {
    let journal = Journal::builder(&args.journal)
        .sweep_on_open(false)
        .open()?;
    let order = args.order.unwrap_or(args.scenario.order());
    let input = json!({
        "order": order,
        "charge_policy": args.scenario.charge_policy(),
        "email_policy": args.scenario.email_policy(),
    });
    let name = format!("checkout order {order}");
    let opened = match journal
        .open_execution(args.execution, "checkout", &name, &input)
        .await
    {
        Err(Error::AwaitingOperator { seq, .. }) => {
            say(&format!(
                "stopped: step {seq} waits for an operator, and no run reopens the execution \
                 until it is resolved"
            ));
            return Ok(ExitCode::from(EXIT_AMBIGUOUS));
        }
        opened => opened?,
    };
    let mut execution = match opened {
        Opened::Running(execution) => execution,
        Opened::Finished(finished) => {
            say(&format!(
                "the execution had already {}; nothing ran",
                finished.status
            ));
            return Ok(ExitCode::SUCCESS);
        }
    };
    if execution.is_resume() {
        say("reopened the execution; replaying its journal");
    }
    let worker = Worker {
        args,
        ledger: Ledger::at(&args.ledger),
        execution_id: args.execution.to_string(),
        probed: Arc::new(AtomicBool::new(false)),
    };
    match worker.steps(&mut execution).await {
        Ok(summary) => {
            execution.complete(&summary).await?;
            say("completed the execution");
            Ok(ExitCode::SUCCESS)
        }
        Err(Error::Ambiguous { seq, name, .. }) => {
            say(&format!(
                "stopped: step {seq} ({name}) is ambiguous and its policy is Fail; an operator \
                 must resolve it"
            ));
            Ok(ExitCode::from(EXIT_AMBIGUOUS))
        }
        Err(error) => Err(error.into()),
    }
}

impl Worker<'_> {
    async fn steps(&self, execution: &mut Execution) -> durably::Result<Value> {
        let ran = Cell::new(false);
        let plan: Vec<String> = execution
            .pure("plan", || {
                ran.set(true);
                async {
                    Ok(["fetch order", "charge", "send email", "summarize"]
                        .map(String::from)
                        .to_vec())
                }
            })
            .await?;
        report(&ran, "plan", &format!("planned {} steps", plan.len()));

        let ran = Cell::new(false);
        let order: Value = execution
            .idempotent("fetch order", |key| {
                ran.set(true);
                async move {
                    self.effect("fetch", key.idempotency_key())?;
                    let order = self.args.order.unwrap_or(self.args.scenario.order());
                    Ok(json!({ "order": order, "amount_cents": 1250 }))
                }
            })
            .await?;
        report(
            &ran,
            "fetch order",
            "fetched the order (idempotent: safe to repeat)",
        );

        let receipt = self.charge(execution).await?;
        let email = self.email(execution).await?;
        let ran = Cell::new(false);
        let summary: Value = execution
            .pure("summarize", || {
                ran.set(true);
                let summary = json!({ "order": order, "charge": receipt, "email": email });
                async move { Ok(summary) }
            })
            .await?;
        report(&ran, "summarize", "wrote the summary");
        Ok(summary)
    }

    async fn charge(&self, execution: &mut Execution) -> durably::Result<Value> {
        let ran = Cell::new(false);
        let policy = if self.args.scenario.charge_policy() == "reconcile" {
            self.reconcile_probe()
        } else {
            Policy::Fail
        };
        let outcome = execution
            .guarded("charge", policy, |key| {
                ran.set(true);
                async move {
                    self.crash_here(CrashPoint::ChargeBefore);
                    self.effect("charge", key.idempotency_key())?;
                    self.crash_here(CrashPoint::ChargeAfter);
                    Ok(json!({ "receipt": receipt_for(key.idempotency_key()) }))
                }
            })
            .await?;
        match outcome {
            Guarded::Done(receipt) => {
                if ran.get() || !self.probed.load(Ordering::Relaxed) {
                    report(&ran, "charge", "charged the card, $12.50");
                }
                Ok(receipt)
            }
            Guarded::Skipped(skipped) => Ok(json!({ "skipped": skipped.to_string() })),
        }
    }

    async fn email(&self, execution: &mut Execution) -> durably::Result<Value> {
        let ran = Cell::new(false);
        let policy = if self.args.scenario.email_policy() == "skip" {
            Policy::Skip
        } else {
            Policy::Retry
        };
        let outcome = execution
            .guarded("send email", policy, |key| {
                ran.set(true);
                async move {
                    self.effect("email", key.idempotency_key())?;
                    self.crash_here(CrashPoint::EmailAfter);
                    Ok(json!({ "message_id": format!("msg-{}", key.idempotency_key().0.simple()) }))
                }
            })
            .await?;
        match outcome {
            Guarded::Done(message) => {
                report(&ran, "send email", "sent the confirmation email");
                Ok(message)
            }
            Guarded::Skipped(skipped) => {
                say(&format!(
                    "send email: SKIPPED under the Skip policy, not sent again ({skipped})"
                ));
                Ok(
                    json!({ "skipped": true, "idempotency_key": skipped.idempotency_key.to_string() }),
                )
            }
        }
    }

    /// Asks the payment provider (the ledger) whether a charge with this key went through.
    fn reconcile_probe(&self) -> Policy {
        let ledger = self.ledger.clone();
        let probed = Arc::clone(&self.probed);
        Policy::reconcile(move |key: IdempotencyKey| {
            probed.store(true, Ordering::Relaxed);
            let found = ledger.find("charge", &key.to_string());
            async move {
                let found = found.map_err(|error| StepError::fatal(error.message))?;
                if found.is_empty() {
                    say("charge: the reconcile probe found no charge with this key; charging now");
                    return Ok(None);
                }
                say(&format!(
                    "charge: the reconcile probe found the charge with key {key} at the payment \
                     provider; recorded it as done, NOT charged again"
                ));
                Ok(Some(
                    json!({ "receipt": receipt_for(key), "found_by": "reconcile probe" }),
                ))
            }
        })
    }

    /// Performs an effect: one line in the outside world's ledger.
    fn effect(&self, effect: &str, key: IdempotencyKey) -> Result<(), StepError> {
        self.ledger
            .append(effect, &key.to_string(), &self.execution_id)
            .map_err(|error| StepError::retryable(error.message))
    }

    /// At the chosen crash point: tell the parent, then wait to be killed.
    fn crash_here(&self, point: CrashPoint) {
        if self.args.crash != point {
            return;
        }
        let _ = crate::output::print("ready\n");
        std::thread::sleep(CRASH_WAIT_MAX);
        eprintln!("durably demo-worker: nobody killed this worker at its crash point");
        std::process::exit(EXIT_NOT_KILLED);
    }
}

fn receipt_for(key: IdempotencyKey) -> String {
    let digits = key.0.simple().to_string();
    format!("ch_{}", &digits[..12])
}

fn report(ran: &Cell<bool>, step: &str, what: &str) {
    if ran.get() {
        say(&format!("{step}: {what}"));
    } else {
        say(&format!("{step}: replayed from the journal, not run again"));
    }
}

/// One line of narration for the parent to relay.
fn say(text: &str) {
    let _ = crate::output::print(&format!("say {text}\n"));
}
