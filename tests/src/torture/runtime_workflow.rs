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
//! Outcomes still pending when the workflow returns are acknowledged by whoever observes the
//! execution's end (a handle's result, a `run`): the workflow returns every outcome of its
//! run in its output (or in its planned failure's details), since the end carries whatever
//! was pending.
//!
//! Records: `A <execution> <seq> done|skipped <value>` for a step with an effect,
//! `M <execution> <seq> <message>|-` for a receive (`-`: it timed out), and
//! `T <execution> <seq> <wall ms>` with the wall-clock time a timer's sleep returned, all
//! pending as above (a timer's wake time is the recorded one only once its step is durable);
//! and `O <execution> <seq>` when step `seq` stops the workflow because the run was asked to
//! stop (a cancel request, a deadline), appended at once, since it says when the stop was seen
//! rather than that anything is durable.
//!
//! Parallel steps, children and the patch point are run by [`composition`]; a patch answer is
//! acknowledged at once as `P <execution> true|false`, since `patched` returns it durable.

use std::sync::{Arc, Mutex, PoisonError};

use std::time::Duration;

use chrono::Utc;
use durably_journal::{Guarded, StepError, StepKey};
use durably_runtime::{Error, WorkflowContext, WorkflowError};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::plan::{
    ExecutionPlan, PROGRESS_EVENT, PlanInput, RecvTopic, RuntimeStep, SLOW_TIMEOUT_MS, StepKind,
    own_message, progress_value, topic,
};
use super::workload::{Effect, Workload};

mod composition;

pub use composition::{CODE_ENV, Code};

/// The kind the runtimes register (the hand-driven workload's kind too: a runtime must leave
/// the executions it did not start alone).
pub use super::plan::EXECUTION_KIND as RUNTIME_KIND;

/// The version the runtimes register.
pub const RUNTIME_VERSION: u32 = 1;

/// What a completed runtime execution returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeOutput {
    /// How many steps its plan has.
    pub steps: u64,
    /// The acknowledgement records of every outcome its steps returned (in the last run, which
    /// replays the earlier ones'), for whoever observes the end: once the execution has ended,
    /// every one of them is durable.
    #[serde(default)]
    pub acks: Vec<Vec<String>>,
}

/// Acknowledges the outcomes an execution's end reports (its output's, or the details of its
/// planned failure), then the end itself as `F <execution> <status>`.
///
/// # Errors
/// The end's details are not acknowledgement records, or the log cannot be written.
pub fn ack_end(
    workload: &Workload,
    id: Uuid,
    status: &str,
    acks: &[Vec<String>],
) -> std::io::Result<()> {
    for record in acks {
        let fields: Vec<&str> = record.iter().map(String::as_str).collect();
        workload.ack(&fields)?;
    }
    workload.ack(&["F", &id.to_string(), status])
}

/// The error message of an execution that ended at its planned fatal step.
pub const FATAL_MESSAGE: &str = "planned fatal step";

/// What an `M` record says of a receive that timed out.
pub const TIMED_OUT: &str = "-";

/// Step outcomes returned to the workflow but not yet acknowledged, and every outcome so far.
#[derive(Debug, Clone)]
struct PendingAcks {
    workload: Arc<Workload>,
    records: Arc<Mutex<Vec<Vec<String>>>>,
    all: Arc<Mutex<Vec<Vec<String>>>>,
}

