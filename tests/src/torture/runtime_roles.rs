//! The runtime's side of the torture run: worker processes that each run a [`Runtime`] (kind
//! [`RUNTIME_KIND`], queue [`QUEUE`] limited to [`QUEUE_LIMIT`] across processes and
//! [`QUEUE_PROCESS_LIMIT`] per process, and executions with no queue), start planned
//! executions and await their results; a sender process sending messages to them; a canceller
//! process cancelling them at random moments; and the final pass that brings every one of them
//! to its end.
//!
//! Every process is SIGKILLed at random moments like the hand-driven workers. What each one
//! acknowledges goes to its acknowledgement log, for the checker:
//!
//! - `F <execution> completed|failed|cancelled`: a handle's result returned that outcome;
//! - `S <receiver> <topic> <key> <value> sent|already <message id>`: a send returned;
//! - `D <execution>` before an execution with a deadline is started;
//! - `c <execution>` before a cancel is asked, `C <execution> cancelled|requested|refused|busy`
//!   after it returned (`requested`: a live process runs it and was asked to stop; `refused`:
//!   it had ended; `busy`: the journal was busy).
//!
//! Step outcomes are acknowledged by the workflow itself (see [`super::runtime_workflow`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use durably_journal::{IdempotencyKey, Journal};
use durably_runtime::{
    CancelOutcome, Client, Deadline, Error, QueueConfig, ResumeOptions, Runtime, RuntimeBuilder,
    SendOutcome, StartOptions, WorkflowError, WorkflowHandle,
};
use tokio::task::JoinSet;
use uuid::Uuid;

use super::BoxError;
use super::forks::fork_one;
use super::plan::{
    CHILD_INDEX_BASE, CHILD_QUEUE, ExecutionPlan, PARK_AFTER_MS, PlanInput, RecvTopic, RuntimeStep,
    SeededRng, Shape, StepKind, topic,
};
use super::runtime_workflow::{RUNTIME_KIND, RUNTIME_VERSION, RuntimeOutput, ack_end, workflow};
use super::workload::{OperatorLock, Workload};

/// The limited queue of the runtime workload.
pub const QUEUE: &str = "q";
/// The most executions of [`QUEUE`] running at once across every process.
pub const QUEUE_LIMIT: u32 = 3;
/// The most executions of [`QUEUE`] one process runs at once.
pub const QUEUE_PROCESS_LIMIT: u32 = 2;
/// The most executions of [`CHILD_QUEUE`] running at once across every process.
pub const CHILD_QUEUE_LIMIT: u32 = 2;
/// The most executions one runtime process runs at once, over all queues.
pub const RUNTIME_CONCURRENCY_MAX: u32 = 4;
/// Runtime executions' indexes start here, apart from the hand-driven ones (ids are derived
/// from the seed and the index).
pub const RUNTIME_INDEX_BASE: u64 = 1 << 40;
/// How often a runtime sweeps for executions of killed processes and recovers them.
const SWEEP_INTERVAL: Duration = Duration::from_millis(100);
/// Results one runtime worker awaits at once; it starts no more executions meanwhile.
const IN_FLIGHT_MAX: usize = 4;
/// Unfinished runtime executions in the journal above which no worker starts more.
const BACKLOG_MAX: u64 = 16;
/// How long a worker awaits one result before it stops waiting (someone else may end it).
const RESULT_WAIT_MAX: Duration = Duration::from_secs(2);
/// How often a runtime worker plays the operator: resolves ambiguous steps, resumes stuck
/// executions.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_millis(20);
/// How long the final pass may take to end every runtime execution.
const FINISH_MAX: Duration = Duration::from_mins(4);
/// In percent: executions started in [`QUEUE`] (the others have no queue), executions with a
/// not-before time, and executions started by two workers at once.
const QUEUED_PERCENT: u64 = 60;
const NOT_BEFORE_PERCENT: u64 = 10;
const CONTENDED_PERCENT: u64 = 10;
/// In percent: executions with a deadline, between these many milliseconds after their start.
const DEADLINE_PERCENT: u64 = 10;
const DEADLINE_MS_MIN: u64 = 20;
const DEADLINE_MS_MAX: u64 = 400;
/// In percent: the canceller's rounds that fork an ended execution.
const FORK_PERCENT: u64 = 50;
/// In percent: sends that repeat an earlier send's key (and payload).
const REPEATED_SEND_PERCENT: u64 = 20;
/// In percent: sends on [`UNRECEIVED_TOPIC`].
const UNRECEIVED_SEND_PERCENT: u64 = 10;
/// A topic no plan receives on: its messages are kept, never consumed.
const UNRECEIVED_TOPIC: &str = "unreceived";
/// The reason the canceller gives.
pub const CANCEL_REASON: &str = "torture canceller";

