//! The runtime's part of the failpoint matrix's workload, after the hand-driven part:
//!
//! 0. a runtime orphan maker (a child process) starts a covering execution and aborts inside
//!    its second step, after the effect: the runtimes below find it interrupted and requeue it;
//! 1. two runtimes on two journal instances of the file (two lock holders, as two processes
//!    would be), both serving kind [`RUNTIME_KIND`] with the limited queue [`QUEUE`];
//! 2. an execution held back by a far not-before time receives a message from the driver and
//!    is then cancelled while queued; another one's deadline cancels it while it waits; and a
//!    third, of a kind with one step that waits at a gate, is cancelled while that step runs
//!    in a live runtime (a request), then ends `cancelled` when the step ends;
//! 3. a parent of kind [`PARENT_KIND`] starts two children of kind [`CHILD_KIND`] (one in the
//!    queue, one in none) and awaits both: each start step has exactly one child, with the
//!    derived id, and the parent gets both results;
//! 4. an execution that answers a patch, and its fork ([`super::matrix_versions`]);
//! 5. covering executions started through them, in the queue and with no queue: every step
//!    kind and policy once, a short and a parked timer, a message sent to itself and received,
//!    a receive of the driver's message (sent right after the start), a receive that times out
//!    while parked, a published event; awaited to their end while the harness plays the
//!    operator (a `Fail` step a crash left ambiguous parks its execution for it).
//!
//! Rerunning it after a crash starts nothing twice (starts are idempotent by id, the send's key
//! repeats, the cancel is refused once done) and lets recovery finish what the crash left.

use std::path::Path;
use std::sync::Arc;

use durably_journal::Durability;
use durably_runtime::{
    ChildOptions, Client, Deadline, Error, ForkOptions, Runtime, StartOptions, WorkflowContext,
    WorkflowError, child_execution_id,
};
use tokio::sync::{Notify, Semaphore};
use uuid::Uuid;

use super::BoxError;
use super::forks::fork_seqs;
use super::matrix::{open_journal, run_orphan_maker};
use super::matrix_versions::{patch_and_fork, serving_patched};
use super::plan::{ExecutionPlan, PlanInput, SeededRng, Shape};
use super::runtime_roles::{
    QUEUE, RUNTIME_INDEX_BASE, ack_result, cancel_acked, drain, runtime_builder, send_acked,
    sent_topics,
};
use super::runtime_workflow::{RUNTIME_KIND, RUNTIME_VERSION, RuntimeOutput, workflow_aborting_at};
use super::workload::Workload;

/// Covering runtime executions: the even ones in [`QUEUE`], the odd ones in no queue.
pub const RUNTIME_COVERING_EXECUTIONS: u64 = 2;
/// How far in the future the held-back execution may start (it is cancelled long before).
const HELD_BACK_DAYS: i64 = 365;
/// The runtime orphan's number (after the covering and held-back executions').
const ORPHAN_NUMBER: u64 = 10;
/// The number of the execution its deadline cancels.
const DEADLINE_NUMBER: u64 = 11;
/// Its deadline, after its start.
const DEADLINE: std::time::Duration = std::time::Duration::from_millis(40);
/// The kind of the execution cancelled while its step runs; it has no plan.
pub const VICTIM_KIND: &str = "matrix-victim";
/// How many times the victim's cancel is tried while the journal is busy.
const CANCEL_TRIES_MAX: u32 = 100;
/// The seed stream of the victim's id.
const VICTIM_STREAM: u64 = 0x0071_c714;
/// The kind of the parent of the child executions; it has no plan.
pub const PARENT_KIND: &str = "matrix-parent";
/// The kind of its children, which take no step.
pub const CHILD_KIND: &str = "matrix-child";
/// The seed stream of the parent's id.
const PARENT_STREAM: u64 = 0x00c4_11d5;
/// The plan step inside which the orphan maker aborts: the covering plan's first idempotent
/// step.
const ORPHAN_ABORT_AT: usize = 1;
/// How long the orphan maker waits for its abort before it aborts anyway.
const ORPHAN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn covering(seed: u64, number: u64) -> PlanInput {
    PlanInput {
        seed,
        index: RUNTIME_INDEX_BASE + number,
        slot: 0,
        shape: Shape::RuntimeCovering,
    }
}

