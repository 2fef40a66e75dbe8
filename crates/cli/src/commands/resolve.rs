//! `durably resolve ID SEQ (--completed JSON | --not-done) [--seen TOKEN]`: the operator's answer
//! for a step stuck in the ambiguous window.

use durably::operator::Resolution;
use serde::Serialize;

use crate::cli::ResolveArgs;
use crate::db::Target;
use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::output::{print, print_json};

/// `resolve --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Resolved {
    execution_id: String,
    seq: u32,
    resolution: &'static str,
}

/// Records the answer.
pub fn run(target: &Target, args: &ResolveArgs, json: bool) -> Result<()> {
    let journal = target.open()?;
    let (resolution, word) = match (&args.completed, args.not_done) {
        (Some(value), false) => (Resolution::Completed(value.clone()), "completed"),
        (None, true) => (Resolution::NotDone, "not-done"),
        _ => {
            return Err(CliError::new(
                ErrorCode::BadInput,
                "give exactly one of --completed JSON or --not-done",
            ));
        }
    };
    let runtime = crate::db::runtime()?;
    match args.seen {
        Some(seen) => {
            runtime.block_on(
                journal
                    .operator()
                    .resolve_seen(args.id, args.seq, seen, resolution),
            )?;
        }
        None => runtime.block_on(journal.operator().resolve(args.id, args.seq, resolution))?,
    }
    let resolved = Resolved {
        execution_id: args.id.to_string(),
        seq: args.seq,
        resolution: word,
    };
    if json {
        return print_json(&resolved);
    }
    let next = if word == "completed" {
        "the next run returns this result without running the step"
    } else {
        "the next run executes the step again, with the same idempotency key"
    };
    print(&format!(
        "resolved step {} of {} as {word}; {next}\n",
        args.seq, args.id
    ))
}
