//! [`Client::resume`]: an operator puts a stuck or cancelled execution back in its queue, to
//! continue from its last recorded step.

use durably_journal::Status;
use durably_journal::execution_status;
use durably_journal::lifecycle::{record_execution_event, reopen};
use serde_json::json;
use uuid::Uuid;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::store;

/// The statuses [`Client::resume`] moves back to `queued`.
const RESUMABLE: &[Status] = &[Status::Stuck, Status::Cancelled];

/// The audit event of a resume.
pub(crate) const EVENT_RESUMED: &str = "resumed";

impl Client {
    /// Puts execution `id`, `stuck` or `cancelled`, back in its queue with its failure count
    /// reset: a runtime serving its kind claims it and it continues from its last recorded
    /// step (recorded steps replay). For an operator, after fixing what made it stuck.
    ///
    /// # Errors
    /// Nothing is written on any error: [`Error::NotFound`] for an unknown id,
    /// [`Error::NotRuntimeExecution`] for an execution the runtime did not start,
    /// [`Error::NotResumable`] naming any other status; [`Error::Journal`].
    pub async fn resume(&self, id: Uuid) -> Result<()> {
        let now = self.now();
        let refused = self
            .journal()
            .write(move |conn| {
                let Some(status) = execution_status(conn, id)? else {
                    return Ok(Some(Error::NotFound(id)));
                };
                if !store::is_runtime_execution(conn, id)? {
                    return Ok(Some(Error::NotRuntimeExecution { execution_id: id }));
                }
                let Some(was) = reopen(conn, id, now, RESUMABLE)? else {
                    return Ok(Some(Error::NotResumable {
                        execution_id: id,
                        status,
                    }));
                };
                store::reset_failures(conn, id)?;
                let detail = json!({ "was": was.as_str() });
                record_execution_event(conn, now, id, None, EVENT_RESUMED, &detail)?;
                Ok(None)
            })
            .await?;
        refused.map_or(Ok(()), Err)
    }
}
