//! `children`: 20 parents (5 with `--quick`), each fanning out to 100 child executions of 5
//! idempotent steps: a parent starts all 100 (`start_child`, one step each) and then awaits
//! each in turn (`child_result`), parking while its next child runs. The parents are started at
//! once on a runtime limited to 64 executions running at once, which runs parents and children
//! alike; timed from the first start to the last parent's result. One op is a workflow, parents
//! and children counted.
//!
//! The reference is `workflows` at concurrency 64: as many workflows of 5 idempotent steps as
//! there are children, run with `Runtime::run` from 64 tasks on a fresh journal, measured just
//! before and just after; the issue asks the children for at least 0.8 of their mean, in
//! workflows per second.

use std::path::Path;
use std::time::Instant;

use durably::runtime::{ChildOptions, StartOptions, WorkflowContext, WorkflowError};

use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::scenarios::runtime_load::{
    self, CONCURRENCY, Input, KIND, Load, Occupancy, StepSamples,
};
use crate::scenarios::{WriterSnapshot, batching_note, count};

/// The parent's workflow kind.
const PARENT_KIND: &str = "bench-parent";

/// Children per parent.
const CHILDREN: u32 = 100;

/// Steps per child.
const STEPS: u32 = 5;

/// The target: workflows per second over the reference's.
const TARGET_RATIO: f64 = 0.8;

/// The parent: starts `children` children of [`KIND`] with [`STEPS`] idempotent steps each,
/// then awaits each, and returns how many steps they ran.
async fn parent(context: WorkflowContext, children: u32) -> Result<u32, WorkflowError> {
    let input: Input = (STEPS, false);
    let mut handles = Vec::with_capacity(children as usize);
    for _ in 0..children {
        handles.push(
            context
                .start_child::<Input, u32>(KIND, &input, ChildOptions::default())
                .await?,
        );
    }
    let mut steps = 0;
    for handle in handles {
        steps += handle.result(&context).await?;
    }
    Ok(steps)
}

/// Runs the reference, the parents, and the reference again.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let parents: u32 = if context.quick { 5 } else { 20 };
    let children = parents * CHILDREN;
    let load = Load {
        workflows: children,
        steps: STEPS,
        guarded: false,
    };
    let before = runtime_load::reference(context, &dir.join("reference-before.db"), load).await?;
    let journal = context.journal(&dir.join("children.db"))?;
    let samples = StepSamples::default();
    let runtime = runtime_load::builder(journal.clone(), &samples, None)
        .register(PARENT_KIND, 1, parent)
        .start()
        .await?;
    let writer_before = WriterSnapshot::take(&journal);
    let occupancy = Occupancy::start(&journal);
    let began = Instant::now();
    let mut handles = Vec::with_capacity(parents as usize);
    for _ in 0..parents {
        handles.push(
            runtime
                .start::<u32, u32>(
                    PARENT_KIND,
                    context.new_id(),
                    &CHILDREN,
                    StartOptions::default(),
                )
                .await?,
        );
    }
    for handle in handles {
        let steps = handle.result().await?;
        if steps != CHILDREN * STEPS {
            return Err(BenchError::Unexpected(format!(
                "parent {} counted {steps} child steps, not {}",
                handle.id(),
                CHILDREN * STEPS
            )));
        }
    }
    let elapsed = began.elapsed();
    let mean_running = occupancy.mean().await?;
    let batching = batching_note(&journal, writer_before);
    runtime.shutdown();
    let parks = count(
        &journal,
        "SELECT count(*) FROM events WHERE kind = 'parked'",
    )?;
    let after = runtime_load::reference(context, &dir.join("reference-after.db"), load).await?;
    let workflows = u64::from(parents + children);
    let workflows_per_s = workflows as f64 / elapsed.as_secs_f64();
    let per_workflow = |steps_per_s: f64| steps_per_s / f64::from(STEPS);
    let reference = f64::midpoint(
        per_workflow(before.steps_per_s),
        per_workflow(after.steps_per_s),
    );
    let ratio = workflows_per_s / reference;
    let verdict = if ratio >= TARGET_RATIO {
        "meets"
    } else {
        "MISSES"
    };
    Ok(Outcome {
        ops: workflows,
        elapsed,
        latencies: samples.take(),
        notes: vec![
            format!(
                "{parents} parents x {CHILDREN} children x {STEPS} idempotent steps, runtime \
                 concurrency {CONCURRENCY}: {workflows_per_s:.0} workflows/s counting parents \
                 and children, {parks} parks of awaiting parents; first start to last result \
                 {:.2} s",
                elapsed.as_secs_f64()
            ),
            format!(
                "reference, `workflows` at concurrency {CONCURRENCY}: {children} workflows of \
                 {STEPS} idempotent steps run with Runtime::run on a fresh journal: {:.0} \
                 workflows/s before, {:.0} after; the children ran at {ratio:.2} of their mean, \
                 which {verdict} the {TARGET_RATIO} target",
                per_workflow(before.steps_per_s),
                per_workflow(after.steps_per_s)
            ),
            format!(
                "executions running at once, on average: {mean_running:.1} here, {:.1} and \
                 {:.1} in the references",
                before.mean_running, after.mean_running
            ),
            format!("the children's {batching}"),
            format!("the first reference's {}", before.batching),
        ],
        peak_rss_kib_elsewhere: None,
    })
}
