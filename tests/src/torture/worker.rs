//! The `worker` subcommand of the `torture` binary: one process of the torture run or of the
//! failpoint matrix. The driver and the matrix start it by re-executing their own binary
//! ([`command`]), so one `cargo run --bin torture` builds everything a run needs.
//!
//! - `run --slot W --slots N`: creates and drives random executions of its slot, and resumes
//!   any recoverable ones, until it is killed (the torture driver kills it at random moments).
//! - `sched`: a scheduler process: fires slot after slot of four jobs (one per policy), and
//!   resumes unfinished fires, until it is killed.
//! - `runtime --slot R --slots N`: runs a runtime, starts executions of its slot through it and
//!   awaits their results, until it is killed (see [`super::runtime_roles`]).
//! - `send`: sends messages to runtime executions until it is killed.
//! - `cancel`: cancels runtime executions at random moments until it is killed.
//! - `finish`: sweeps, then drives every unfinished execution and fire to completion, and
//!   brings every runtime execution to its end.
//! - `matrix`: the failpoint matrix's deterministic workload (see [`super::matrix`]).
//! - `orphans --first I`: makes orphans for the matrix, then aborts.
//! - `runtime-orphans`: makes a runtime orphan for the matrix, then aborts.
//!
//! Built with the `failpoints` feature, it reads `FAILPOINTS` at start. It exits 0 when done,
//! 3 on an engine error it never expects (printed on stderr), 4 when it lost its journal's
//! ownership (`LockLost`, `InstanceLost`) or a PostgreSQL session under a request (the
//! connection lost, or a commit's outcome unknown): expected only of a worker the driver
//! stopped past its lease or whose sessions it ended. It aborts on a crashing failpoint.
//!
//! On PostgreSQL each process is an instance of its own (its own id, advisory key and
//! sessions): it writes that id to [`instance_file`] once its journal is open, so the driver
//! can find and end its sessions.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;

use clap::Subcommand;
use durably_journal::Durability;

use super::plan::{EXECUTION_KIND, ExecutionPlan, PlanInput, Shape};
use super::workload::{Stop, Workload};
use super::{BoxError, fires, matrix, matrix_runtime, runtime_roles, store};

/// The name of the subcommand, as the driver and the matrix pass it.
pub const SUBCOMMAND: &str = "worker";
/// Executions one worker process creates at most before it exits (and is restarted).
const EXECUTIONS_PER_PROCESS_MAX: u64 = 100_000;
/// A worker looks for recoverable executions (of killed peers) every this many executions.
const RECOVERY_EVERY: u64 = 8;
/// The exit code of a worker that met an error it never expects.
const EXIT_UNEXPECTED: u8 = 3;
/// The exit code of a worker whose journal lost its ownership: a lock taken over, or its
/// instance's liveness session ended.
pub const EXIT_LOST: u8 = 4;
/// The run directory's directory of instance files.
const INSTANCES_DIR: &str = "instances";

/// The worker's command line, after `torture worker`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    mode: Mode,
    /// The run directory.
    #[arg(long, global = true, default_value = ".")]
    dir: PathBuf,
    /// The run's seed.
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// `full` or `process-crash`.
    #[arg(long, global = true, default_value = "full")]
    durability: String,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Create and drive executions until killed.
    Run {
        /// This worker's slot.
        #[arg(long)]
        slot: u64,
        /// How many slots the run has.
        #[arg(long)]
        slots: u64,
    },
    /// Fire slot after slot of the torture jobs until killed.
    Sched,
    /// Run a runtime, start executions through it and await them until killed.
    Runtime {
        /// This runtime worker's slot.
        #[arg(long)]
        slot: u64,
        /// How many runtime worker slots the run has.
        #[arg(long)]
        slots: u64,
    },
    /// Send messages to runtime executions until killed.
    Send,
    /// Cancel runtime executions until killed.
    Cancel,
    /// Sweep, then drive every unfinished execution and fire to completion.
    Finish,
    /// The failpoint matrix's workload.
    Matrix,
    /// Make a runtime orphan for the matrix, then abort.
    RuntimeOrphans,
    /// Make orphans for the matrix, then abort.
    Orphans {
        /// The first execution index of the group.
        #[arg(long)]
        first: u64,
    },
}

/// A command that starts a worker process: this binary again, with the `worker` subcommand.
/// Only the `torture` binary, which has that subcommand, may call it.
///
/// # Errors
/// The path of the running binary cannot be read.
pub fn command() -> std::io::Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command.arg(SUBCOMMAND);
    Ok(command)
}

/// Runs one worker process to its end and returns its exit code.
pub fn main(args: Args) -> ExitCode {
    #[cfg(feature = "failpoints")]
    let scenario = fail::FailScenario::setup();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("torture worker: cannot start a runtime: {error}");
            return ExitCode::from(EXIT_UNEXPECTED);
        }
    };
    let result = runtime.block_on(run(args));
    #[cfg(feature = "failpoints")]
    scenario.teardown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("torture worker: {error}");
            if is_lost(error.as_ref()) {
                ExitCode::from(EXIT_LOST)
            } else {
                ExitCode::from(EXIT_UNEXPECTED)
            }
        }
    }
}