impl PendingAcks {
    fn push(&self, fields: &[&str]) {
        let record: Vec<String> = fields.iter().map(|field| (*field).to_owned()).collect();
        self.all
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record.clone());
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
    }

    /// Every outcome the run has seen.
    fn all(&self) -> Vec<Vec<String>> {
        self.all
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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
/// The planned fatal step's failure ([`FATAL_MESSAGE`]); a step that returned what its plan
/// rules out (another value than its effect, a message on a silent topic, no message where
/// its own was waiting): the execution then fails, and the checker reports its end as wrong;
/// or any runtime error, which the runtime acts on whatever this returns.
pub async fn workflow(
    workload: Arc<Workload>,
    context: WorkflowContext,
    input: PlanInput,
) -> Result<RuntimeOutput, WorkflowError> {
    run_plan(workload, context, input, None).await
}

/// As [`workflow`], but the process aborts inside plan step `abort_at` (which must be an
/// effect step), right after its effect: the failpoint matrix's runtime orphan maker.
///
/// # Errors
/// As [`workflow`].
pub async fn workflow_aborting_at(
    abort_at: usize,
    workload: Arc<Workload>,
    context: WorkflowContext,
    input: PlanInput,
) -> Result<RuntimeOutput, WorkflowError> {
    run_plan(workload, context, input, Some(abort_at)).await
}

async fn run_plan(
    workload: Arc<Workload>,
    context: WorkflowContext,
    input: PlanInput,
    abort_at: Option<usize>,
) -> Result<RuntimeOutput, WorkflowError> {
    if !input.shape.is_runtime() {
        return Err(WorkflowError::new("not a runtime plan"));
    }
    let mut plan = ExecutionPlan::from_input(input);
    // A child's id derives from its parent's, a fork's is new: the plan's is the top-level
    // execution's.
    plan.id = context.id();
    let mut run = Run {
        code: Code::of_process(),
        acks: PendingAcks {
            workload: Arc::clone(&workload),
            records: Arc::default(),
            all: Arc::default(),
        },
        journal_seqs: plan.journal_seqs(),
        id: plan.id.to_string(),
        workload,
        context,
        plan,
        abort_at,
    };
    for seq in 0..run.plan.steps.len() {
        let ran = match run.plan.steps[seq].kind {
            StepKind::Runtime(step) => run.runtime_step(seq, step).await,
            _ => run.effect_step(seq).await,
        };
        ran.map_err(|stopped| run.observe(seq, stopped))?;
    }
    Ok(RuntimeOutput {
        steps: run.plan.steps.len() as u64,
        acks: run.acks.all(),
    })
}

/// The closure of an idempotent or guarded step: acknowledges every pending outcome (all
/// durable once such a closure runs), then makes `effect` under `key`.
async fn keyed_effect(
    acks: PendingAcks,
    effect: Effect,
    key: StepKey,
) -> Result<String, StepError> {
    acks.flush()
        .map_err(|error| StepError::fatal(format!("ack write failed: {error}")))?;
    effect.run_keyed(key).await
}

/// Why a step stopped the workflow.
enum Stopped {
    /// A runtime error (the run is asked to stop, a step's own failure, storage, ...).
    Runtime(Error),
    /// The workflow's own verdict: what its plan rules out happened.
    Workflow(WorkflowError),
}

impl From<Error> for Stopped {
    fn from(error: Error) -> Self {
        Self::Runtime(error)
    }
}

/// One run of a plan.
struct Run {
    workload: Arc<Workload>,
    context: WorkflowContext,
    plan: ExecutionPlan,
    journal_seqs: Vec<u32>,
    id: String,
    acks: PendingAcks,
    /// The plan step inside which the process aborts, after the effect.
    abort_at: Option<usize>,
    /// Whether this process runs the code with the patch.
    code: Code,
}

impl Run {
    /// Passes on why step `seq` stopped the workflow; when it is because the run was asked to
    /// stop (a cancel request, a deadline), first appends `O <execution> <seq>`: no step from
    /// that one on may make an effect after it.
    fn observe(&self, seq: usize, stopped: Stopped) -> WorkflowError {
        match stopped {
            Stopped::Runtime(error) => {
                if matches!(
                    error,
                    Error::Cancelled { .. }
                        | Error::Journal(durably_journal::Error::CancelRequested { .. })
                ) {
                    let seq = self.journal_seqs[seq].to_string();
                    if let Err(failed) = self.workload.ack(&["O", &self.id, &seq]) {
                        return WorkflowError::new(format!("ack write failed: {failed}"));
                    }
                }
                error.into()
            }
            Stopped::Workflow(error) => error,
        }
    }

    /// A step with an effect in the ledger: pure, idempotent, fatal, guarded, or slow.
    async fn effect_step(&self, seq: usize) -> Result<(), Stopped> {
        let step = &self.plan.steps[seq];
        let abort = (self.abort_at == Some(seq)).then_some(true);
        let effect = self
            .workload
            .effect_at(&self.plan, seq, self.journal_seqs[seq], abort);
        let expected = effect.value().to_owned();
        let keyed = |key| keyed_effect(self.acks.clone(), effect.clone(), key);
        let context = &self.context;
        let slow = context
            .step(&step.name)
            .timeout(Duration::from_millis(SLOW_TIMEOUT_MS));
        let outcome = match step.kind {
            StepKind::Idempotent { .. } | StepKind::Fatal => context
                .idempotent(&step.name, keyed)
                .await
                .map(Guarded::Done),
            StepKind::Guarded(policy) => {
                let policy = self.workload.policy(policy);
                context.guarded(&step.name, policy, keyed).await
            }
            StepKind::Runtime(RuntimeStep::Slow { policy: None }) => {
                slow.idempotent(keyed).await.map(Guarded::Done)
            }
            StepKind::Runtime(RuntimeStep::Slow {
                policy: Some(policy),
            }) => slow.guarded(self.workload.policy(policy), keyed).await,
            _ => context
                .pure(&step.name, || effect.clone().run_pure())
                .await
                .map(Guarded::Done),
        };
        let journal_seq = self.journal_seqs[seq].to_string();
        match outcome {
            Ok(Guarded::Done(value)) if value == expected => {
                self.acks
                    .push(&["A", &self.id, &journal_seq, "done", &value]);
                Ok(())
            }
            Ok(Guarded::Done(value)) => Err(Stopped::Workflow(WorkflowError::new(format!(
                "step {seq} returned {value:?}, not {expected:?}"
            )))),
            Ok(Guarded::Skipped(_)) => {
                self.acks
                    .push(&["A", &self.id, &journal_seq, "skipped", "-"]);
                Ok(())
            }
            Err(Error::Journal(durably_journal::Error::StepFailed { .. }))
                if step.kind == StepKind::Fatal =>
            {
                let mut error = WorkflowError::new(FATAL_MESSAGE);
                error.details = serde_json::to_value(self.acks.all()).ok();
                Err(Stopped::Workflow(error))
            }
            Err(error) => Err(Stopped::Runtime(error)),
        }
    }

    /// A step of the runtime's own: a timer, a receive, a self-send, a published event; or a
    /// slow step, which has an effect.
    async fn runtime_step(&mut self, seq: usize, step: RuntimeStep) -> Result<(), Stopped> {
        let name = self.plan.steps[seq].name.clone();
        let topic = topic(StepKind::Runtime(step), seq).unwrap_or_default();
        match step {
            RuntimeStep::Slow { .. } => self.effect_step(seq).await,
            RuntimeStep::Parallel { guarded, first } => {
                self.parallel_step(seq, guarded, first).await
            }
            RuntimeStep::Children { count } => self.children_step(count).await,
            RuntimeStep::Patch => self.patch_step(seq).await,
            RuntimeStep::Sleep { ms } => {
                self.context.sleep(&name, Duration::from_millis(ms)).await?;
                // When it returned, but acknowledged only once the timer's step is durable:
                // until then a run may lose it and record another wake time.
                let seq = self.journal_seqs[seq].to_string();
                let now = Utc::now().timestamp_millis().to_string();
                self.acks.push(&["T", &self.id, &seq, &now]);
                Ok(())
            }
            RuntimeStep::Recv {
                topic: expected,
                timeout_ms,
            } => {
                let timeout = Duration::from_millis(timeout_ms);
                let received = self.context.recv::<String>(&topic, timeout).await?;
                let recv_seq = (self.journal_seqs[seq] + 1).to_string();
                let word = received.as_deref().unwrap_or(TIMED_OUT);
                self.acks.push(&["M", &self.id, &recv_seq, word]);
                let unexpected = match (expected, received) {
                    (RecvTopic::Silent, Some(_)) => {
                        format!("a message arrived on the silent topic {topic}")
                    }
                    (RecvTopic::Own(sent_at), received)
                        if received.as_deref()
                            != Some(&own_message(self.plan.input.index, sent_at)) =>
                    {
                        format!("the receive on {topic} did not get the execution's own message")
                    }
                    _ => return Ok(()),
                };
                Err(Stopped::Workflow(WorkflowError::new(unexpected)))
            }
            RuntimeStep::SendOwn => {
                let own = own_message(self.plan.input.index, seq);
                let id = self.context.id();
                Ok(self.context.send(id, &topic, &own).await?)
            }
            RuntimeStep::SetEvent => {
                let value = progress_value(self.plan.input.index, seq);
                Ok(self.context.set_event(PROGRESS_EVENT, &value).await?)
            }
        }
    }
}
