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

/// Every metric durably records: the journal's, the runtime's, then the scheduler's.
pub const METRICS: [&str; 17] = concatenated([
    &durably_journal::telemetry::METRICS,
    &durably_runtime::telemetry::METRICS,
    &durably_scheduler::telemetry::METRICS,
]);

/// The lists `parts` end to end; fails to compile unless they hold exactly `N` names, so a
/// metric added to a crate's list must be counted here.
const fn concatenated<const N: usize>(parts: [&[&'static str]; 3]) -> [&'static str; N] {
    let mut names = [""; N];
    let (mut filled, mut part) = (0, 0);
    while part < parts.len() {
        let mut at = 0;
        while at < parts[part].len() {
            names[filled] = parts[part][at];
            filled += 1;
            at += 1;
        }
        part += 1;
    }
    assert!(
        filled == N,
        "METRICS's length is not the sum of the crates' lists"
    );
    names
}

/// docs/observability.md's code, compiled and run as doctests so it cannot rot.
#[doc = include_str!("../../../docs/observability.md")]
#[cfg(doctest)]
pub struct ObservabilityDoctests;