/// Where and when an execution is started, derived from its plan input alone, so every worker
/// that starts it asks for the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// In [`QUEUE`], or in no queue.
    pub queued: bool,
    /// Its priority in its queue.
    pub priority: i32,
    /// Not claimable for this long after its start.
    pub not_before_ms: u64,
    /// Run (`Runtime::run`, with no queue and no not-before time, so the open is deferred) by
    /// its own worker slot and the next one, at about the same time.
    pub contended: bool,
    /// A deadline this long after its start, if any: past it, the execution is cancelled
    /// with reason `timeout`.
    pub deadline_ms: Option<u64>,
}

impl Placement {
    /// The placement of the execution `input` describes.
    pub fn of(input: PlanInput) -> Self {
        let mut rng = SeededRng::new(input.seed, input.index.wrapping_add(1) << 9 | 1);
        let contended = rng.percent(CONTENDED_PERCENT);
        Self {
            queued: !contended && rng.percent(QUEUED_PERCENT),
            priority: rng.between(0, 2) as i32,
            not_before_ms: if !contended && rng.percent(NOT_BEFORE_PERCENT) {
                rng.between(1, 20)
            } else {
                0
            },
            contended,
            deadline_ms: rng
                .percent(DEADLINE_PERCENT)
                .then(|| rng.between(DEADLINE_MS_MIN, DEADLINE_MS_MAX)),
        }
    }

    /// The start options of execution `id` placed so; one with a deadline is acknowledged
    /// first (`D <execution>`), so the checker knows a `timeout` cancel of it was asked for.
    fn options(self, workload: &Workload, id: Uuid) -> std::io::Result<StartOptions> {
        let mut options = StartOptions::default().priority(self.priority);
        if self.queued {
            options = options.queue(QUEUE);
        }
        if self.not_before_ms > 0 {
            let delay = chrono::TimeDelta::milliseconds(self.not_before_ms as i64);
            options = options.not_before(chrono::Utc::now() + delay);
        }
        if let Some(deadline_ms) = self.deadline_ms {
            workload.ack(&["D", &id.to_string()])?;
            options = options.deadline(Deadline::In(Duration::from_millis(deadline_ms)));
        }
        Ok(options)
    }
}

/// The input of runtime execution `number` of worker slot `slot` of `slots`.
fn input(seed: u64, slot: u64, slots: u64, number: u64) -> PlanInput {
    PlanInput {
        seed,
        index: RUNTIME_INDEX_BASE + number * slots + slot,
        slot,
        shape: Shape::Runtime,
    }
}

/// Starts this process's runtime on the workload's journal, serving [`RUNTIME_KIND`].
///
/// # Errors
/// As [`durably_runtime::RuntimeBuilder::start`].
pub async fn start_runtime(workload: &Arc<Workload>) -> Result<Runtime, BoxError> {
    Ok(runtime_builder(workload).start().await?)
}

/// The torture runtime's configuration, for a caller that registers more before it starts.
pub fn runtime_builder(workload: &Arc<Workload>) -> RuntimeBuilder {
    let running = Arc::clone(workload);
    Runtime::builder(workload.journal().clone())
        .register(RUNTIME_KIND, RUNTIME_VERSION, move |context, input| {
            workflow(Arc::clone(&running), context, input)
        })
        .queue(
            QUEUE,
            QueueConfig {
                concurrency_max: Some(QUEUE_LIMIT),
                process_concurrency_max: Some(QUEUE_PROCESS_LIMIT),
            },
        )
        .queue(
            CHILD_QUEUE,
            QueueConfig {
                concurrency_max: Some(CHILD_QUEUE_LIMIT),
                process_concurrency_max: None,
            },
        )
        .concurrency_max(RUNTIME_CONCURRENCY_MAX)
        .sweep_interval(SWEEP_INTERVAL)
        .park_after(Duration::from_millis(PARK_AFTER_MS))
}