/// Whether `error`, or an error it wraps, says the journal lost its ownership or a session.
fn is_lost(error: &(dyn std::error::Error + 'static)) -> bool {
    let lost = |error: &durably_journal::Error| match error {
        durably_journal::Error::LockLost(_)
        | durably_journal::Error::InstanceLost { .. }
        | durably_journal::Error::CommitUnknown { .. } => true,
        durably_journal::Error::Storage(error) => session_lost(error),
        _ => false,
    };
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(error) = error.downcast_ref::<durably_journal::Error>()
            && lost(error)
        {
            return true;
        }
        if let Some(durably_runtime::Error::Journal(error)) =
            error.downcast_ref::<durably_runtime::Error>()
            && lost(error)
        {
            return true;
        }
        // The scheduler's journal errors are transparent: their source is the journal
        // error's own, so the journal error is looked at here.
        if let Some(durably_scheduler::Error::Journal(error)) =
            error.downcast_ref::<durably_scheduler::Error>()
            && lost(error)
        {
            return true;
        }
        if let Some(error) = error.downcast_ref::<durably_db::Error>()
            && session_lost(error)
        {
            return true;
        }
        next = error.source();
    }
    false
}

#[cfg(feature = "postgres")]
fn session_lost(error: &durably_db::Error) -> bool {
    matches!(error, durably_db::Error::Postgres(error) if error.is_connection_lost())
}

#[cfg(not(feature = "postgres"))]
fn session_lost(_error: &durably_db::Error) -> bool {
    false
}

/// The file in which the worker of process `pid` wrote its journal's instance id.
pub fn instance_file(dir: &Path, pid: u32) -> PathBuf {
    dir.join(INSTANCES_DIR).join(pid.to_string())
}

async fn run(args: Args) -> Result<(), BoxError> {
    let durability = match args.durability.as_str() {
        "full" => Durability::Full,
        "process-crash" => Durability::ProcessCrash,
        other => return Err(format!("unknown durability {other:?}").into()),
    };
    let dir = &args.dir;
    match args.mode {
        Mode::Run { slot, slots } => {
            run_slot(&workload(dir, durability)?, args.seed, slot, slots).await
        }
        Mode::Sched => fires::run(&workload(dir, durability)?, EXECUTIONS_PER_PROCESS_MAX).await,
        Mode::Runtime { slot, slots } => {
            let workload = Arc::new(workload(dir, durability)?);
            runtime_roles::run_worker(workload, args.seed, slot, slots).await
        }
        Mode::Send => {
            runtime_roles::run_sender(Arc::new(workload(dir, durability)?), args.seed).await
        }
        Mode::Cancel => {
            runtime_roles::run_canceller(Arc::new(workload(dir, durability)?), args.seed).await
        }
        Mode::Finish => {
            let journal = matrix::open_journal(dir, durability, true)?;
            journal.operator().sweep(false).await?;
            let workload = Arc::new(Workload::new(journal, dir)?);
            workload.finish(matrix::FINISH_ROUNDS_MAX).await?;
            fires::finish(&workload, matrix::FINISH_ROUNDS_MAX).await?;
            runtime_roles::finish(workload).await
        }
        Mode::Matrix => matrix::run(dir, args.seed, durability).await,
        Mode::Orphans { first } => matrix::orphans(dir, args.seed, durability, first).await,
        Mode::RuntimeOrphans => matrix_runtime::make_orphan(dir, args.seed, durability).await,
    }
}

fn workload(dir: &Path, durability: Durability) -> Result<Workload, BoxError> {
    let journal = matrix::open_journal(dir, durability, true)?;
    if store::Backend::of(dir) == store::Backend::Postgres {
        let file = instance_file(dir, std::process::id());
        std::fs::create_dir_all(file.parent().ok_or("an instance file has a directory")?)?;
        std::fs::write(file, journal.locker().instance_id().to_string())?;
    }
    Ok(Workload::new(journal, dir)?)
}

async fn run_slot(workload: &Workload, seed: u64, slot: u64, slots: u64) -> Result<(), BoxError> {
    let mut index = next_index(workload, slot, slots)?;
    for round in 0..EXECUTIONS_PER_PROCESS_MAX {
        if round.is_multiple_of(RECOVERY_EVERY) {
            recover(workload).await?;
        }
        let plan = ExecutionPlan::from_input(PlanInput {
            seed,
            index,
            slot,
            shape: Shape::Random,
        });
        workload.drive(&plan, Stop::default()).await?;
        index += slots;
    }
    Ok(())
}

/// The slot's next fresh index: after the highest it has created so far.
fn next_index(workload: &Workload, slot: u64, slots: u64) -> Result<u64, BoxError> {
    let highest: Option<i64> = workload.journal().read(|conn| {
        Ok(conn.query_row(
            "SELECT max(CAST(input ->> 'index' AS BIGINT)) FROM executions
             WHERE kind = ?1 AND (input ->> 'shape') <> 'runtime'
               AND CAST(input ->> 'slot' AS BIGINT) = ?2",
            durably_db::params![EXECUTION_KIND, slot as i64],
            |row| row.get(0),
        )?)
    })?;
    Ok(highest.map_or(slot, |highest| highest as u64 + slots))
}

/// Resumes the recoverable executions driven by hand: those of killed workers, and this slot's
/// own. The runtime's are left to the runtimes.
async fn recover(workload: &Workload) -> Result<(), BoxError> {
    for record in workload.journal().recoverable()? {
        if record.kind == EXECUTION_KIND {
            let input: PlanInput = record.input.decode()?;
            if input.shape.is_runtime() {
                continue;
            }
            workload
                .drive(&ExecutionPlan::from_input(input), Stop::default())
                .await?;
        }
    }
    Ok(())
}
