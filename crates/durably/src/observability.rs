//! The names of the spans durably opens and the metrics it records, in one place, for programs
//! that filter, route or check them. docs/observability.md documents every span's fields and
//! every metric's type, labels and meaning, and how to plug in an exporter.
//!
//! durably records through the `tracing` and `metrics` facades and installs nothing: the
//! program picks the subscriber and the recorder. With none installed, recording costs next
//! to nothing and allocates nothing.

pub use durably_journal::telemetry::{
    METRIC_AMBIGUOUS, METRIC_BATCH_REQUESTS, METRIC_COMMIT_SECONDS, METRIC_COMMITS,
    METRIC_FSYNC_SECONDS, METRIC_QUEUE_DEPTH as METRIC_WRITER_QUEUE_DEPTH, METRIC_RUNS_ENDED,
    METRIC_RUNS_STARTED, METRIC_STEP_RETRIES, METRIC_STEP_SECONDS, METRIC_STEPS,
    METRIC_STEPS_REPLAYED, METRIC_TAKEOVERS, SPAN_EXECUTION, SPAN_STEP, SPAN_WRITER_BATCH,
};
pub use durably_runtime::telemetry::{
    METRIC_EXECUTIONS, METRIC_QUEUE_DEPTH, METRIC_RUNS_HERE, NO_QUEUE_LABEL, SPAN_PARENTS_MAX,
};
pub use durably_scheduler::telemetry::{METRIC_FIRES, SPAN_FIRE};

/// Every span durably opens, outermost first: a fire, a run of an execution, a step; and the
/// writer's batches, on the writer thread.
pub const SPANS: [&str; 4] = [SPAN_FIRE, SPAN_EXECUTION, SPAN_STEP, SPAN_WRITER_BATCH];

/// Every metric durably records.
pub const METRICS: [&str; 17] = [
    METRIC_STEPS,
    METRIC_STEPS_REPLAYED,
    METRIC_STEP_SECONDS,
    METRIC_STEP_RETRIES,
    METRIC_AMBIGUOUS,
    METRIC_RUNS_STARTED,
    METRIC_RUNS_ENDED,
    METRIC_TAKEOVERS,
    METRIC_COMMITS,
    METRIC_BATCH_REQUESTS,
    METRIC_COMMIT_SECONDS,
    METRIC_FSYNC_SECONDS,
    METRIC_WRITER_QUEUE_DEPTH,
    METRIC_RUNS_HERE,
    METRIC_EXECUTIONS,
    METRIC_QUEUE_DEPTH,
    METRIC_FIRES,
];

// The list above holds each crate's list, so a metric added to a crate is added here too.
const _: () = assert!(
    METRICS.len()
        == durably_journal::telemetry::METRICS.len()
            + durably_runtime::telemetry::METRICS.len()
            + durably_scheduler::telemetry::METRICS.len()
);

/// docs/observability.md's code, compiled and run as doctests so it cannot rot.
#[doc = include_str!("../../../docs/observability.md")]
#[cfg(doctest)]
pub struct ObservabilityDoctests;
