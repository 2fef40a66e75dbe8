//! `durably fork ID --from-seq N [--version V]`: a new execution that copies an ended
//! execution's recorded steps before N and is queued to run the rest on current code. Every
//! refusal writes nothing.

use durably::runtime::{Error, ForkOptions, ForkRefusal};
use serde::Serialize;

use crate::cli::ForkArgs;
use crate::db::Target;
use crate::error::Result;
use crate::output::{print, print_json};
use crate::runtime_errors::refused_without_runtime;

/// `fork --json`. Stable fields.
#[derive(Debug, Serialize)]
struct ForkShown {
    /// The new execution.
    execution_id: String,
    /// The execution it copies.
    forked_from: String,
    from_seq: u32,
    /// `queued`.
    status: &'static str,
}

/// Forks the execution.
pub fn run(target: &Target, args: &ForkArgs, json: bool) -> Result<()> {
    let runtime = crate::db::runtime()?;
    let id = args.id;
    let client = target.client(&runtime, |journal| {
        let hand_driven = Error::ForkRefused {
            execution_id: id,
            refusal: ForkRefusal::HandDriven,
        };
        refused_without_runtime(journal, id, Error::NotFound(id), hand_driven)
    })?;
    let mut options = ForkOptions::from_seq(args.from_seq);
    if let Some(version) = args.version {
        options = options.version(version);
    }
    let fork = runtime.block_on(client.fork(id, options))?;
    if json {
        return print_json(&ForkShown {
            execution_id: fork.to_string(),
            forked_from: id.to_string(),
            from_seq: args.from_seq,
            status: "queued",
        });
    }
    print(&format!(
        "forked {id} from seq {} as {fork}: it is queued, and a runtime serving its kind and \
         version replays the copied steps and runs the rest\n",
        args.from_seq
    ))
}
