//! `durably`: inspect and operate a durably journal, and run the demo.
//!
//! Exit codes: 0 ok, 1 the command failed, 2 the command line is wrong. Errors go to standard
//! error as one line that says what to do; nothing here panics on bad input.

mod cli;
mod commands;
mod db;
mod demo;
mod error;
mod escape;
mod output;

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, Command};
use crate::error::Result;

fn main() -> ExitCode {
    install_panic_hook();
    let matches = Cli::command().get_matches();
    let db_from_env = subcommand_db_source(&matches) == Some(ValueSource::EnvVariable);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&cli, db_from_env)));
    match outcome {
        Ok(Ok(code)) => code,
        Err(_) => ExitCode::from(error::EXIT_FAILURE),
        Ok(Err(error)) => {
            eprintln!("durably: error: {}", escape::escape(&error.message));
            error.exit_code()
        }
    }
}

fn run(cli: &Cli, db_from_env: bool) -> Result<ExitCode> {
    let json = cli.json;
    let db = cli.db.as_deref();
    match &cli.command {
        Command::Ls(args) => commands::ls::run(&db::required(db)?, args, json)?,
        Command::Show(args) => commands::show::run(&db::required(db)?, args, json)?,
        Command::Locks => commands::locks::run(&db::required(db)?, json)?,
        Command::Sweep { dry_run } => commands::sweep::run(&db::required(db)?, *dry_run, json)?,
        Command::Gc(args) => commands::gc::run(&db::required(db)?, args, json)?,
        Command::Resolve(args) => commands::resolve::run(&db::required(db)?, args, json)?,
        Command::Cancel { id, reason } => {
            commands::cancel::run(&db::required(db)?, *id, reason, json)?;
        }
        Command::Fires { job, limit } => {
            commands::fires::run(&db::required(db)?, job.as_deref(), *limit, json)?;
        }
        Command::FireId { job, slot } => commands::fire_id::run(job, slot, json)?,
        Command::Demo => {
            // DURABLY_DB names the user's real journal; the demo never writes there.
            let db = if db_from_env { None } else { db };
            return demo::run(db);
        }
        Command::DemoWorker(args) => {
            demo::exit_with_parent();
            return demo::worker::run(args);
        }
        Command::DemoScheduler(args) => {
            demo::exit_with_parent();
            return demo::scheduled::worker(args);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the `--db` of the chosen subcommand came from (it is a global argument, so clap
/// records it on the subcommand's matches).
fn subcommand_db_source(matches: &clap::ArgMatches) -> Option<ValueSource> {
    matches
        .subcommand()
        .and_then(|(_, sub)| sub.value_source("db"))
        .or_else(|| matches.value_source("db"))
}

/// A bug must still end with one line and exit code 1, never a stack trace.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let place = info
            .location()
            .map(|location| format!(" at {}:{}", location.file(), location.line()))
            .unwrap_or_default();
        eprintln!(
            "durably: internal error{place}; this is a bug, please report it with the command \
             you ran"
        );
    }));
}
