//! The workflow the torture runtimes run: a plan of a runtime shape played through a
//! [`WorkflowContext`], with every effect appended to the ledger like the hand-driven
//! workload's, and every step outcome acknowledged once it is durable.
//!
//! **When an outcome is acknowledged.** A step call that returns does not promise that its
//! outcome is durable: the runtime may keep pure and idempotent results in memory and write
//! them with a later step (write-behind). It does promise that every outcome is durable before
//! the closure of a later idempotent or guarded step runs (so an effect never sees an input
//! that a crash could change). So outcomes wait in [`PendingAcks`] and are appended to the
//! acknowledgement log when such a closure starts; the checker then holds the journal to each.
//! Outcomes still pending when the workflow returns are never acknowledged: the execution's
//! own end, observed through its handle, covers them.

use std::sync::{Arc, Mutex, PoisonError};

use durably_journal::Guarded;
use durably_runtime::{Error, WorkflowContext, WorkflowError};
use serde::{Deserialize, Serialize};

use super::plan::{ExecutionPlan, PlanInput, StepKind};
use super::workload::Workload;

/// The kind the runtimes register (the hand-driven workload's kind too: a runtime must leave
/// the executions it did not start alone).
pub use super::plan::EXECUTION_KIND as RUNTIME_KIND;

/// The version the runtimes register.
pub const RUNTIME_VERSION: u32 = 1;

/// What a completed runtime execution returns: how many steps its plan has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeOutput {
    /// The plan's step count.
    pub steps: u64,
}

impl RuntimeOutput {
    /// The output a completed execution of `plan` must have.
    pub fn of(plan: &ExecutionPlan) -> Self {
        Self {
            steps: plan.steps.len() as u64,
        }
    }
}

/// The error message of an execution that ended at its planned fatal step.
pub const FATAL_MESSAGE: &str = "planned fatal step";

/// Step outcomes returned to the workflow but not yet acknowledged.
#[derive(Debug, Clone)]
struct PendingAcks {
    workload: Arc<Workload>,
    records: Arc<Mutex<Vec<Vec<String>>>>,
}

impl PendingAcks {
    fn push(&self, fields: &[&str]) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(fields.iter().map(|field| (*field).to_owned()).collect());
    }

    /// Acknowledges every pending outcome: called when an effect closure starts, when all of
    /// them are durable.
    fn flush(&self) -> std::io::Result<()> {
        let records =
            std::mem::take(&mut *self.records.lock().unwrap_or_else(PoisonError::into_inner));
        for record in records {
            let fields: Vec<&str> = record.iter().map(String::as_str).collect();
            self.workload.ack(&fields)?;
        }
        Ok(())
    }
}

/// Runs the plan `input` describes. Registered by every torture runtime.
///
/// # Errors
/// The planned fatal step's failure ([`FATAL_MESSAGE`]); a step that returned another value
/// than its effect (the execution then fails, and the checker reports its end as wrong); or
/// any runtime error, which the runtime acts on whatever this returns.
pub async fn workflow(
    workload: Arc<Workload>,
    mut context: WorkflowContext,
    input: PlanInput,
) -> Result<RuntimeOutput, WorkflowError> {
    if !input.shape.is_runtime() {
        return Err(WorkflowError::new("not a runtime plan"));
    }
    let plan = ExecutionPlan::from_input(input);
    let id = plan.id.to_string();
    let acks = PendingAcks {
        workload: Arc::clone(&workload),
        records: Arc::default(),
    };
    for (seq, step) in plan.steps.iter().enumerate() {
        let effect = workload.effect(&plan, seq, None);
        let expected = effect.clone();
        let keyed = |key| {
            let (effect, acks) = (effect.clone(), acks.clone());
            async move {
                acks.flush().map_err(|error| {
                    durably_journal::StepError::fatal(format!("ack write failed: {error}"))
                })?;
                effect.run_keyed(key).await
            }
        };
        let outcome = match step.kind {
            StepKind::Pure => context
                .pure(&step.name, || effect.clone().run_pure())
                .await
                .map(Guarded::Done),
            StepKind::Idempotent { .. } | StepKind::Fatal => context
                .idempotent(&step.name, keyed)
                .await
                .map(Guarded::Done),
            StepKind::Guarded(policy) => {
                context
                    .guarded(&step.name, workload.policy(policy), keyed)
                    .await
            }
        };
        let place = [id.as_str(), &seq.to_string()];
        match outcome {
            Ok(Guarded::Done(value)) if value == expected.value() => {
                acks.push(&["A", place[0], place[1], "done", &value]);
            }
            Ok(Guarded::Done(value)) => {
                return Err(WorkflowError::new(format!(
                    "step {seq} returned {value:?}, not {:?}",
                    expected.value()
                )));
            }
            Ok(Guarded::Skipped(_)) => acks.push(&["A", place[0], place[1], "skipped", "-"]),
            Err(Error::Journal(durably_journal::Error::StepFailed { .. }))
                if step.kind == StepKind::Fatal =>
            {
                return Err(WorkflowError::new(FATAL_MESSAGE));
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(RuntimeOutput::of(&plan))
}
