//! What the scheduler tells `tracing` and `metrics`: a `durably.fire` span and a count for
//! each fire decided, and the fire's run nested under its span. docs/observability.md
//! documents both.

use durably_runtime::Client;

use crate::job::Job;
use crate::outcome::FireOutcome;
use crate::slot::Slot;

/// The span of one fire decided by this process. A fire it started stays open until the
/// fire's run begins in this process, whose `durably.execution` span nests under it.
pub const SPAN_FIRE: &str = "durably.fire";
/// Counter: fires decided by this process, by outcome.
pub const METRIC_FIRES: &str = "durably_scheduler_fires_total";

/// Every metric the scheduler records, for tests and docs that check the list.
pub const METRICS: [&str; 1] = [METRIC_FIRES];

/// Counts the fires of `job` that one committed transaction decided, and opens each one's
/// span. A started fire's span is handed to `client` as the parent of its run's span.
pub(crate) fn fires_decided(client: &Client, job: &Job, fires: &[(Slot, FireOutcome)]) {
    for (slot, outcome) in fires {
        let word = match outcome {
            FireOutcome::Started { .. } => {
                metrics::counter!(METRIC_FIRES, "outcome" => "started").increment(1);
                "started"
            }
            FireOutcome::Existing { .. } => {
                metrics::counter!(METRIC_FIRES, "outcome" => "existing").increment(1);
                "existing"
            }
            FireOutcome::Skipped { .. } => {
                metrics::counter!(METRIC_FIRES, "outcome" => "skipped").increment(1);
                "skipped"
            }
        };
        let id = outcome.execution_id();
        let span = tracing::info_span!(
            SPAN_FIRE,
            fire_id = %id,
            schedule = job.id.as_str(),
            slot = %slot,
            outcome = word,
        );
        if outcome.started_here() {
            client.set_parent_span(id, &job.workflow, span);
        }
    }
}
