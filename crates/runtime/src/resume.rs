//! [`Client::resume`]: an operator puts a stuck, cancelled or timed-out execution back in its
//! queue, to continue from its last recorded step.

use durably_db::Connection;
use durably_journal::Status;
use durably_journal::execution_status;
use durably_journal::lifecycle::{record_execution_event, reopen, status_detail};
use serde_json::json;
use uuid::Uuid;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::options::ResumeOptions;
use crate::store;

/// The audit event of a resume.
pub(crate) const EVENT_RESUMED: &str = "resumed";

/// The `status_detail.reason` of an execution failed by a step timeout, which a resume
/// accepts: the step was dropped, not failed by the workflow.
pub(crate) const STEP_TIMEOUT_REASON: &str = "step_timeout";

impl Client {
    /// Puts execution `id` back in its queue, with its failure count reset, when it is
    /// `stuck`, `cancelled`, or `failed` because a step timed out: a runtime serving its kind
    /// claims it and it continues from its last recorded step (recorded steps replay; a step
    /// left in the ambiguous window meets its policy). For an operator, after fixing what
    /// stopped it. Its old deadline is cleared; `options` may give a new one.
    ///
    /// # Errors
    /// Nothing is written on any error: [`Error::NotFound`] for an unknown id,
    /// [`Error::NotRuntimeExecution`] for an execution the runtime did not start,
    /// [`Error::NotResumable`] naming any other status (a running, completed, or otherwise
    /// failed execution), [`Error::InvalidOption`] for a deadline not in the future;
    /// [`Error::Journal`].
    pub async fn resume(&self, id: Uuid, options: ResumeOptions) -> Result<()> {
        let now = self.now();
        let deadline = options.checked(now)?;
        let refused = self
            .journal()
            .write(move |conn| {
                let Some(status) = execution_status(conn, id)? else {
                    return Ok(Some(Error::NotFound(id)));
                };
                if !store::is_runtime_execution(conn, id)? {
                    return Ok(Some(Error::NotRuntimeExecution { execution_id: id }));
                }
                if !resumable(conn, id, status)? {
                    return Ok(Some(Error::NotResumable {
                        execution_id: id,
                        status,
                    }));
                }
                reopen(conn, id, now, &[status])?;
                store::reset_failures(conn, id)?;
                store::set_deadline(conn, id, deadline)?;
                let detail = json!({ "was": status.as_str() });
                record_execution_event(conn, now, id, None, EVENT_RESUMED, &detail)?;
                Ok(None)
            })
            .await?;
        if let Some(error) = refused {
            return Err(error);
        }
        fail::fail_point!("runtime::after-resume-commit", |_| std::process::abort());
        Ok(())
    }
}

/// Whether a resume moves execution `id`, in `status`, back to its queue.
fn resumable(conn: &Connection, id: Uuid, status: Status) -> durably_journal::Result<bool> {
    Ok(match status {
        Status::Stuck | Status::Cancelled => true,
        Status::Failed => status_detail(conn, id)?.is_some_and(|detail| {
            detail.get("reason").and_then(serde_json::Value::as_str) == Some(STEP_TIMEOUT_REASON)
        }),
        Status::Queued
        | Status::Running
        | Status::Waiting
        | Status::Interrupted
        | Status::AwaitingOperator
        | Status::Completed => false,
    })
}
