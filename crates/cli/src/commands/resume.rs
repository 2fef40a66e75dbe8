//! `durably resume ID`: puts a stuck, cancelled or timed-out execution back in its queue; a
//! runtime serving its kind continues it from its last recorded step. Every refusal writes
//! nothing.

use durably::runtime::{Error, ResumeOptions};
use serde::Serialize;

use crate::cli::ResumeArgs;
use crate::db::Target;
use crate::error::Result;
use crate::output::{print, print_json};
use crate::runtime_errors::not_the_runtimes;

/// `resume --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Resumed {
    execution_id: String,
    /// `queued`.
    status: &'static str,
}

/// Resumes the execution.
pub fn run(target: &Target, args: &ResumeArgs, json: bool) -> Result<()> {
    let runtime = crate::db::runtime()?;
    let id = args.id;
    let client = target.client(&runtime, |journal| {
        not_the_runtimes(journal, id, Error::NotFound(id))
    })?;
    let mut options = ResumeOptions::default();
    if let Some(deadline) = args.deadline {
        options = options.deadline(deadline);
    }
    runtime.block_on(client.resume(id, options))?;
    if json {
        return print_json(&Resumed {
            execution_id: id.to_string(),
            status: "queued",
        });
    }
    print(&format!(
        "resumed {id}: it is queued, and a runtime serving its kind continues it from its last \
         recorded step\n"
    ))
}
