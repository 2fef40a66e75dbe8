//! `durably locks`: held locks, their holders, and this process's judgement of each holder.

use durably::Inspector;
use durably::lock::Judgement;
use serde::Serialize;

use crate::db::Target;
use crate::error::Result;
use crate::escape::escape;
use crate::output::print_rows;

/// One held lock, as `locks --json` and `show --json` print it. Stable fields.
#[derive(Debug, Serialize)]
pub struct Holder {
    /// The locked resource: an execution id for executions.
    pub resource: String,
    /// The holder's pid.
    pub pid: i64,
    /// The holder's host name.
    pub hostname: String,
    /// When it took the lock.
    pub since: String,
    /// Its last heartbeat.
    pub heartbeat_at: String,
    /// The lock's fencing epoch.
    pub epoch: u64,
    /// `alive`, `dead` or `unknown` (cannot be judged; counted alive).
    pub verdict: &'static str,
    /// The evidence for the verdict.
    pub reason: String,
}

/// Every held lock with its judgement.
///
/// # Errors
/// A storage error.
pub fn holders(inspector: &Inspector) -> Result<Vec<Holder>> {
    let mut holders = Vec::new();
    for (row, judgement) in inspector.lock_holders()? {
        let Some(holder) = row.holder else { continue };
        let (verdict, reason) = match judgement {
            Judgement::Alive(reason) => ("alive", reason),
            Judgement::Dead(reason) => ("dead", reason.to_string()),
            Judgement::Unknown(reason) => ("unknown", reason),
        };
        holders.push(Holder {
            resource: escape(&row.resource),
            pid: holder.pid,
            hostname: escape(&holder.hostname),
            since: escape(&holder.acquired_at),
            heartbeat_at: escape(&holder.heartbeat_at),
            epoch: row.epoch,
            verdict,
            reason: escape(&reason),
        });
    }
    Ok(holders)
}

/// Lists held locks.
pub fn run(target: &Target, json: bool) -> Result<()> {
    let holders = holders(&target.inspect()?)?;
    let header = [
        "RESOURCE", "PID", "HOST", "SINCE", "EPOCH", "VERDICT", "REASON",
    ];
    print_rows(&holders, json, "no locks are held", &header, |holder| {
        vec![
            holder.resource.clone(),
            holder.pid.to_string(),
            holder.hostname.clone(),
            holder.since.clone(),
            holder.epoch.to_string(),
            holder.verdict.to_owned(),
            holder.reason.clone(),
        ]
    })
}
