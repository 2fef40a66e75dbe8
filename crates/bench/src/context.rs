//! The run's settings and the loop around each scenario: a baseline before and after it, the
//! peak-RSS reset, and the printed row.

use std::path::{Path, PathBuf};
use std::time::Duration;

use durably::db::Target;
use durably::{Durability, Journal};

use crate::args::{ApiArg, Args, BackendArg, EffectArg, IdsArg, ScenarioName};
use crate::baseline;
use crate::error::{BenchError, Result};
use crate::report::{Outcome, Row};
use crate::rss;
use crate::scenarios;
use crate::scratch::Scratch;

/// What `--backend postgres` says when this build has no PostgreSQL support.
pub const POSTGRES_NOT_BUILT: &str = "--backend postgres: this durably-bench was built without \
    PostgreSQL support; build it with `--features postgres`";

/// Settings every scenario reads.
#[derive(Debug, Clone)]
pub struct Context {
    /// The directory scratch directories are made in.
    pub root: PathBuf,
    /// The journal's durability.
    pub durability: Durability,
    /// `--backend postgres`: the server (`DURABLY_POSTGRES_URL`); `None` on SQLite.
    pub server: Option<Target>,
    /// `--pg-writers`, when given.
    pub pg_writers: Option<usize>,
    /// While a scenario runs on PostgreSQL, its schema: every journal it opens lives there.
    pub schema: Option<Target>,
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
        let server = match args.backend {
            BackendArg::Sqlite => None,
            BackendArg::Postgres => Some(postgres_server(args.postgres_url.as_deref())?),
        };
        Ok(Self {
            root,
            durability: args.durability.into(),
            server,
            pg_writers: args.pg_writers,
            schema: None,
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

    /// The scenarios to run: `chosen`, or every one the backend runs.
    ///
    /// # Errors
    /// [`BenchError::Setup`] for a scenario PostgreSQL does not run.
    pub fn scenarios(&self, chosen: Option<ScenarioName>) -> Result<Vec<ScenarioName>> {
        let runnable = match self.server {
            Some(_) => ScenarioName::on_postgres(),
            None => ScenarioName::all(),
        };
        match chosen {
            None => Ok(runnable.to_vec()),
            Some(name) if runnable.contains(&name) => Ok(vec![name]),
            Some(name) => Err(BenchError::Setup(format!(
                "--backend postgres runs {}; `{}` reads or writes SQLite files directly",
                runnable
                    .iter()
                    .map(|name| name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                name.as_str()
            ))),
        }
    }

    /// The backend whose baseline the ratios are against, as the `bench` line names it.
    pub fn backend_name(&self) -> &'static str {
        match self.server {
            Some(_) => "postgres",
            None => "sqlite",
        }
    }

    /// Prints what this run is and where it runs.
    pub fn print_preamble(&self) {
        let server = self
            .server
            .as_ref()
            .map_or_else(String::new, |server| format!(" server={server}"));
        println!(
            "# durably-bench: backend={}{server} durability={} ids={} quick={} dir={} run={:.1}s \
             baseline={:.1}s",
            self.backend_name(),
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

    /// Opens a journal at `path` (on PostgreSQL, in the scenario's schema instead) with this
    /// run's durability and writers.
    pub fn journal(&self, path: &Path) -> Result<Journal> {
        let target = self.schema.clone().unwrap_or_else(|| Target::from(path));
        let mut builder = Journal::builder(target).durability(self.durability);
        if let Some(workers) = self.pg_writers {
            builder = builder.pg_writers(workers);
        }
        Ok(builder.open()?)
    }

    /// Runs one scenario between two baseline measurements and prints its row.
    pub async fn run_scenario(&self, name: ScenarioName) -> Result<()> {
        let scratch = Scratch::new(&self.root, self.server.as_ref())?;
        let context = Self {
            schema: scratch.schema().cloned(),
            ..self.clone()
        };
        let baseline_at = scratch.baseline();
        let before =
            baseline::measure_async(&baseline_at, self.durability, self.baseline_time).await?;
        rss::reset_peak();
        let mut outcome = context.dispatch(name, scratch.dir()).await?;
        let peak_rss_kib = rss::peak_kib();
        let after =
            baseline::measure_async(&baseline_at, self.durability, self.baseline_time).await?;
        outcome.notes.push(format!(
            "baseline commits: p99 {:.0} / {:.0} µs, longest {:.1} / {:.1} ms (before / after)",
            before.commit_p99_us,
            after.commit_p99_us,
            before.commit_max_us / 1000.0,
            after.commit_max_us / 1000.0
        ));
        Row {
            scenario: name.as_str(),
            baseline_backend: self.backend_name(),
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

/// The server of `--backend postgres`, from `DURABLY_POSTGRES_URL` (or `--postgres-url`).
fn postgres_server(url: Option<&str>) -> Result<Target> {
    if !cfg!(feature = "postgres") {
        return Err(BenchError::Setup(POSTGRES_NOT_BUILT.to_owned()));
    }
    let Some(url) = url.filter(|url| !url.is_empty()) else {
        return Err(BenchError::Setup(
            "--backend postgres needs a server: set DURABLY_POSTGRES_URL (a private one: \
             `eval \"$(.ci/pg start)\"`)"
                .to_owned(),
        ));
    };
    match Target::from(url) {
        server @ Target::Postgres(_) => Ok(server),
        // Not shown: it may hold a password.
        Target::Sqlite(_) => Err(BenchError::Setup(
            "DURABLY_POSTGRES_URL is not a postgres:// or postgresql:// URL".to_owned(),
        )),
    }
}
