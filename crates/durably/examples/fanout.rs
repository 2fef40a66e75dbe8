//! An agent that fans out, killed while its work is in flight, and resumed. A trip planner
//! starts a sub-agent (a child execution that drafts a packing list) and calls three tools at
//! once (flights, hotels, weather: guarded steps run together with `tokio::join!`), then
//! waits for the sub-agent.
//!
//! The example runs the planner in a worker process (itself, started again) and kills it with
//! SIGKILL once all three tools and the sub-agent are in the middle of their calls: the
//! flights and hotels providers have served their requests but their answers are not back,
//! and the weather request and the sub-agent's model call have not gone out. It then resumes
//! in its own process: the runtime's recovery at start-up puts both executions back in their
//! queue, each tool's `reconcile` policy asks its provider about the step's idempotency key
//! (flights and hotels are found and not called again; weather is not found and runs), the
//! sub-agent's model call runs again under `Retry`, and the planner finishes. It prints what
//! each provider's ledger says: every tool ran once.
//!
//! The fake providers and the worker harness are in `examples/support/`.
//!
//! ```sh
//! cargo run -p durably --example fanout -- fanout.db
//! durably --db fanout.db show ID    # the parent's steps and its child
//! ```

#[path = "support/fake_provider.rs"]
mod fake_provider;
#[path = "support/worker.rs"]
mod worker;

use durably::runtime::{ChildOptions, Runtime, WorkflowContext, WorkflowError, child_execution_id};
use durably::{Effect, Guarded, Journal, Policy, StepError, event_kind};
use fake_provider::FakeProvider;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use worker::{BoxError, Crash, Env};

/// The planner's workflow kind.
const PLANNER: &str = "trip-planner";
/// The sub-agent's workflow kind.
const PACKER: &str = "packing-list";
/// The tools, called in parallel, and whether the worker's request reaches the provider
/// before the kill.
const TOOLS: [(&str, bool); 3] = [("flights", true), ("hotels", true), ("weather", false)];
/// What every in-flight call prints in the worker; the example kills it once it has seen
/// this from the three tools and the sub-agent.
const IN_FLIGHT: &str = "in flight";

/// The planner's input.
#[derive(Clone, Serialize, Deserialize)]
struct Trip {
    destination: String,
    days: u32,
}

/// The planner's output.
#[derive(Serialize, Deserialize)]
struct Plan {
    tools: Vec<String>,
    packing_list: String,
}

/// The planner: a sub-agent and three tools at once, then the sub-agent's answer.
async fn plan_trip(ctx: WorkflowContext, trip: Trip, env: Env) -> Result<Plan, WorkflowError> {
    // The child starts with the run's next write (the tools' intents) and runs beside them,
    // in whichever process serves its kind. Its id derives from this execution's id and the
    // step's seq, so a resumed planner gets the same child back, never a second one.
    let packing = ctx
        .start_child::<_, String>(PACKER, &trip, ChildOptions::default())
        .await?;
    // Each step's seq is reserved when its method is called: here on each `call_tool`'s
    // first poll, which `join!` makes in argument order. So the seqs follow the code, not
    // which tool finishes first, and a resumed run replays them whatever order they end in.
    let [(flights, _), (hotels, _), (weather, _)] = TOOLS;
    let (flights, hotels, weather) = tokio::join!(
        call_tool(&ctx, &env, flights, &trip),
        call_tool(&ctx, &env, hotels, &trip),
        call_tool(&ctx, &env, weather, &trip),
    );
    let packing_list = ctx.child_result(packing).await?;
    Ok(Plan {
        tools: vec![flights?, hotels?, weather?],
        packing_list,
    })
}

/// One tool call: a guarded step whose provider can say whether it served a key, so after a
/// crash the step is reconciled instead of called blindly again.
async fn call_tool(
    ctx: &WorkflowContext,
    env: &Env,
    tool: &str,
    trip: &Trip,
) -> Result<String, WorkflowError> {
    let provider = FakeProvider::next_to(&env.db, tool);
    let reaches_provider = TOOLS.iter().any(|&(name, reaches)| name == tool && reaches);
    let called = ctx
        .guarded(tool, provider.reconcile(), |key| {
            let provider = &provider;
            async move {
                let in_flight = format!("tool {tool} {IN_FLIGHT}");
                if !reaches_provider {
                    env.crash_point(&format!("{in_flight}, its request not sent"))
                        .await;
                }
                let answer = format!("{tool} for {} days in {}", trip.days, trip.destination);
                let answer = provider.serve(key.idempotency_key(), &answer)?;
                env.crash_point(&format!("{in_flight}, served, its answer not back"))
                    .await;
                Ok::<_, StepError>(answer)
            }
        })
        .await?;
    done(called)
}

