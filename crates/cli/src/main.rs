//! `durably`: inspect and operate a durably journal, and run the demo.
//!
//! Exit codes: 0 ok, 1 the command failed, 2 the command line is wrong. Every error, a usage
//! error included, is printed one way (see [`error`]); nothing here panics on bad input.

mod catalog;
mod children_rows;
mod cli;
mod commands;
mod db;
mod demo;
mod error;
mod error_code;
mod error_fields;
mod escape;
mod output;
mod runtime_errors;
mod runtime_rows;

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Mutex;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, Command};
use crate::db::Target;
use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;

/// Where the last panic happened, for the one line a bug is reported with.
static PANIC_PLACE: Mutex<Option<String>> = Mutex::new(None);

fn main() -> ExitCode {
    let json = json_requested(std::env::args_os());
    install_panic_hook();
    let outcome = std::panic::catch_unwind(run_command_line);
    let error = match outcome {
        Ok(Ok(code)) => return code,
        Ok(Err(error)) => error,
        Err(_) => {
            let place = PANIC_PLACE
                .lock()
                .ok()
                .and_then(|mut place| place.take())
                .unwrap_or_default();
            CliError::new(
                ErrorCode::Internal,
                format!("internal error{place}; this is a bug"),
            )
            .hint("please report it with the command you ran")
        }
    };
    error.report(json);
    error.exit_code()
}

fn run_command_line() -> Result<ExitCode> {
    let matches = match Cli::command().try_get_matches() {
        Ok(matches) => matches,
        Err(error) => return shown_or_usage_error(&error),
    };
    let cli = Cli::from_arg_matches(&matches).map_err(|error| usage_error(&error))?;
    run(&cli)
}

fn run(cli: &Cli) -> Result<ExitCode> {
    let json = cli.json;
    let target = || Target::chosen(cli.db.as_deref(), cli.read_timeout.into());
    match &cli.command {
        Command::Ls(args) => commands::ls::run(&target()?, args, json)?,
        Command::Show(args) => commands::show::run(&target()?, args, json)?,
        Command::Locks => commands::locks::run(&target()?, json)?,
        Command::Sweep { dry_run, force } => {
            commands::sweep::run(&target()?, *dry_run, *force, json)?;
        }
        Command::Gc(args) => commands::gc::run(&target()?, args, json)?,
        Command::Resolve(args) => commands::resolve::run(&target()?, args, json)?,
        Command::Cancel { id, reason, force } => {
            commands::cancel::run(&target()?, *id, reason, *force, json)?;
        }
        Command::Start(args) => commands::start::run(&target()?, args, json)?,
        Command::Send(args) => commands::send::run(&target()?, args, json)?,
        Command::Resume(args) => commands::resume::run(&target()?, args, json)?,
        Command::Fork(args) => commands::fork::run(&target()?, args, json)?,
        Command::Patches(args) => commands::patches::run(&target()?, args, json)?,
        Command::Fires { job, limit } => {
            commands::fires::run(&target()?, job.as_deref(), *limit, json)?;
        }
        Command::Schedules { action } => {
            commands::schedules::run(&target()?, action.as_ref(), json)?;
        }
        Command::Copy { from, to } => {
            commands::copy::run(from, to, cli.read_timeout.into(), json)?;
        }
        Command::FireId { job, slot } => commands::fire_id::run(job, slot, json)?,
        // DURABLY_DB names the user's real journal; the demo never writes there, so only
        // `--db` counts.
        Command::Demo => return demo::run(cli.db.as_deref()),
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

/// Whether `--json` is on the command line, before any `--`: errors are then printed as JSON,
/// even those found before the command line could be parsed.
fn json_requested(args: impl Iterator<Item = OsString>) -> bool {
    args.skip(1)
        .take_while(|arg| arg != "--")
        .any(|arg| arg == "--json")
}

/// `--help` and `--version` print what was asked for and succeed; anything else clap refused
/// is a usage error.
fn shown_or_usage_error(error: &clap::Error) -> Result<ExitCode> {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            Ok(ExitCode::SUCCESS)
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            Err(CliError::new(ErrorCode::BadInput, "no command given")
                .hint("`durably --help` lists the commands"))
        }
        _ => Err(usage_error(error)),
    }
}

/// Clap's refusal in this tool's format: its message (first paragraph) as the error, and its
/// tips and the usage line as the hint.
fn usage_error(error: &clap::Error) -> CliError {
    let rendered = error.render().to_string();
    let mut message = Vec::new();
    let mut hints = Vec::new();
    for (index, paragraph) in rendered.split("\n\n").enumerate() {
        let lines = paragraph
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty());
        let joined = lines.collect::<Vec<_>>().join(" ");
        if index == 0 {
            message.push(joined.trim_start_matches("error:").trim().to_owned());
        } else if let Some(tip) = joined.strip_prefix("tip:") {
            hints.push(tip.trim().to_owned());
        } else if let Some(usage) = joined.strip_prefix("Usage:") {
            let usage = usage.trim();
            let command: Vec<&str> = usage
                .split_whitespace()
                .take_while(|word| !word.starts_with(['[', '<', '-']))
                .collect();
            hints.push(format!(
                "usage: {usage}; `{} --help` says more",
                command.join(" ")
            ));
        }
    }
    if hints.is_empty() {
        hints.push("`durably --help` describes every command and option".to_owned());
    }
    CliError::new(ErrorCode::BadInput, message.join(" ")).hint(hints.join("; "))
}

/// A bug must still end with one error (in the chosen format) and exit code 1, never a stack
/// trace: the hook only notes where it happened, and `main` reports it.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let place = info
            .location()
            .map(|location| format!(" at {}:{}", location.file(), location.line()))
            .unwrap_or_default();
        if let Ok(mut slot) = PANIC_PLACE.lock() {
            *slot = Some(place);
        }
    }));
}
