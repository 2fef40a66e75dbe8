//! `durably-bench`: the benchmark harness for durably.
//!
//! Every scenario runs next to a raw-SQLite baseline measured in the same process, on the same
//! disk, with the same pragmas, just before and just after it; results are reported as ratios
//! to that baseline, because the machines this runs on are shared and noisy. See
//! `docs/performance.md`.

mod args;
mod baseline;
mod ceiling;
mod context;
mod error;
#[cfg(feature = "postgres")]
mod postgres;
mod proc_io;
mod report;
mod rss;
mod scenarios;
mod scratch;
mod stats;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Args, Command};
use crate::context::Context;
use crate::error::Result;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("durably-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<()> {
    match &args.command {
        Some(Command::MultiprocessWorker(worker)) => {
            return scenarios::multiprocess::worker(worker, args.durability.into()).await;
        }
        Some(Command::SchedulerWorker(worker)) => {
            return scenarios::scheduler::worker(worker, args.durability.into()).await;
        }
        Some(Command::Resumer(worker)) => {
            return scenarios::resume_memory::worker(worker, args.durability.into()).await;
        }
        Some(Command::RecoveryWorker(worker)) => {
            return scenarios::recovery::worker(worker, args.durability.into()).await;
        }
        Some(Command::ParkedWorker(worker)) => {
            return scenarios::parked::worker(worker, args.durability.into()).await;
        }
        Some(Command::SendWakeWorker(worker)) => {
            return scenarios::send_wake::worker(worker, args.durability.into()).await;
        }
        None => {}
    }
    let context = Context::new(&args)?;
    let chosen = context.scenarios(args.scenario)?;
    context.print_preamble();
    report::print_header();
    for name in chosen {
        context.run_scenario(name).await?;
    }
    Ok(())
}
