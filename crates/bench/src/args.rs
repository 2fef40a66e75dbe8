//! Command-line arguments.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use durably::Durability;

/// Benchmarks durably against a raw-SQLite baseline measured in the same run.
#[derive(Debug, Parser)]
#[command(name = "durably-bench", version)]
pub struct Args {
    /// Small sizes and short runs: everything finishes in under a minute.
    #[arg(long)]
    pub quick: bool,
    /// The journal's durability (and the baseline's `synchronous`, or on PostgreSQL its
    /// `synchronous_commit`).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Full)]
    pub durability: DurabilityArg,
    /// Where the journals and the baseline live: SQLite files in `--dir`, or a new schema per
    /// scenario on the PostgreSQL server `DURABLY_POSTGRES_URL` names (built with the
    /// `postgres` feature).
    #[arg(long, value_enum, default_value_t = BackendArg::Sqlite)]
    pub backend: BackendArg,
    /// The PostgreSQL server of `--backend postgres`, a `postgresql://` URL. Its value is never
    /// printed: it may hold a password.
    #[arg(long, env = "DURABLY_POSTGRES_URL", hide_env_values = true)]
    pub postgres_url: Option<String>,
    /// On PostgreSQL, the journal's writer workers (`JournalBuilder::pg_writers`; default the
    /// journal's).
    #[arg(long)]
    pub pg_writers: Option<usize>,
    /// Run only this scenario.
    #[arg(long, value_enum)]
    pub scenario: Option<ScenarioName>,
    /// Where the scratch databases go. Put it on the disk you care about: a tmpfs makes fsync
    /// free and the numbers meaningless.
    #[arg(long, env = "DURABLY_BENCH_DIR")]
    pub dir: Option<PathBuf>,
    /// Seconds each timed scenario runs (default 5, or 1 with `--quick`).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Seconds of each baseline measurement (default 2, or 0.5 with `--quick`).
    #[arg(long)]
    pub baseline_seconds: Option<f64>,
    /// Parallel executions: `concurrent` (default 64) and `workflows` (default 1).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// `workflows`: how many executions.
    #[arg(long, default_value_t = 200)]
    pub executions: u64,
    /// `workflows`: steps per execution.
    #[arg(long, default_value_t = 10)]
    pub steps: u32,
    /// `workflows`: the kind of step.
    #[arg(long, value_enum, default_value_t = EffectArg::Idempotent)]
    pub effect: EffectArg,
    /// `workflows`: drive executions through the runtime (`Runtime::run`: deferred open and
    /// write-behind) or by hand through the journal (open, steps, complete).
    #[arg(long, value_enum, default_value_t = ApiArg::Runtime)]
    pub api: ApiArg,
    /// `replay`: committed steps to replay.
    #[arg(long, default_value_t = 10_000)]
    pub replay_steps: u32,
    /// `resume-memory`: committed steps of the execution a fresh process resumes (default
    /// 1,000,000, or 100,000 with `--quick`).
    #[arg(long)]
    pub resume_steps: Option<u32>,
    /// `scale`: finalized executions in the pre-filled journal (default 1,000,000, or 20,000
    /// with `--quick`).
    #[arg(long)]
    pub scale_executions: Option<u64>,
    /// `scale`: steps per pre-filled execution.
    #[arg(long, default_value_t = 10)]
    pub scale_steps_per_execution: u32,
    /// How the scenarios name new executions: time-ordered ids (`new_execution_id`, UUID v7,
    /// the recommended default) or random ones (UUID v4), to compare the two.
    #[arg(long, value_enum, default_value_t = IdsArg::TimeOrdered)]
    pub execution_ids: IdsArg,
    /// `multiprocess`: how many processes write at once.
    #[arg(long, default_value_t = 4)]
    pub processes: u32,
    /// A hidden worker subcommand; absent when running the benchmark itself.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Hidden subcommands the harness runs in its own child processes.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// One writer process of the `multiprocess` scenario.
    #[command(hide = true)]
    MultiprocessWorker(WorkerArgs),
    /// One scheduler process of the `scheduler` scenario.
    #[command(hide = true)]
    SchedulerWorker(WorkerArgs),
    /// The resuming process of the `resume-memory` scenario.
    #[command(hide = true, name = "resume-worker")]
    Resumer(ResumeWorkerArgs),
    /// The runtime process the `recovery` scenario kills.
    #[command(hide = true)]
    RecoveryWorker(RecoveryWorkerArgs),
    /// A runtime process of the `parked` scenario.
    #[command(hide = true)]
    ParkedWorker(ParkedWorkerArgs),
    /// The runtime process of the `send-wake` scenario, whose receivers the harness wakes.
    #[command(hide = true)]
    SendWakeWorker(SendWakeWorkerArgs),
}

/// Arguments of the `send-wake` scenario's runtime process.
#[derive(Debug, clap::Args)]
pub struct SendWakeWorkerArgs {
    /// The journal file.
    #[arg(long)]
    pub db: PathBuf,
    /// How many receivers to start and park.
    #[arg(long)]
    pub receivers: u32,
}

/// Arguments of the `recovery` scenario's runtime process.
#[derive(Debug, clap::Args)]
pub struct RecoveryWorkerArgs {
    /// The journal file.
    #[arg(long)]
    pub db: PathBuf,
    /// How many workflows to start and run at once.
    #[arg(long)]
    pub workflows: u32,
    /// Idempotent steps per workflow.
    #[arg(long)]
    pub steps: u32,
}

