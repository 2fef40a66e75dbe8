//! `durably cancel ID`: cancels an execution, or asks the live process that runs it to stop;
//! its unfinished child executions go with it.

use durably::operator::CancelOutcome;
use serde::Serialize;
use uuid::Uuid;

use crate::db::Target;
use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::error_fields;
use crate::output::{print, print_json};

/// `cancel --json`. Stable fields: `status` is `cancelled`, or `cancel_requested` with the
/// holder's `pid`.
#[derive(Debug, Serialize)]
struct Cancelled {
    execution_id: String,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<i64>,
}

/// Cancels the execution: at once when nobody runs it; otherwise its holder is asked and
/// ends it at its next step.
pub fn run(target: &Target, id: Uuid, reason: &str, force: bool, json: bool) -> Result<()> {
    let journal = target.open_checked(force)?;
    let runtime = crate::db::runtime()?;
    // Through the runtime where it has its tables, so that the cancel takes the execution's
    // unfinished children with it and clears its deadline; else as the journal does.
    let outcome = if journal.read(crate::runtime_rows::runtime_present)? {
        let client = runtime.block_on(durably::runtime::Client::new(journal))?;
        runtime.block_on(client.cancel(id, reason))?
    } else {
        match runtime.block_on(journal.operator().cancel(id, reason)) {
            // The journal refuses a cancel only of an execution that has ended: the code is
            // the runtime's for the same refusal, so a program sees one code either way.
            Err(durably::Error::Refused(message)) => {
                return Err(CliError::new(ErrorCode::AlreadyEnded, message)
                    .with(error_fields::execution(&id)));
            }
            cancelled => cancelled?,
        }
    };
    let (status, pid) = match outcome {
        CancelOutcome::Requested { pid } => ("cancel_requested", Some(pid)),
        _ => ("cancelled", None),
    };
    if json {
        return print_json(&Cancelled {
            execution_id: id.to_string(),
            status,
            pid,
        });
    }
    match pid {
        Some(pid) => print(&format!("cancel requested (held by pid {pid})\n")),
        None => print("cancelled\n"),
    }
}
