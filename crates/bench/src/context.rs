//! The run's settings and the loop around each scenario: a baseline before and after it, the
//! peak-RSS reset, and the printed row.

use std::path::{Path, PathBuf};
use std::time::Duration;

use durably::{Durability, Journal};

use crate::args::{ApiArg, Args, EffectArg, IdsArg, ScenarioName};
use crate::baseline;
use crate::error::{BenchError, Result};
use crate::report::{Outcome, Row};
use crate::rss;
use crate::scenarios;

/// Settings every scenario reads.
#[derive(Debug, Clone)]
pub struct Context {
    /// The directory scratch directories are made in.
    pub root: PathBuf,
    /// The journal's durability.
    pub durability: Durability,
    /// `--quick`.
    pub quick: bool,
    /// How long a timed scenario runs.
    pub run_time: Duration,
    /// How long each baseline measurement runs.
    pub baseline_time: Duration,
    /// `--concurrency`, when given.
    pub concurrency: Option<usize>,
    /// `workflows`: executions, steps each, and the kind of step.
    pub workflow_executions: u64,
    /// `workflows`: steps per execution.
    pub workflow_steps: u32,
    /// `workflows`: the kind of step.
    pub workflow_effect: EffectArg,
    /// `workflows`: through the runtime or the journal.
    pub workflow_api: ApiArg,
    /// `replay`: steps to replay.
    pub replay_steps: u32,
    /// `resume-memory`: steps of the resumed execution.
    pub resume_steps: u32,
    /// `scale`: executions to pre-fill.
    pub scale_executions: u64,
    /// `scale`: steps per pre-filled execution.
    pub scale_steps_per_execution: u32,
    /// `multiprocess`: processes.
    pub processes: u32,
    /// How new executions are named.
    pub execution_ids: IdsArg,
}

impl Context {
    /// The settings of this run, with `--quick` defaults applied.
    pub fn new(args: &Args) -> Result<Self> {
        let root = args.dir.clone().unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&root)
            .map_err(|source| BenchError::io("create the scratch directory", &root, source))?;
        let quick = args.quick;
        let pick = |given: Option<f64>, full: f64, quick_value: f64| {
            Duration::from_secs_f64(
                given
                    .unwrap_or(if quick { quick_value } else { full })
                    .max(0.05),
            )
        };
        Ok(Self {
            root,
            durability: args.durability.into(),
            quick,
            run_time: pick(args.seconds, 5.0, 1.0),
            baseline_time: pick(args.baseline_seconds, 2.0, 0.5),
            concurrency: args.concurrency,
            workflow_executions: args.executions.max(1),
            workflow_steps: args.steps,
            workflow_effect: args.effect,
            workflow_api: args.api,
            replay_steps: args.replay_steps,
            resume_steps: args
                .resume_steps
                .unwrap_or(if quick { 100_000 } else { 1_000_000 })
                .max(1),
            scale_executions: args
                .scale_executions
                .unwrap_or(if quick { 20_000 } else { 1_000_000 })
                .max(1),
            scale_steps_per_execution: args.scale_steps_per_execution,
            processes: args.processes.max(1),
            execution_ids: args.execution_ids,
        })
    }

    /// Prints what this run is and where it runs.
    pub fn print_preamble(&self) {
        println!(
            "# durably-bench: durability={} ids={} quick={} dir={} run={:.1}s baseline={:.1}s",
            self.durability.as_str(),
            self.execution_ids.as_str(),
            self.quick,
            self.root.display(),
            self.run_time.as_secs_f64(),
            self.baseline_time.as_secs_f64()
        );
    }

    /// A new execution id, of the kind `--execution-ids` chose.
    pub fn new_id(&self) -> uuid::Uuid {
        self.execution_ids.new_id()
    }

    /// Opens a journal at `path` with this run's durability.
    pub fn journal(&self, path: &Path) -> Result<Journal> {
        Ok(Journal::builder(path).durability(self.durability).open()?)
    }

    /// Runs one scenario between two baseline measurements and prints its row.
    pub async fn run_scenario(&self, name: ScenarioName) -> Result<()> {
        let scratch = tempfile::Builder::new()
            .prefix("durably-bench-")
            .tempdir_in(&self.root)
            .map_err(|source| {
                BenchError::io("create a scratch directory in", &self.root, source)
            })?;
        let before =
            baseline::measure_async(scratch.path(), self.durability, self.baseline_time).await?;
        rss::reset_peak();
        let mut outcome = self.dispatch(name, scratch.path()).await?;
        let peak_rss_kib = rss::peak_kib();
        let after =
            baseline::measure_async(scratch.path(), self.durability, self.baseline_time).await?;
        outcome.notes.push(format!(
            "baseline commits: p99 {:.0} / {:.0} µs, longest {:.1} / {:.1} ms (before / after)",
            before.commit_p99_us,
            after.commit_p99_us,
            before.commit_max_us / 1000.0,
            after.commit_max_us / 1000.0
        ));
        Row {
            scenario: name.as_str(),
            baseline_commits_per_s: f64::midpoint(before.commits_per_s, after.commits_per_s),
            outcome,
            peak_rss_kib,
            durability: self.durability,
        }
        .print();
        Ok(())
    }

    async fn dispatch(&self, name: ScenarioName, dir: &Path) -> Result<Outcome> {
        match name {
            ScenarioName::SeqGuarded => scenarios::seq::run(self, dir, EffectArg::Guarded).await,
            ScenarioName::SeqIdempotent => {
                scenarios::seq::run(self, dir, EffectArg::Idempotent).await
            }
            ScenarioName::Concurrent => scenarios::concurrent::run(self, dir).await,
            ScenarioName::Parallel => scenarios::parallel::run(self, dir).await,
            ScenarioName::Workflows => scenarios::workflows::run(self, dir).await,
            ScenarioName::Replay => scenarios::replay::run(self, dir).await,
            ScenarioName::ResumeMemory => scenarios::resume_memory::run(self, dir).await,
            ScenarioName::Scale => scenarios::scale::run(self, dir).await,
            ScenarioName::Multiprocess => scenarios::multiprocess::run(self, dir).await,
            ScenarioName::Scheduler => scenarios::scheduler::run(self, dir).await,
            ScenarioName::Queue => scenarios::queue::run(self, dir).await,
            ScenarioName::Children => scenarios::children::run(self, dir).await,
            ScenarioName::Recovery => scenarios::recovery::run(self, dir).await,
            ScenarioName::Parked => scenarios::parked::run(self, dir).await,
            ScenarioName::TimerWake => scenarios::timer_wake::run(self, dir).await,
            ScenarioName::SendWake => scenarios::send_wake::run(self, dir).await,
        }
    }
}
