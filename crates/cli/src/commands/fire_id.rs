//! `durably fire-id JOB SLOT`: the execution id of a scheduler fire.

use durably::scheduler::{JobId, Slot, fire_id};
use serde::Serialize;

use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::output::{print, print_json};

/// `fire-id --json`. Stable fields.
#[derive(Debug, Serialize)]
#[allow(clippy::struct_field_names)] // `fire_id` is the documented JSON field name.
struct FireId {
    job: String,
    slot: String,
    fire_id: String,
}

/// Prints the fire id.
pub fn run(job: &str, slot: &str, json: bool) -> Result<()> {
    let job = JobId::new(job)?;
    let time = chrono::DateTime::parse_from_rfc3339(slot).map_err(|error| {
        CliError::new(
            ErrorCode::BadInput,
            format!(
                "slot {:?} is not an RFC 3339 time ({error}); write it like 2026-01-01T02:00:00Z",
                crate::escape::escape(slot)
            ),
        )
    })?;
    let slot = Slot::from_datetime(time.with_timezone(&chrono::Utc))?;
    let id = fire_id(&job, slot);
    if json {
        return print_json(&FireId {
            job: job.as_str().to_owned(),
            slot: slot.to_rfc3339(),
            fire_id: id.to_string(),
        });
    }
    print(&format!("{id}\n"))
}
