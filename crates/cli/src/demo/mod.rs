//! `durably demo`: what durably does, in under 30 seconds, on a fresh database.
//!
//! An agent-like checkout workflow (plan, fetch the order, charge the card, send an email,
//! summarize) runs in a child process that is killed with SIGKILL inside a guarded step, after
//! its intent is durable. The demo restarts it (the restart takes the dead worker's lock over:
//! no sweep is needed) and shows each ambiguity policy at work. A scheduled job then fires from two processes at once. Every effect is written to an
//! independent ledger that durably never touches; the demo ends with a table of how many times
//! each effect ran, and exits non-zero if any count breaks what its policy promises.

mod acted;
mod checks;
mod child;
pub mod ledger;
mod scenario;
pub mod scheduled;
mod story;
pub mod worker;

pub use child::exit_with_parent;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use durably::Journal;

use self::ledger::Ledger;
use self::scenario::Scenario;
use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::escape::escape;

/// The demo's database when `--db` is not given, in the working directory.
pub const DEMO_DB_DEFAULT: &str = "durably-demo.db";

/// Everything the parent process of the demo shares between its parts.
pub struct Demo {
    /// The demo's database.
    pub db: PathBuf,
    /// The outside world's record of effects.
    pub ledger: Ledger,
    /// The parent's own journal handle, to inspect what the workers wrote.
    pub journal: Journal,
}

/// Runs the demo. `db` is the `--db` the user gave, if any.
///
/// # Errors
/// The database cannot be prepared, or a part of the demo failed to run. A broken invariant is
/// not an error here: it is reported in the final table and makes the exit code 1.
pub fn run(db: Option<&Path>) -> Result<ExitCode> {
    let started = Instant::now();
    let db = prepare(db)?;
    let ledger = Ledger::at(ledger_path(&db));
    let journal = Journal::builder(&db).sweep_on_open(false).open()?;
    let demo = Demo {
        db,
        ledger,
        journal,
    };
    intro(&demo)?;
    let mut executions = Vec::new();
    for (index, scenario) in Scenario::ALL.into_iter().enumerate() {
        executions.push((scenario, story::run(&demo, index + 1, scenario)?));
    }
    let fires = scheduled::run(&demo, Scenario::ALL.len() + 1)?;
    let left = story::leave_for_inspection(&demo, Scenario::ALL.len() + 2)?;
    let verdict = checks::run(&demo, &executions, &fires, left)?;
    outro(&demo, started)?;
    if verdict.all_held {
        narrate("\nEvery invariant held: no effect ran more often than its policy allows.")?;
        Ok(ExitCode::SUCCESS)
    } else {
        narrate(&format!(
            "\nINVARIANT VIOLATED: {}",
            verdict.violations.join("; ")
        ))?;
        Ok(ExitCode::from(crate::error::EXIT_FAILURE))
    }
}

/// The error of a part of the demo that could not run.
pub fn failed(message: impl Into<String>) -> CliError {
    CliError::new(ErrorCode::DemoFailed, message)
}

/// Prints one line of narration.
///
/// # Errors
/// Standard output is gone.
pub fn narrate(line: &str) -> Result<()> {
    crate::output::print(&format!("{line}\n"))
}

/// Chooses the database and makes sure it starts empty. The default file is deleted and
/// recreated each run (with its WAL, shared memory, liveness directory and ledger); a file the
/// user named is never deleted: if it holds anything, the demo refuses to run on it.
fn prepare(db: Option<&Path>) -> Result<PathBuf> {
    let (path, is_default) = match db {
        Some(path) => (path.to_owned(), false),
        None => (PathBuf::from(DEMO_DB_DEFAULT), true),
    };
    let shown = escape(&path.display().to_string());
    if is_default {
        for file in demo_files(&path) {
            remove(&file)?;
        }
    } else if std::fs::metadata(&path).is_ok_and(|metadata| metadata.len() > 0) {
        return Err(failed(format!(
            "{shown} already exists and is not empty; the demo writes a fresh database, so give \
             --db a new path (or delete that file if it is an old demo)"
        )));
    } else {
        remove(&ledger_path(&path))?;
    }
    Ok(path)
}

fn demo_files(db: &Path) -> Vec<PathBuf> {
    let with_suffix = |suffix: &str| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    vec![
        db.to_owned(),
        with_suffix("-wal"),
        with_suffix("-shm"),
        with_suffix("-journal"),
        durably::lock::LivenessDir::beside(db).path().to_owned(),
        ledger_path(db),
    ]
}

fn remove(path: &Path) -> Result<()> {
    let outcome = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match outcome {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(failed(format!(
            "cannot remove the old demo file {}: {error}",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// The effect ledger beside the database: `<db>.effects`.
fn ledger_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".effects");
    PathBuf::from(name)
}

fn intro(demo: &Demo) -> Result<()> {
    narrate(&format!(
        "durably demo\n\
         \n\
         A workflow is a sequence of steps, each journaled as it runs, so a restarted run replays \
         the finished steps and goes on from the first unfinished one. A step is one of three \
         kinds, by what a crash inside it may cost:\n\
         \n\
         \x20 pure        touches nothing outside the program (a plan, a summary): a crash \
         before its result is journaled just runs it again.\n\
         \x20 idempotent  has an effect that is safe to repeat (a read, an upsert): a crash runs \
         it again, with the same idempotency key.\n\
         \x20 guarded     has an effect that must not silently happen twice (a payment, an \
         email): its intent is journaled before the effect and its result after. A crash in \
         between leaves it in the ambiguous window, and its policy decides what the next run \
         does: Reconcile (ask the outside world), Fail (leave it to an operator), Skip (never \
         run it again) or Retry (run it again, with the same key).\n\
         \n\
         A checkout agent runs five steps: plan (pure), fetch order (idempotent), charge \
         (guarded), send email (guarded), summarize (pure). Below, a worker is killed inside a \
         guarded step four times and restarted, with no clean-up in between: the restarted \
         worker finds the dead one's lock and takes it over. (`durably sweep` exists to reclaim \
         the executions of dead processes without resuming them.)\n\
         \n\
         journal:       {}\n\
         effect ledger: {} (the outside world: the worker appends each effect it performs; \
         durably never writes it)",
        escape(&demo.db.display().to_string()),
        escape(&demo.ledger.path().display().to_string())
    ))
}

fn outro(demo: &Demo, started: Instant) -> Result<()> {
    let db = escape(&demo.db.display().to_string());
    narrate(&format!(
        "\nLook inside (views are described in docs/operations.md):\n\
         \x20 sqlite3 {db} 'select * from execution_summary'\n\
         \x20 sqlite3 {db} 'select * from recent_events limit 20'\n\
         \x20 sqlite3 {db} 'select * from fire_ledger'\n\
         \x20 durably --db {db} ls\n\
         \x20 durably --db {db} show <EXECUTION>\n\
         \n\
         The demo took {:.1} s.",
        started.elapsed().as_secs_f64()
    ))
}