/// The sub-agent: one model call, guarded with `Retry` (see the agent example for why).
async fn packing_list(ctx: WorkflowContext, trip: Trip, env: Env) -> Result<String, WorkflowError> {
    let model = FakeProvider::next_to(&env.db, "model");
    let drafted = ctx
        .guarded("draft packing list", Policy::Retry, |key| {
            let (model, trip, env) = (&model, &trip, &env);
            async move {
                env.crash_point(&format!("sub-agent {IN_FLIGHT}, its model call not sent"))
                    .await;
                let list = format!("{} days of clothes for {}", trip.days, trip.destination);
                model.serve(key.idempotency_key(), &list)
            }
        })
        .await?;
    done(drafted)
}

/// A guarded step's value. Only `Policy::Skip` skips a step, and no step here uses it.
fn done<T>(outcome: Guarded<T>) -> Result<T, WorkflowError> {
    outcome
        .into_result()
        .map_err(|skipped| WorkflowError::new(skipped.to_string()))
}

/// A runtime serving both workflows, on `env`'s journal.
async fn runtime(env: Env) -> Result<Runtime, BoxError> {
    let child_env = env.clone();
    Ok(Runtime::builder(Journal::open(&env.db)?)
        .register(PLANNER, 1, move |ctx, trip| {
            plan_trip(ctx, trip, env.clone())
        })
        .register(PACKER, 1, move |ctx, trip| {
            packing_list(ctx, trip, child_env.clone())
        })
        .start()
        .await?)
}

/// The worker: starts the planner, whose calls hang at their crash points.
async fn work(env: Env, id: Uuid) -> Result<(), BoxError> {
    let trip = Trip {
        destination: "Lisbon".to_owned(),
        days: 4,
    };
    let runtime = runtime(env).await?;
    worker::start_and_wait::<_, Plan>(&runtime, PLANNER, id, &trip).await
}

/// The resumed run, in this process, and what the providers' ledgers say.
async fn resume(env: Env, id: Uuid) -> Result<(), BoxError> {
    let db = env.db.clone();
    let runtime = runtime(env).await?;
    println!(
        "resumed in this process: recovery put {} interrupted execution(s) back in their queue",
        runtime.recovery_report().requeued
    );
    let plan = runtime.handle::<Plan>(id).result().await?;
    println!(
        "execution {id} completed: {}; {}",
        plan.tools.join(", "),
        plan.packing_list
    );

    let journal = runtime.journal();
    let steps = journal.steps(id)?;
    let events = journal.events(id)?;
    for (tool, _) in TOOLS {
        let Some(step) = steps.iter().find(|step| step.name == tool) else {
            return Err(format!("the planner has no step {tool}").into());
        };
        let found = events
            .iter()
            .filter(|event| event.kind == event_kind::AMBIGUITY_RECONCILED)
            .filter(|event| event.seq == Some(step.seq))
            .filter_map(|event| event.detail.to_value().ok())
            .find_map(|detail| detail["found"].as_bool());
        let after_kill = match found {
            Some(true) => "found in its ledger after the kill, not called again",
            Some(false) => "not in its ledger after the kill, so called",
            None => "not in flight at the kill",
        };
        let served = FakeProvider::next_to(&db, tool).served(step.idempotency_key)?;
        println!("tool {tool}: {after_kill}; served {served} time(s)");
    }
    // The child's id derives from the planner's id and the seq of the step that started it.
    let Some(start) = steps
        .iter()
        .find(|step| step.name == format!("durably:child/{PACKER}"))
    else {
        return Err("the planner started no sub-agent".into());
    };
    let child = child_execution_id(id, start.seq);
    let model = FakeProvider::next_to(&db, "model");
    for step in journal.steps(child)? {
        if step.effect == Effect::Guarded {
            let served = model.served(step.idempotency_key)?;
            println!(
                "sub-agent {child}, step {}: served {served} time(s)",
                step.name
            );
        }
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let crash = Crash {
        default_db: "fanout.db",
        needle: IN_FLIGHT,
        count: TOOLS.len() + 1,
    };
    worker::main(&crash, work, resume)
}
