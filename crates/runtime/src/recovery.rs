//! Recovery: executions whose run ended abnormally (their process died, or a step error
//! stopped them) are put back in their queue, unless they keep failing without progress, in
//! which case they are parked `stuck` for an operator instead of being retried forever.
//!
//! A run **failed** when its execution is found `interrupted`: the journal's sweep marks so an
//! execution whose holder died or released it without ending it. It made **progress** when it
//! recorded a step after its claim (`steps_at_open`). Consecutive failures without progress
//! are counted in `resume_failures`; at the runtime's maximum the execution is `stuck`, with
//! the count and the last failure as its status detail.

use std::collections::BTreeMap;

use durably_journal::Status;
use durably_journal::lifecycle::{park_stuck, recorded_steps, requeue_interrupted};
use serde_json::json;
use uuid::Uuid;

use crate::cancel::cancel_if_requested;
use crate::client::Client;
use crate::error::Result;
use crate::store;

/// The default of [`crate::RuntimeBuilder::resume_failures_max`].
pub const RESUME_FAILURES_MAX_DEFAULT: u32 = 3;

/// The most executions one recovery transaction moves.
pub(crate) const RECOVERY_BATCH_MAX: usize = 512;

/// What a recovery pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Interrupted executions of the kinds this runtime serves, put back in their queue.
    pub requeued: usize,
    /// Executions parked `stuck` after failing to resume too many times in a row.
    pub stuck: usize,
    /// Interrupted executions of kinds this runtime does not serve, left alone: (kind, count).
    pub unknown_kinds: Vec<(String, usize)>,
}

/// One recovery pass: sweeps the journal (dead holders' and released executions become
/// `interrupted`), then requeues or parks every interrupted execution of a served kind, in
/// transactions of at most [`RECOVERY_BATCH_MAX`].
pub(crate) async fn recover(client: &Client, resume_failures_max: u32) -> Result<RecoveryReport> {
    let journal = client.journal();
    journal.operator().sweep(false).await?;
    let mut report = RecoveryReport::default();
    let mut unknown: BTreeMap<String, usize> = BTreeMap::new();
    let mut served: Vec<Uuid> = Vec::new();
    for record in journal.recoverable()? {
        if record.status != Status::Interrupted {
            continue;
        }
        if client.registry().latest(&record.kind).is_some() {
            served.push(record.execution_id);
        } else if journal.read(|conn| store::is_runtime_execution(conn, record.execution_id))? {
            *unknown.entry(record.kind).or_default() += 1;
        }
    }
    for batch in served.chunks(RECOVERY_BATCH_MAX) {
        let (batch, now) = (batch.to_vec(), client.now());
        let (requeued, stuck) = journal
            .write(move |conn| {
                let (mut requeued, mut stuck) = (0, 0);
                for id in batch {
                    // Its holder died with a cancel request pending: cancel, not resume.
                    if cancel_if_requested(conn, id, now)? {
                        continue;
                    }
                    let steps = recorded_steps(conn, id)?;
                    // Hand-driven executions of a served kind have no runtime row: not ours.
                    let Some((failures, last)) = store::count_failed_run(conn, id, steps)? else {
                        continue;
                    };
                    if failures >= resume_failures_max {
                        let last: Option<serde_json::Value> =
                            last.and_then(|text| serde_json::from_str(&text).ok());
                        let detail = json!({ "failures": failures, "last": last });
                        stuck += usize::from(park_stuck(conn, id, now, &detail)?);
                    } else {
                        requeued += usize::from(requeue_interrupted(conn, id, now, None)?);
                    }
                }
                Ok((requeued, stuck))
            })
            .await?;
        report.requeued += requeued;
        report.stuck += stuck;
    }
    report.unknown_kinds = unknown.into_iter().collect();
    if !report.unknown_kinds.is_empty() {
        tracing::warn!(
            unknown_kinds = ?report.unknown_kinds,
            "interrupted executions of kinds this runtime does not serve were left alone"
        );
    }
    Ok(report)
}
