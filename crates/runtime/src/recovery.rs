//! Recovery: executions whose run ended abnormally (their process died, or a step error
//! stopped them) are put back in their queue, unless they keep failing without progress, in
//! which case they are parked `stuck` for an operator instead of being retried forever.
//!
//! A run **failed** when its execution is found `interrupted`: the journal's sweep marks so an
//! execution whose holder died or released it without ending it. It made **progress** when it
//! recorded a step after its claim (`steps_at_open`). Consecutive failures without progress
//! are counted in `resume_failures`; at the runtime's maximum the execution is `stuck`, with
//! the count and the last failure as its status detail.
//!
//! The pass reads the interrupted executions a page at a time (a keyset page on the journal's
//! status index, [`RECOVERY_BATCH_MAX`] rows) and moves each page's executions in one
//! transaction, so its memory and each transaction's length are bounded however many
//! executions a crash left, and a crash between two batches leaves every execution either
//! moved with its failure counted once, or untouched for the next pass.

use std::collections::BTreeMap;

use durably_db::Connection;
use durably_journal::lifecycle::{
    InterruptedRow, interrupted_after, park_stuck, recorded_steps, requeue_interrupted,
};
use durably_journal::{Status, execution_status};
use serde_json::json;
use uuid::Uuid;

use crate::cancel::cancel_if_requested;
use crate::client::Client;
use crate::error::Result;
use crate::registry::Registry;
use crate::store;

/// The default of [`crate::RuntimeBuilder::resume_failures_max`].
pub const RESUME_FAILURES_MAX_DEFAULT: u32 = 3;

/// The most interrupted executions one recovery page reads, and so the most one recovery
/// transaction moves.
pub(crate) const RECOVERY_BATCH_MAX: u32 = 512;

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
    /// Queued executions of kinds this runtime serves, at versions it does not serve, left
    /// queued for a process that serves them: (kind, version, count), counted at start among
    /// the first [`OTHER_VERSIONS_SCAN_MAX`] queued executions of its kinds.
    pub other_versions: Vec<(String, u32, usize)>,
}

/// The most queued executions the start of a runtime reads to count
/// [`RecoveryReport::other_versions`].
pub const OTHER_VERSIONS_SCAN_MAX: u32 = 10_000;

/// Counts the queued executions of `registry`'s kinds at versions it does not serve (see
/// [`RecoveryReport::other_versions`]), and warns when there are any: an execution of a
/// version no process serves waits until one does.
pub(crate) fn count_other_versions(client: &Client, report: &mut RecoveryReport) -> Result<()> {
    let served: Vec<(&str, u32)> = client.registry().kinds().collect();
    report.other_versions = client
        .journal()
        .read(|conn| store::queued_other_versions(conn, &served, OTHER_VERSIONS_SCAN_MAX))?;
    if !report.other_versions.is_empty() {
        tracing::warn!(
            other_versions = ?report.other_versions,
            "queued executions of versions this runtime does not serve wait for a process \
             that serves them"
        );
    }
    Ok(())
}

/// One page of interrupted executions, sorted by whom they concern.
struct Page {
    /// Started through the runtime, of a kind this process serves: to move.
    served: Vec<Uuid>,
    /// The kind of each one started through the runtime that this process does not serve.
    unknown: Vec<String>,
    /// Where the next page starts; `None` when this page was the last.
    next: Option<i64>,
}

/// One recovery pass: sweeps the journal (dead holders' and released executions become
/// `interrupted`), then requeues or parks every interrupted execution of a served kind, a
/// page of at most [`RECOVERY_BATCH_MAX`] per transaction. Hand-driven executions (no
/// `runtime_executions` row) are never touched.
pub(crate) async fn recover(client: &Client, resume_failures_max: u32) -> Result<RecoveryReport> {
    let journal = client.journal();
    journal.operator().sweep(false).await?;
    let mut report = RecoveryReport::default();
    let mut unknown: BTreeMap<String, usize> = BTreeMap::new();
    let mut after = None;
    loop {
        let page = journal.read(|conn| read_page(conn, client.registry(), after))?;
        for kind in page.unknown {
            *unknown.entry(kind).or_default() += 1;
        }
        if !page.served.is_empty() {
            let (served, now) = (page.served, client.now());
            let (requeued, stuck) = journal
                .write(move |conn| move_page(conn, &served, now, resume_failures_max))
                .await?;
            report.requeued += requeued;
            report.stuck += stuck;
            fail::fail_point!("runtime::after-recovery-batch", |_| std::process::abort());
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
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

/// Reads the page of interrupted executions after `after` and sorts it: the runtime's
/// executions (a `runtime_executions` row, one seek each) of served kinds, and the kinds of
/// the others.
fn read_page(
    conn: &Connection,
    registry: &Registry,
    after: Option<i64>,
) -> durably_journal::Result<Page> {
    let rows = interrupted_after(conn, after, RECOVERY_BATCH_MAX)?;
    let next = rows
        .last()
        .filter(|_| rows.len() == RECOVERY_BATCH_MAX as usize)
        .map(|last| last.position);
    let mut page = Page {
        served: Vec::with_capacity(rows.len()),
        unknown: Vec::new(),
        next,
    };
    for InterruptedRow { id, kind, .. } in rows {
        if !store::is_runtime_execution(conn, id)? {
            continue;
        }
        if registry.latest(&kind).is_some() {
            page.served.push(id);
        } else {
            page.unknown.push(kind);
        }
    }
    Ok(page)
}

/// Counts the failed run of each execution of `served` still `interrupted` (another process
/// may have moved it since the page was read) and requeues it, or parks it `stuck` at
/// `resume_failures_max`. Returns (requeued, stuck).
fn move_page(
    conn: &Connection,
    served: &[Uuid],
    now: chrono::DateTime<chrono::Utc>,
    resume_failures_max: u32,
) -> durably_journal::Result<(usize, usize)> {
    let (mut requeued, mut stuck) = (0, 0);
    for &id in served {
        // Checked before counting, so a run is counted once however many processes recover.
        if execution_status(conn, id)? != Some(Status::Interrupted) {
            continue;
        }
        // Its holder died with a cancel request pending: cancel, not resume.
        if cancel_if_requested(conn, id, now)? {
            continue;
        }
        let steps = recorded_steps(conn, id)?;
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
}
