//! The torture binary: many SIGKILL-and-restart cycles of worker processes against one journal,
//! then a checker that compares the independent ledger with the journal.
//!
//! `torture --iterations N --seed S [--durability full|process-crash] [--backend
//! sqlite|postgres]`. Its last line is `torture: iterations=N kills=K executions=E effects=F
//! retried=R duplicated=D lost=L unexpected=U stuck=S reopened=O leaked_locks=X integrity=ok
//! seed=S` (on PostgreSQL `kills=K` is followed by `stops=T partitions=P fenced=F`, and
//! `integrity` is `n/a`); it exits 1 when any invariant failed. It needs no failpoints: kills
//! come from the driver, at moments drawn from the seed.
//!
//! `--backend postgres` (a build with the `postgres` feature) runs the journal in a fresh
//! schema of the database `DURABLY_POSTGRES_URL` names, dropped after a passing run.
//!
//! `torture worker MODE …` is one process of a run (see `durably_tests::torture::worker`): the
//! driver starts its processes by re-executing this binary, so building it builds them all.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use durably_tests::torture::driver::{self, Options};
use durably_tests::torture::store::{self, Backend};
use durably_tests::torture::worker;

#[derive(Debug, Parser)]
#[command(
    about = "Crash-and-restart torture of durably against an independent ledger",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// A process of a run, as the driver starts it; absent when running the driver.
    #[command(subcommand)]
    command: Option<Command>,
    /// Kill-and-restart iterations (one SIGKILL each).
    #[arg(long, default_value_t = 100)]
    iterations: u64,
    /// The seed of every random choice (plans, victims, kill moments).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// `full` or `process-crash`.
    #[arg(long, default_value = "full", value_parser = ["full", "process-crash"])]
    durability: String,
    /// Worker processes at once (executions driven by hand).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=16))]
    workers: u64,
    /// Scheduler processes at once (they fire the same slots).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=8))]
    schedulers: u64,
    /// Runtime worker processes at once (each runs a runtime and starts executions).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=8))]
    runtimes: u64,
    /// Processes sending messages to runtime executions.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=4))]
    senders: u64,
    /// Processes cancelling runtime executions.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=4))]
    cancellers: u64,
    /// The longest wait before a kill, in milliseconds.
    #[arg(long, default_value_t = 60)]
    kill_delay_ms_max: u64,
    /// The run directory (default: a fresh temporary directory, removed after a passing run).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the temporary directory even when the run passes.
    #[arg(long)]
    keep: bool,
    /// Run no process: only check the kept run in `--dir` again and print what the checker
    /// finds.
    #[arg(long, requires = "dir")]
    check_only: bool,
    /// Where the journal lives: `sqlite` (a file in the run directory) or `postgres` (a fresh
    /// schema of the database `DURABLY_POSTGRES_URL` names).
    #[arg(long, default_value = "sqlite", value_parser = ["sqlite", "postgres"])]
    backend: String,
    /// On PostgreSQL, the percentage of iterations that SIGSTOP their victim past the lease
    /// (and SIGCONT it later) instead of killing it.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=100))]
    stop_percent: u64,
    /// On PostgreSQL, the percentage of iterations that end their victim's database sessions
    /// from the server side instead of killing it.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=100))]
    partition_percent: u64,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One process of a torture run or of the failpoint matrix, as the driver starts it.
    ///
    /// `FAILPOINTS='F=K*off->return' torture worker matrix --dir DIR --durability
    /// process-crash --seed S`, from a build with the `failpoints` feature, replays the failpoint
    /// matrix's case of failpoint F at hit K (S is the matrix test's seed).
    Worker(worker::Args),
}

fn main() -> ExitCode {
    durably_tests::torture::disable_core_dumps();
    let cli = Cli::parse();
    if let Some(Command::Worker(args)) = cli.command {
        return worker::main(args);
    }
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("torture: {error}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<bool, durably_tests::torture::BoxError> {
    if let (true, Some(dir)) = (cli.check_only, &cli.dir) {
        let report = durably_tests::torture::checker::check(dir)?;
        for violation in &report.violations {
            println!("torture: violation: {violation}");
        }
        println!("{}", report.line(0, 0, cli.seed));
        return Ok(report.passed());
    }
    let temporary = match &cli.dir {
        Some(_) => None,
        None => Some(
            tempfile::Builder::new()
                .prefix("durably-torture-")
                .tempdir()?,
        ),
    };
    let dir = match (&cli.dir, &temporary) {
        (Some(dir), _) => dir.clone(),
        (None, Some(temporary)) => temporary.path().to_owned(),
        (None, None) => unreachable!("a directory was chosen above"),
    };
    let postgres = cli.backend == "postgres";
    let backend = if postgres {
        Backend::Postgres
    } else {
        Backend::Sqlite
    };
    let options = Options {
        iterations: cli.iterations,
        seed: cli.seed,
        durability: cli.durability,
        workers: cli.workers,
        schedulers: cli.schedulers,
        runtimes: cli.runtimes,
        senders: cli.senders,
        cancellers: cli.cancellers,
        kill_delay_ms_max: cli.kill_delay_ms_max,
        dir,
        backend,
        stop_percent: if postgres { cli.stop_percent } else { 0 },
        partition_percent: if postgres { cli.partition_percent } else { 0 },
    };
    let outcome = driver::run(&options)?;
    driver::print(&outcome, &options);
    let passed = outcome.passed();
    if postgres && passed && !cli.keep {
        store::drop_schema(&options.dir)?;
    }
    if let Some(temporary) = temporary
        && (cli.keep || !passed)
    {
        let kept = temporary.keep();
        println!("torture: kept {}", kept.display());
    }
    Ok(passed)
}