/// Runs the runtime's part of the matrix workload on `workload` (whose journal is one of the
/// two instances) in the run directory `dir`.
///
/// # Errors
/// An unexpected runtime or journal error.
pub async fn run(
    workload: &Arc<Workload>,
    dir: &Path,
    seed: u64,
    durability: Durability,
) -> Result<(), BoxError> {
    run_orphan_maker(dir, seed, durability, &["runtime-orphans"])?;
    let other = Arc::new(Workload::new(open_journal(dir, durability, false)?, dir)?);
    let gate = Arc::new(Gate::closed());
    let runtimes = [
        serving_victims(workload, &gate).await?,
        serving_victims(&other, &gate).await?,
    ];
    // The orphan's receive waits for the driver's message like the others'.
    let orphan = ExecutionPlan::from_input(covering(seed, ORPHAN_NUMBER));
    send_driver_messages(workload, &runtimes[0], &orphan).await?;
    // First, so that a rerun after a crash ends them before it waits for every execution.
    held_back(workload, &runtimes[0], seed).await?;
    past_deadline(workload, &runtimes[0], seed).await?;
    cancel_running(workload, &runtimes, &gate, seed).await?;
    family(&runtimes[0], seed).await?;
    patch_and_fork(&runtimes[1], seed).await?;
    for number in 0..RUNTIME_COVERING_EXECUTIONS {
        let input = covering(seed, number);
        let mut options = StartOptions::default();
        if number % 2 == 0 {
            options = options.queue(QUEUE);
        }
        let runtime = &runtimes[(number % 2) as usize];
        start_and_send(workload, runtime, input, options).await?;
    }
    drain(workload, &runtimes[0]).await?;
    fork_covering(workload, &runtimes[0], seed).await?;
    drain(workload, &runtimes[0]).await?;
    for runtime in &runtimes {
        runtime.shutdown();
    }
    Ok(())
}

/// The runtime orphan maker: a runtime whose workflow aborts the process inside the second
/// step of the orphan's plan, after its effect. It aborts in any case once its execution has
/// ended or [`ORPHAN_WAIT`] has passed (a rerun finds the orphan recorded past that step).
///
/// # Errors
/// An unexpected runtime error; on success it does not return.
pub async fn make_orphan(dir: &Path, seed: u64, durability: Durability) -> Result<(), BoxError> {
    let workload = Arc::new(Workload::new(open_journal(dir, durability, true)?, dir)?);
    let running = Arc::clone(&workload);
    let runtime = Runtime::builder(workload.journal().clone())
        .register(RUNTIME_KIND, RUNTIME_VERSION, move |context, input| {
            workflow_aborting_at(ORPHAN_ABORT_AT, Arc::clone(&running), context, input)
        })
        .start()
        .await?;
    let input = covering(seed, ORPHAN_NUMBER);
    let id = ExecutionPlan::from_input(input).id;
    let handle = runtime
        .start::<_, RuntimeOutput>(RUNTIME_KIND, id, &input, StartOptions::default())
        .await?;
    let _ = tokio::time::timeout(ORPHAN_WAIT, handle.result()).await;
    std::process::abort();
}

/// Where the victim's step waits: it says it has started, then waits for a permit.
#[derive(Debug)]
struct Gate {
    entered: Notify,
    open: Semaphore,
}

impl Gate {
    fn closed() -> Self {
        Self {
            entered: Notify::new(),
            open: Semaphore::new(0),
        }
    }
}

