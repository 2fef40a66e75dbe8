//! Executions run through `Runtime::run` in the failpoint matrix: the deferred open and
//! write-behind (rules W1–W5 of docs/design.md) under the same ledger and checker as the
//! hand-driven executions.
//!
//! Their plans are the covering plans with the `Fail` step under `Retry` instead: a run waits
//! for its execution's end, and an execution awaiting an operator has none until one answers.
//!
//! Acknowledgements follow what write-behind promises, so the checker's `lost` figure proves
//! it: a step's outcome is acknowledged when the next idempotent or guarded closure starts
//! (W1 and W2: everything before it is durable by then), and every outcome, with the end, once
//! `run` has returned (W4: the end carries whatever was pending). Never when a step call
//! returns: its row may still be pending.

use std::sync::{Arc, Mutex, PoisonError};

use durably::runtime::{
    Error as RuntimeError, Runtime, StartOptions, WorkflowContext, WorkflowError,
};
use durably_journal::{Error, Guarded, Journal};

use super::BoxError;
use super::plan::{ExecutionPlan, PlanInput, PolicyKind, Shape, StepKind};
use super::workload::Workload;

/// The kind of the executions run through the runtime; the hand-driven passes leave them alone.
pub const RUN_KIND: &str = "torture-run";
/// The first index of the run executions.
pub const RUN_FIRST: u64 = 200;
/// How many executions the matrix runs through the runtime.
pub const RUN_EXECUTIONS: u64 = 2;

/// One step's outcome as a run saw it: `(seq, outcome word, value)`, as acknowledged.
type Outcome = (usize, String, String);

/// The plan of run execution `index`: the covering plan, its `Fail` step under `Retry`.
pub fn run_plan(seed: u64, index: u64) -> ExecutionPlan {
    let mut plan = ExecutionPlan::from_input(PlanInput {
        seed,
        index,
        slot: 0,
        shape: Shape::Covering,
    });
    for (seq, step) in plan.steps.iter_mut().enumerate() {
        if step.kind == StepKind::Guarded(PolicyKind::Fail) {
            step.kind = StepKind::Guarded(PolicyKind::Retry);
            step.name = format!("guarded-retry-{seq}");
        }
    }
    plan
}

/// A runtime on `journal` serving [`RUN_KIND`], whose workflow records effects and acks
/// through its own [`Workload`] on the same run directory.
///
/// # Errors
/// The runtime does not start, or the ledger cannot be opened.
pub async fn runtime(journal: &Journal, dir: &std::path::Path) -> Result<Runtime, BoxError> {
    let workload = Arc::new(Workload::new(journal.clone(), dir)?);
    Ok(Runtime::builder(journal.clone())
        .register(
            RUN_KIND,
            1,
            move |context: WorkflowContext, input: PlanInput| {
                run_steps(Arc::clone(&workload), context, input)
            },
        )
        .start()
        .await?)
}

/// Runs the run executions to their ends and acknowledges them.
///
/// # Errors
/// An engine error the workload never expects, or a ledger I/O error.
pub async fn run_all(runtime: &Runtime, workload: &Workload, seed: u64) -> Result<(), BoxError> {
    for index in RUN_FIRST..RUN_FIRST + RUN_EXECUTIONS {
        let plan = run_plan(seed, index);
        let ran = runtime
            .run::<PlanInput, Vec<Outcome>>(RUN_KIND, plan.id, &plan.input, StartOptions::default())
            .await;
        let (outcomes, status) = match ran {
            Ok(outcomes) => (outcomes, "completed"),
            Err(RuntimeError::WorkflowFailed {
                error: Some(error), ..
            }) => {
                let error: WorkflowError = error.decode()?;
                let details = error.details.ok_or("a failed run without its outcomes")?;
                (serde_json::from_value(details)?, "failed")
            }
            Err(error) => return Err(error.into()),
        };
        let id = plan.id.to_string();
        for (seq, word, value) in outcomes {
            workload.ack(&["A", &id, &seq.to_string(), &word, &value])?;
        }
        workload.ack(&["F", &id, status])?;
    }
    Ok(())
}

/// Acks of the outcomes a closure found, when it starts: every one before it is durable.
#[derive(Clone)]
struct Acker {
    workload: Arc<Workload>,
    id: String,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
}

impl Acker {
    fn ack_earlier(&self) -> Result<(), durably_journal::StepError> {
        let outcomes = self
            .outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (seq, word, value) in outcomes {
            self.workload
                .ack(&["A", &self.id, &seq.to_string(), &word, &value])
                .map_err(|error| durably_journal::StepError::fatal(error.to_string()))?;
        }
        Ok(())
    }

    fn push(&self, outcome: Outcome) {
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(outcome);
    }

    fn all(&self) -> Vec<Outcome> {
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The registered workflow: the plan's steps through the context, acking as the module says.
async fn run_steps(
    workload: Arc<Workload>,
    mut context: WorkflowContext,
    input: PlanInput,
) -> Result<Vec<Outcome>, WorkflowError> {
    let plan = run_plan(input.seed, input.index);
    let acker = Acker {
        workload: Arc::clone(&workload),
        id: plan.id.to_string(),
        outcomes: Arc::default(),
    };
    for (seq, step) in plan.steps.iter().enumerate() {
        let effect = workload.effect(&plan, seq, None);
        let closure = |key: durably_journal::StepKey| {
            let (effect, acked) = (effect.clone(), acker.ack_earlier());
            async move {
                acked?;
                effect.run(key.idempotency_key()).await
            }
        };
        let result = match step.kind {
            StepKind::Pure => {
                let (effect, key) = (effect.clone(), effect.key);
                context
                    .pure(&step.name, || effect.clone().run(key))
                    .await
                    .map(Guarded::Done)
            }
            StepKind::Idempotent { .. } | StepKind::Fatal => context
                .idempotent(&step.name, closure)
                .await
                .map(Guarded::Done),
            StepKind::Guarded(policy) => {
                context
                    .guarded(&step.name, workload.policy(policy), closure)
                    .await
            }
        };
        match result {
            Ok(Guarded::Done(value)) => acker.push((seq, "done".to_owned(), value)),
            Ok(Guarded::Skipped(_)) => acker.push((seq, "skipped".to_owned(), "-".to_owned())),
            Err(RuntimeError::Journal(Error::StepFailed { .. }))
                if step.kind == StepKind::Fatal =>
            {
                acker.push((seq, "failed".to_owned(), "-".to_owned()));
                let mut error = WorkflowError::new("planned fatal step");
                error.details = serde_json::to_value(acker.all()).ok();
                return Err(error);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(acker.all())
}
