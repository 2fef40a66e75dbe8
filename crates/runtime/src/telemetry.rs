//! What the runtime tells `metrics` and `tracing`, beside the journal's spans and metrics
//! (`durably_journal::telemetry`): the runs this process holds, the journal's unfinished
//! executions by status and queue, and the spans that runs nest under. docs/observability.md
//! documents each.
//!
//! Invariant: labels take a status word or a queue name this process was configured with,
//! never an id, so a gauge's series are bounded by the configuration.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use durably_journal::Status;
use durably_journal::lifecycle::{count_in_status, queued_in_queue};
use uuid::Uuid;

use crate::capacity::QueueKey;
use crate::client::Client;

/// Gauge: runs this process holds now (claimed or run through [`crate::Runtime::run`]).
pub const METRIC_RUNS_HERE: &str = "durably_runtime_runs";
/// Gauge: the journal's unfinished executions, by status, over every process.
pub const METRIC_EXECUTIONS: &str = "durably_executions";
/// Gauge: queued executions of each queue this process serves, over every process.
pub const METRIC_QUEUE_DEPTH: &str = "durably_queue_depth";

/// Every metric the runtime records, for tests and docs that check the list.
pub const METRICS: [&str; 3] = [METRIC_RUNS_HERE, METRIC_EXECUTIONS, METRIC_QUEUE_DEPTH];

/// The `queue` label of executions started without a queue.
pub const NO_QUEUE_LABEL: &str = "";

/// The statuses [`METRIC_EXECUTIONS`] counts: every status of unfinished work. Finished
/// executions are history, whose count only grows; `durably ls` and SQL count those.
const COUNTED: [Status; 6] = [
    Status::Queued,
    Status::Running,
    Status::Waiting,
    Status::Interrupted,
    Status::Stuck,
    Status::AwaitingOperator,
];

/// Sets [`METRIC_RUNS_HERE`].
pub(crate) fn runs_here(runs: u32) {
    metrics::gauge!(METRIC_RUNS_HERE).set(f64::from(runs));
}

/// Reads the counts behind [`METRIC_EXECUTIONS`] and [`METRIC_QUEUE_DEPTH`] (one index range
/// per status and per served queue) and sets the gauges. Run with each recovery pass, so the
/// gauges are at most a sweep interval old.
///
/// # Errors
/// A storage error; the gauges keep their last values.
pub(crate) fn publish_counts(client: &Client, queues: &[QueueKey]) -> crate::Result<()> {
    let (statuses, depths) = client.journal().read(|conn| {
        let statuses = COUNTED
            .iter()
            .map(|status| count_in_status(conn, *status))
            .collect::<durably_journal::Result<Vec<u64>>>()?;
        let depths = queues
            .iter()
            .map(|queue| queued_in_queue(conn, queue.as_deref()))
            .collect::<durably_journal::Result<Vec<u64>>>()?;
        Ok((statuses, depths))
    })?;
    for (status, count) in COUNTED.iter().zip(statuses) {
        metrics::gauge!(METRIC_EXECUTIONS, "status" => status.as_str()).set(count as f64);
    }
    for (queue, depth) in queues.iter().zip(depths) {
        let label = queue.clone().unwrap_or_else(|| NO_QUEUE_LABEL.to_owned());
        metrics::gauge!(METRIC_QUEUE_DEPTH, "queue" => label).set(depth as f64);
    }
    Ok(())
}

/// The most spans [`SpanParents`] keeps; past it the oldest is forgotten (its run's span is
/// then a root).
pub const SPAN_PARENTS_MAX: usize = 1024;

/// Spans that the next run of an execution in this process nests its `durably.execution`
/// span under (a scheduler's `durably.fire`), kept until that run begins, at most
/// [`SPAN_PARENTS_MAX`].
#[derive(Debug, Default)]
pub(crate) struct SpanParents {
    spans: Mutex<VecDeque<(Uuid, tracing::Span)>>,
}

impl SpanParents {
    /// Keeps `span` for execution `id`. A disabled span (no subscriber wants it) is not kept.
    pub(crate) fn keep(&self, id: Uuid, span: tracing::Span) {
        if span.is_disabled() {
            return;
        }
        let mut spans = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
        if spans.len() >= SPAN_PARENTS_MAX {
            spans.pop_front();
        }
        spans.push_back((id, span));
    }

    /// Takes the span kept for execution `id`, if any.
    pub(crate) fn take(&self, id: Uuid) -> Option<tracing::Span> {
        let mut spans = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
        let at = spans.iter().position(|(kept, _)| *kept == id)?;
        spans.remove(at).map(|(_, span)| span)
    }
}