/// A parent: starts a child of [`CHILD_KIND`] in [`QUEUE`] and one in no queue, then awaits
/// both and returns the sum of their results.
async fn parent(context: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    let queued = ChildOptions::default().queue(QUEUE);
    let first = context
        .start_child::<u32, u32>(CHILD_KIND, &n, queued)
        .await?;
    let second = context
        .start_child::<u32, u32>(CHILD_KIND, &(n + 1), ChildOptions::default())
        .await?;
    Ok(first.result(&context).await? + second.result(&context).await?)
}

/// A child: its input times ten. It takes no step, since the checker expects an effect in the
/// ledger for every step a workflow names; its end is its only write.
async fn child(_context: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    Ok(n * 10)
}

/// Starts the parent (idempotent by id, so a rerun after a crash awaits the same one), awaits
/// it, and checks that each of its start steps has exactly one child, with the derived id.
async fn family(client: &Client, seed: u64) -> Result<(), BoxError> {
    let mut rng = SeededRng::new(seed, PARENT_STREAM);
    let id = uuid::Builder::from_random_bytes(
        *Uuid::from_u64_pair(rng.next_u64(), rng.next_u64()).as_bytes(),
    )
    .into_uuid();
    let handle = client
        .start::<u32, u32>(PARENT_KIND, id, &4, StartOptions::default())
        .await?;
    let sum = handle.result().await?;
    if sum != 90 {
        return Err(format!("parent {id} returned {sum}, not 90").into());
    }
    let children: Vec<(u32, String)> = client.journal().read(|conn| {
        let mut statement = conn.prepare(
            "SELECT seq, child_id FROM runtime_children WHERE parent_id = ?1 ORDER BY seq",
        )?;
        let rows = statement
            .query_map([id.to_string()], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    })?;
    let expected: Vec<(u32, String)> = [0, 1]
        .into_iter()
        .map(|seq| (seq, child_execution_id(id, seq).to_string()))
        .collect();
    if children != expected {
        return Err(format!("parent {id} has children {children:?}, not {expected:?}").into());
    }
    Ok(())
}

/// A torture runtime that also serves [`VICTIM_KIND`], whose one step waits at `gate`, then
/// until its run sees it was asked to stop, so that the run ends by observing the request;
/// and [`PARENT_KIND`] and [`CHILD_KIND`].
async fn serving_victims(workload: &Arc<Workload>, gate: &Arc<Gate>) -> Result<Runtime, BoxError> {
    let gate = Arc::clone(gate);
    let runtime = serving_patched(runtime_builder(workload))
        .register(PARENT_KIND, 1, parent)
        .register(CHILD_KIND, 1, child)
        .register(VICTIM_KIND, 1, move |context: WorkflowContext, (): ()| {
            let gate = Arc::clone(&gate);
            async move {
                let signal = context.cancellation();
                context
                    .idempotent("wait at the gate", |_key| {
                        let (gate, signal) = (Arc::clone(&gate), signal.clone());
                        async move {
                            gate.entered.notify_one();
                            if let Ok(permit) = gate.open.acquire().await {
                                permit.forget();
                            }
                            signal.cancelled().await;
                            Ok(())
                        }
                    })
                    .await?;
                Ok::<_, WorkflowError>(())
            }
        })
        .start()
        .await?;
    Ok(runtime)
}

/// Cancels the victim while its step runs in a live runtime (the request is recorded, and the
/// step's result refused), then lets the step end: the run ends `cancelled`.
async fn cancel_running(
    workload: &Workload,
    runtimes: &[Runtime; 2],
    gate: &Gate,
    seed: u64,
) -> Result<(), BoxError> {
    let mut rng = SeededRng::new(seed, VICTIM_STREAM);
    let id = uuid::Builder::from_random_bytes(
        *Uuid::from_u64_pair(rng.next_u64(), rng.next_u64()).as_bytes(),
    )
    .into_uuid();
    let handle = runtimes[1]
        .start::<(), ()>(VICTIM_KIND, id, &(), StartOptions::default())
        .await?;
    // A rerun after a crash may find the step recorded: then it runs to its end unasked.
    tokio::select! {
        () = gate.entered.notified() => {}
        _ = handle.result() => return Ok(()),
    }
    // The step waits for the request to be seen: a busy journal only delays it.
    let mut tries = 0;
    while cancel_acked(workload, &runtimes[0], id).await? == "busy" {
        tries += 1;
        if tries == CANCEL_TRIES_MAX {
            return Err(format!("the victim {id} could not be cancelled").into());
        }
    }
    gate.open.add_permits(1);
    match handle.result().await {
        Ok(()) | Err(Error::Cancelled { .. }) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Forks the first covering execution (once: a rerun after a crash finds the fork) from the
/// last seq [`fork_seqs`] allows, so the fork copies its steps up to the patch point and
/// runs the rest.
async fn fork_covering(workload: &Workload, client: &Client, seed: u64) -> Result<(), BoxError> {
    let plan = ExecutionPlan::from_input(covering(seed, 0));
    let original = plan.id.to_string();
    let forked: bool = workload.journal().read(|conn| {
        Ok(conn.query_row(
            "SELECT count(*) > 0 FROM runtime_executions WHERE forked_from = ?1",
            [&original],
            |row| row.get(0),
        )?)
    })?;
    if !forked {
        let from_seq = fork_seqs(&plan).last().copied().unwrap_or_default();
        client
            .fork(plan.id, ForkOptions::from_seq(from_seq))
            .await?;
    }
    Ok(())
}

/// Starts an execution that no runtime may claim for a year with a deadline a moment away:
/// the deadline cancels it while it waits.
async fn past_deadline(workload: &Workload, client: &Client, seed: u64) -> Result<(), BoxError> {
    let input = covering(seed, DEADLINE_NUMBER);
    let id = ExecutionPlan::from_input(input).id;
    workload.ack(&["D", &id.to_string()])?;
    let options = StartOptions::default()
        .queue(QUEUE)
        .not_before(chrono::Utc::now() + chrono::TimeDelta::days(HELD_BACK_DAYS))
        .deadline(Deadline::In(DEADLINE));
    let handle = client
        .start::<_, RuntimeOutput>(RUNTIME_KIND, id, &input, options)
        .await?;
    ack_result(workload, id, handle.result().await)
}

/// Starts an execution that no runtime may claim for a year, sends it a message, and cancels
/// it while it waits in its queue.
async fn held_back(workload: &Arc<Workload>, client: &Client, seed: u64) -> Result<(), BoxError> {
    let input = covering(seed, RUNTIME_COVERING_EXECUTIONS);
    let options = StartOptions::default()
        .queue(QUEUE)
        .not_before(chrono::Utc::now() + chrono::TimeDelta::days(HELD_BACK_DAYS));
    let id = start_and_send(workload, client, input, options).await?;
    cancel_acked(workload, client, id).await?;
    Ok(())
}

/// Starts the execution `input` describes and sends it the driver's messages.
async fn start_and_send(
    workload: &Workload,
    client: &Client,
    input: PlanInput,
    options: StartOptions,
) -> Result<Uuid, BoxError> {
    let plan = ExecutionPlan::from_input(input);
    client
        .start::<_, RuntimeOutput>(RUNTIME_KIND, plan.id, &input, options)
        .await?;
    send_driver_messages(workload, client, &plan).await?;
    Ok(plan.id)
}

/// Sends `plan`'s execution a message on each topic its plan receives the driver's messages
/// on.
async fn send_driver_messages(
    workload: &Workload,
    client: &Client,
    plan: &ExecutionPlan,
) -> Result<(), BoxError> {
    for topic in sent_topics(plan) {
        let key = format!("matrix-{}-{topic}", plan.input.index);
        send_acked(workload, client, plan.id, &topic, &key).await?;
    }
    Ok(())
}