/// A runtime worker: runs a runtime, starts planned executions of its slot and awaits their
/// results (or runs them in its own task, contended ones together with the next slot), and
/// plays the operator for runtime executions, until it is killed.
///
/// # Errors
/// A runtime error the workload never expects, or an acknowledgement log error.
pub async fn run_worker(
    workload: Arc<Workload>,
    seed: u64,
    slot: u64,
    slots: u64,
) -> Result<(), BoxError> {
    let runtime = start_runtime(&workload).await?;
    let mut number = next_number(&workload, slot, slots)?;
    let mut awaiting = JoinSet::new();
    let mut housekeeping_at = Instant::now();
    loop {
        if Instant::now() >= housekeeping_at {
            housekeeping(&workload, &runtime).await?;
            housekeeping_at = Instant::now() + HOUSEKEEPING_INTERVAL;
        }
        if awaiting.len() >= IN_FLIGHT_MAX || backlog(workload.journal())? >= BACKLOG_MAX {
            match tokio::time::timeout(HOUSEKEEPING_INTERVAL, awaiting.join_next()).await {
                Ok(Some(joined)) => joined??,
                Ok(None) => tokio::time::sleep(HOUSEKEEPING_INTERVAL).await,
                Err(_) => {}
            }
            continue;
        }
        // A contended execution is run by its own slot and by the next one, at the same number.
        let mut inputs = vec![input(seed, slot, slots, number)];
        let previous = input(seed, (slot + slots - 1) % slots, slots, number);
        if slots > 1 && Placement::of(previous).contended {
            inputs.push(previous);
        }
        for input in inputs {
            if Placement::of(input).contended {
                awaiting.spawn(run(runtime.clone(), Arc::clone(&workload), input));
            } else if let Some(handle) = start(&workload, &runtime, input).await? {
                awaiting.spawn(await_outcome(
                    Arc::clone(&workload),
                    handle,
                    RESULT_WAIT_MAX,
                ));
            }
        }
        number += 1;
    }
}

/// The slot's next fresh execution number: after the highest it has started so far.
fn next_number(workload: &Workload, slot: u64, slots: u64) -> Result<u64, BoxError> {
    let highest: Option<i64> = workload.journal().read(|conn| {
        Ok(conn.query_row(
            "SELECT max(CAST(input ->> 'index' AS BIGINT)) FROM executions
             WHERE kind = ?1 AND (input ->> 'shape') = 'runtime'
               AND CAST(input ->> 'slot' AS BIGINT) = ?2 AND CAST(input ->> 'index' AS BIGINT) < ?3",
            durably_db::params![RUNTIME_KIND, slot as i64, CHILD_INDEX_BASE as i64],
            |row| row.get(0),
        )?)
    })?;
    Ok(highest.map_or(0, |highest| {
        (highest as u64 - RUNTIME_INDEX_BASE - slot) / slots + 1
    }))
}

/// Runs the execution `input` describes in this task (`Runtime::run`: the deferred open races
/// the other slot's run of it) and acknowledges its end.
async fn run(runtime: Runtime, workload: Arc<Workload>, input: PlanInput) -> Result<(), BoxError> {
    let id = ExecutionPlan::from_input(input).id;
    let options = Placement::of(input).options(&workload, id)?;
    let ran = runtime
        .run::<PlanInput, RuntimeOutput>(RUNTIME_KIND, id, &input, options)
        .await;
    ack_result(&workload, id, ran)
}

