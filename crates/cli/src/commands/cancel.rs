//! `durably cancel ID`: cancels an execution no live process holds.

use serde::Serialize;
use uuid::Uuid;

use crate::db::Target;
use crate::error::Result;
use crate::output::{print, print_json};

/// `cancel --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Cancelled {
    execution_id: String,
    status: &'static str,
}

/// Cancels the execution.
pub fn run(target: &Target, id: Uuid, reason: &str, force: bool, json: bool) -> Result<()> {
    let journal = target.open_checked(force)?;
    crate::db::runtime()?.block_on(journal.operator().cancel(id, reason))?;
    if json {
        return print_json(&Cancelled {
            execution_id: id.to_string(),
            status: "cancelled",
        });
    }
    print(&format!("cancelled {id}; it will never run again\n"))
}