/// Arguments of a `parked` scenario's runtime process.
#[derive(Debug, clap::Args)]
pub struct ParkedWorkerArgs {
    /// The journal file.
    #[arg(long)]
    pub db: PathBuf,
}

/// Arguments of the `resume-memory` scenario's resuming process.
#[derive(Debug, clap::Args)]
pub struct ResumeWorkerArgs {
    /// The journal file.
    #[arg(long)]
    pub db: PathBuf,
    /// The execution to resume.
    #[arg(long)]
    pub execution_id: uuid::Uuid,
    /// How many committed steps it has, all replayed.
    #[arg(long)]
    pub steps: u32,
}

/// Arguments of a worker process.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// The shared journal file.
    #[arg(long)]
    pub db: PathBuf,
    /// How long to write steps, in milliseconds.
    #[arg(long)]
    pub millis: u64,
    /// Wall-clock start (Unix epoch milliseconds), so all workers start together.
    #[arg(long)]
    pub start_at_ms: u64,
}

/// `--durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurabilityArg {
    /// `synchronous=FULL`.
    Full,
    /// `synchronous=NORMAL`.
    ProcessCrash,
}

impl From<DurabilityArg> for Durability {
    fn from(value: DurabilityArg) -> Self {
        match value {
            DurabilityArg::Full => Self::Full,
            DurabilityArg::ProcessCrash => Self::ProcessCrash,
        }
    }
}

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// SQLite files in `--dir`.
    Sqlite,
    /// A PostgreSQL server, `DURABLY_POSTGRES_URL`.
    Postgres,
}

/// `--execution-ids`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IdsArg {
    /// `durably::new_execution_id` (UUID v7): ids made together sort together.
    TimeOrdered,
    /// `Uuid::new_v4`: every id lands at a random place in the B-trees.
    Random,
}

impl IdsArg {
    /// A new execution id of this kind.
    pub fn new_id(self) -> uuid::Uuid {
        match self {
            Self::TimeOrdered => durably::new_execution_id(),
            Self::Random => uuid::Uuid::new_v4(),
        }
    }

    /// The name the preamble prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TimeOrdered => "time-ordered",
            Self::Random => "random",
        }
    }
}

/// `--effect`: which kind of step `workflows` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EffectArg {
    /// Result only, no key.
    Pure,
    /// Result only, with the idempotency key.
    Idempotent,
    /// Intent, then result.
    Guarded,
}

/// `--api`: how `workflows` drives its executions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiArg {
    /// `Runtime::run` of a registered workflow.
    Runtime,
    /// `Journal::open_execution`, the steps, `Execution::complete`.
    Journal,
}

/// `--scenario`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioName {
    /// One execution, guarded steps one after another.
    SeqGuarded,
    /// One execution, idempotent steps one after another.
    SeqIdempotent,
    /// Many executions in parallel, guarded steps.
    Concurrent,
    /// One execution, rounds of 8 guarded steps joined, against 8 one after the other.
    Parallel,
    /// Whole executions: open, K steps, finalize.
    Workflows,
    /// Reopen an execution with many committed steps and replay them.
    Replay,
    /// The peak RSS of a fresh process resuming an execution of 1,000,000 steps.
    ResumeMemory,
    /// Latencies on a large journal against an empty one, and a retention sweep.
    Scale,
    /// Several processes writing one file at once.
    Multiprocess,
    /// Scheduler fires per second, from one and from two processes.
    Scheduler,
    /// Guarded workflows through a runtime queue with a limit, against none.
    Queue,
    /// A new runtime finishing the half-done workflows of a killed one.
    Recovery,
    /// The memory of a runtime process with 100,000 parked executions, against none.
    Parked,
    /// How late parked timers wake their executions on an idle runtime.
    TimerWake,
    /// How soon a send from another process runs its parked receiver.
    SendWake,
    /// Parents fanning out to child executions, against plain workflows.
    Children,
}

impl ScenarioName {
    /// Every scenario, in the order a full run takes them.
    pub fn all() -> &'static [Self] {
        &[
            Self::SeqGuarded,
            Self::SeqIdempotent,
            Self::Concurrent,
            Self::Parallel,
            Self::Workflows,
            Self::Replay,
            Self::ResumeMemory,
            Self::Multiprocess,
            Self::Scheduler,
            Self::Queue,
            Self::Recovery,
            Self::Parked,
            Self::TimerWake,
            Self::SendWake,
            Self::Children,
            Self::Scale,
        ]
    }

    /// The scenarios `--backend postgres` runs: those of one journal and no raw-SQLite
    /// fixture or worker process. The others read or write SQLite files directly.
    pub fn on_postgres() -> &'static [Self] {
        &[
            Self::SeqGuarded,
            Self::SeqIdempotent,
            Self::Concurrent,
            Self::Parallel,
            Self::Workflows,
        ]
    }

    /// The name `--scenario` takes and the `bench` line prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SeqGuarded => "seq-guarded",
            Self::SeqIdempotent => "seq-idempotent",
            Self::Concurrent => "concurrent",
            Self::Parallel => "parallel",
            Self::Workflows => "workflows",
            Self::Replay => "replay",
            Self::ResumeMemory => "resume-memory",
            Self::Scale => "scale",
            Self::Multiprocess => "multiprocess",
            Self::Scheduler => "scheduler",
            Self::Queue => "queue",
            Self::Recovery => "recovery",
            Self::Parked => "parked",
            Self::TimerWake => "timer-wake",
            Self::SendWake => "send-wake",
            Self::Children => "children",
        }
    }
}