/// Starts the execution `input` describes; `None` when the journal was busy.
async fn start(
    workload: &Workload,
    runtime: &Runtime,
    input: PlanInput,
) -> Result<Option<WorkflowHandle<RuntimeOutput>>, BoxError> {
    let id = ExecutionPlan::from_input(input).id;
    let options = Placement::of(input).options(workload, id)?;
    match runtime.start(RUNTIME_KIND, id, &input, options).await {
        Ok(handle) => Ok(Some(handle)),
        Err(error) if error.is_retryable() => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// Awaits an execution's result for at most `wait_max` and acknowledges the outcome.
///
/// # Errors
/// A runtime error the workload never expects, or an acknowledgement log error.
pub async fn await_outcome(
    workload: Arc<Workload>,
    handle: WorkflowHandle<RuntimeOutput>,
    wait_max: Duration,
) -> Result<(), BoxError> {
    let Ok(result) = tokio::time::timeout(wait_max, handle.result()).await else {
        return Ok(());
    };
    ack_result(&workload, handle.id(), result)
}

/// Acknowledges what an execution's result (from a handle or a `run`) says: its outcomes and
/// its end. Nothing for an error that says nothing of the end (a busy journal).
///
/// # Errors
/// A runtime error the workload never expects, or an acknowledgement log error.
pub fn ack_result(
    workload: &Workload,
    id: Uuid,
    result: durably_runtime::Result<RuntimeOutput>,
) -> Result<(), BoxError> {
    match result {
        Ok(output) => ack_end(workload, id, "completed", &output.acks)?,
        Err(Error::WorkflowFailed { error, .. }) => {
            let error: Option<WorkflowError> = error.map(|error| error.decode()).transpose()?;
            let acks = match error.and_then(|error| error.details) {
                // A step timeout's failure, which the operator resumes: not the end.
                Some(details) if details.is_object() => return Ok(()),
                Some(details) => serde_json::from_value(details)?,
                None => Vec::new(),
            };
            ack_end(workload, id, "failed", &acks)?;
        }
        Err(Error::Cancelled { .. }) => ack_end(workload, id, "cancelled", &[])?,
        Err(error) if error.is_retryable() => {}
        Err(error) => return Err(error.into()),
    }
    Ok(())
}

/// Plays the operator for runtime executions: resolves every step awaiting an operator (see
/// [`Workload::operate`]) and resumes every stuck execution.
///
/// # Errors
/// A journal or runtime error the workload never expects.
pub async fn housekeeping(workload: &Workload, client: &Client) -> Result<(), BoxError> {
    let runtime_ids: HashSet<Uuid> = runtime_executions(workload.journal(), AWAITING_OR_STUCK)?
        .into_iter()
        .collect();
    for step in workload.journal().awaiting_operator()? {
        if runtime_ids.contains(&step.execution_id) {
            let key = IdempotencyKey::derive(step.execution_id, step.seq, &step.step);
            workload.operate(step.execution_id, step.seq, key).await?;
        }
    }
    for id in runtime_executions(workload.journal(), RESUMABLE)? {
        // Only what is still resumable under the operator lock: a resume also reopens a
        // cancelled execution, and the canceller may have cancelled it since.
        let Some(_operator) = OperatorLock::acquire(workload.dir())? else {
            return Ok(());
        };
        if !is_runtime_execution(workload.journal(), id, RESUMABLE)? {
            continue;
        }
        match client.resume(id, ResumeOptions::default()).await {
            Ok(()) | Err(Error::NotResumable { .. }) => {}
            Err(error) if error.is_retryable() => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

const AWAITING_OR_STUCK: &str = "status IN ('awaiting_operator', 'stuck')";
const UNFINISHED: &str = "status NOT IN ('completed', 'failed', 'cancelled')";
/// What the operator resumes: stuck executions, and those a step timeout failed, unless a
/// cancel was asked of them (it stands: the run failed before it saw the request).
const RESUMABLE: &str = "status = 'stuck'
    OR (status = 'failed' AND (status_detail ->> 'reason') = 'step_timeout'
        AND cancel_requested_at IS NULL)";
/// What the final pass waits for: the unfinished executions and the resumable ones.
const NOT_ENDED: &str = "status NOT IN ('completed', 'failed', 'cancelled')
    OR (status = 'failed' AND (status_detail ->> 'reason') = 'step_timeout'
        AND cancel_requested_at IS NULL)";

/// The runtime executions of the torture kind whose row satisfies `condition` (SQL over
/// `executions`), in start order.
fn runtime_executions(journal: &Journal, condition: &str) -> Result<Vec<Uuid>, BoxError> {
    let ids: Vec<String> = journal.read(|conn| {
        let mut statement = conn.prepare(&format!(
            "SELECT e.execution_id FROM executions e
               JOIN runtime_executions r ON r.execution_id = e.execution_id
             WHERE e.kind = ?1 AND ({condition}) ORDER BY e.id"
        ))?;
        let rows = statement.query_map([RUNTIME_KIND], |row| row.get(0))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    })?;
    Ok(ids.iter().map(|id| id.parse()).collect::<Result<_, _>>()?)
}

/// Whether execution `id` is a runtime execution of the torture kind whose row satisfies
/// `condition`.
fn is_runtime_execution(journal: &Journal, id: Uuid, condition: &str) -> Result<bool, BoxError> {
    Ok(runtime_executions(
        journal,
        &format!("e.execution_id = '{id}' AND ({condition})"),
    )?
    .contains(&id))
}

/// How many runtime executions are unfinished.
fn backlog(journal: &Journal) -> Result<u64, BoxError> {
    Ok(journal.read(|conn| {
        Ok(conn.query_row(
            &format!("SELECT count(*) FROM executions WHERE kind = ?1 AND {UNFINISHED}"),
            [RUNTIME_KIND],
            |row| row.get::<_, i64>(0),
        )?)
    })? as u64)
}

/// A random unfinished runtime execution, if there is one.
fn random_unfinished(journal: &Journal, rng: &mut SeededRng) -> Result<Option<Uuid>, BoxError> {
    let unfinished = runtime_executions(journal, UNFINISHED)?;
    if unfinished.is_empty() {
        return Ok(None);
    }
    let pick = rng.between(0, unfinished.len() as u64 - 1) as usize;
    Ok(Some(unfinished[pick]))
}

/// A random unfinished runtime execution and the topics its plan receives messages from the
/// sender on.
fn random_receiver(
    journal: &Journal,
    rng: &mut SeededRng,
) -> Result<Option<(Uuid, Vec<String>)>, BoxError> {
    let Some(id) = random_unfinished(journal, rng)? else {
        return Ok(None);
    };
    let Some(record) = journal.get(id)? else {
        return Ok(None);
    };
    let plan = ExecutionPlan::from_input(record.input.decode()?);
    Ok(Some((id, sent_topics(&plan))))
}

/// The topics `plan` receives messages from the sender (or the driver) on.
pub fn sent_topics(plan: &ExecutionPlan) -> Vec<String> {
    plan.steps
        .iter()
        .enumerate()
        .filter(|(_, step)| {
            matches!(
                step.kind,
                StepKind::Runtime(RuntimeStep::Recv {
                    topic: RecvTopic::Sent,
                    ..
                })
            )
        })
        .filter_map(|(seq, step)| topic(step.kind, seq))
        .collect()
}

/// A generator for a process of a role that may be restarted: the seed, the role and the
/// process id, so a restarted process does not repeat its predecessor's choices.
fn process_rng(seed: u64, role: u64) -> SeededRng {
    SeededRng::new(seed, role << 32 | u64::from(std::process::id()))
}

/// A sender: sends messages to random unfinished runtime executions on a topic their plan
/// receives on (or, one time in ten, on a topic nobody receives), with an idempotency key
/// each; one send in five repeats an earlier key (with its payload), which must deliver
/// nothing new. Until it is killed.
///
/// # Errors
/// A runtime error the workload never expects, or an acknowledgement log error.
pub async fn run_sender(workload: Arc<Workload>, seed: u64) -> Result<(), BoxError> {
    let client = Client::new(workload.journal().clone()).await?;
    let mut rng = process_rng(seed, 0x5e4d);
    let mut sent: Vec<(Uuid, String, String)> = Vec::new();
    for number in 0_u64.. {
        let pause = rng.between(2, 10);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let repeat = !sent.is_empty() && rng.percent(REPEATED_SEND_PERCENT);
        let (to, topic, key) = if repeat {
            sent[rng.between(0, sent.len() as u64 - 1) as usize].clone()
        } else {
            let Some((to, topics)) = random_receiver(workload.journal(), &mut rng)? else {
                continue;
            };
            let topic = if topics.is_empty() || rng.percent(UNRECEIVED_SEND_PERCENT) {
                UNRECEIVED_TOPIC.to_owned()
            } else {
                topics[rng.between(0, topics.len() as u64 - 1) as usize].clone()
            };
            (to, topic, format!("k{}-{number}", std::process::id()))
        };
        if !send_acked(&workload, &client, to, &topic, &key).await? {
            continue;
        }
        if !repeat {
            sent.push((to, topic, key));
        }
    }
    Ok(())
}

/// A canceller: cancels a random unfinished runtime execution now and then, and forks an ended
/// one half of the time (see [`super::forks`]), until it is killed. It records its intent
/// before each cancel, so the checker can tell a cancelled execution nobody asked to cancel.
///
/// # Errors
/// A journal error the workload never expects, or an acknowledgement log error.
pub async fn run_canceller(workload: Arc<Workload>, seed: u64) -> Result<(), BoxError> {
    let client = Client::new(workload.journal().clone()).await?;
    let mut rng = process_rng(seed, 0xca5c);
    loop {
        let pause = rng.between(100, 300);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if rng.percent(FORK_PERCENT) {
            fork_one(&workload, &client, &mut rng).await?;
        }
        let Some(id) = random_unfinished(workload.journal(), &mut rng)? else {
            continue;
        };
        cancel_acked(&workload, &client, id).await?;
    }
}

/// Sends `m-<key>` to `to` on `topic` with idempotency key `key` (the payload is a function of
/// the key, so a repeated key repeats its payload) and acknowledges what the send returned.
/// `false` when nothing was sent: the receiver has ended or does not exist, or the journal was
/// busy.
///
/// # Errors
/// A runtime error the workload never expects, or an acknowledgement log error.
pub async fn send_acked(
    workload: &Workload,
    client: &Client,
    to: Uuid,
    topic: &str,
    key: &str,
) -> Result<bool, BoxError> {
    let value = format!("m-{key}");
    let (outcome, message_id) = match client.send(to, topic, &value, Some(key)).await {
        Ok(SendOutcome::Sent { message_id }) => ("sent", message_id),
        Ok(SendOutcome::AlreadySent { message_id }) => ("already", message_id),
        Ok(other) => return Err(format!("unknown send outcome {other:?}").into()),
        Err(Error::ReceiverFinished { .. } | Error::ReceiverNotFound { .. }) => return Ok(false),
        Err(error) if error.is_retryable() => return Ok(false),
        Err(error) => return Err(error.into()),
    };
    let (receiver, id) = (to.to_string(), message_id.to_string());
    workload.ack(&["S", &receiver, topic, key, &value, outcome, &id])?;
    Ok(true)
}

/// Cancels execution `id` under the operator lock (skipped when the lock stays taken),
/// acknowledging the intent before and the outcome after; returns the outcome's word.
///
/// # Errors
/// A runtime error the workload never expects, or an acknowledgement log error.
pub async fn cancel_acked(
    workload: &Workload,
    client: &Client,
    id: Uuid,
) -> Result<&'static str, BoxError> {
    let Some(_operator) = OperatorLock::acquire(workload.dir())? else {
        return Ok("busy");
    };
    let execution = id.to_string();
    workload.ack(&["c", &execution])?;
    let outcome = match client.cancel(id, CANCEL_REASON).await {
        Ok(CancelOutcome::Cancelled { .. }) => "cancelled",
        Ok(CancelOutcome::Requested { .. }) => "requested",
        Ok(other) => return Err(format!("unknown cancel outcome {other:?}").into()),
        Err(Error::AlreadyEnded { .. }) => "refused",
        Err(error) if error.is_retryable() => "busy",
        Err(error) => return Err(error.into()),
    };
    workload.ack(&["C", &execution, outcome])?;
    Ok(outcome)
}

/// The final pass for runtime executions, after every other process has exited: a runtime
/// recovers and runs them, and the operator resolves and resumes, until every one has ended.
///
/// # Errors
/// A runtime error, or executions still unfinished after [`FINISH_MAX`].
pub async fn finish(workload: Arc<Workload>) -> Result<(), BoxError> {
    let runtime = start_runtime(&workload).await?;
    drain(&workload, &runtime).await?;
    runtime.shutdown();
    Ok(())
}

/// Awaits every unfinished runtime execution, which `runtime` (or another) runs, playing the
/// operator meanwhile, until every one has ended.
///
/// # Errors
/// A runtime error, or executions still unfinished after [`FINISH_MAX`].
pub async fn drain(workload: &Arc<Workload>, runtime: &Runtime) -> Result<(), BoxError> {
    let deadline = Instant::now() + FINISH_MAX;
    loop {
        housekeeping(workload, runtime).await?;
        let unfinished = runtime_executions(workload.journal(), NOT_ENDED)?;
        let Some(&first) = unfinished.first() else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "{} runtime executions are still unfinished after {FINISH_MAX:?}",
                unfinished.len()
            )
            .into());
        }
        await_outcome(
            Arc::clone(workload),
            runtime.handle(first),
            HOUSEKEEPING_INTERVAL * 10,
        )
        .await?;
    }
}
