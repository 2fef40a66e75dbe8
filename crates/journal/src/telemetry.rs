//! What the journal tells `tracing` and `metrics`: its span names and metric names, and the
//! functions that record them. docs/observability.md documents each span's fields and each
//! metric's type, labels and meaning.
//!
//! Invariants: no field or label carries a payload (an input, an output, a step's error text,
//! a message); labels take a few fixed words, never an id. Every metric key is built at compile
//! time from static words, so a record allocates nothing: with no recorder installed it is a
//! thread-local read and an atomic load, and no more.

use std::time::Duration;

use metrics::{Key, Label, Level, Metadata};

use crate::states::{PolicyKind, Status};
use crate::step::Effect;

/// The span of one run of an execution: from its open (or claim, or deferred begin) until its
/// handle ends it or is dropped.
pub const SPAN_EXECUTION: &str = "durably.execution";
/// The span of one step call of an execution, a child of its execution's span.
pub const SPAN_STEP: &str = "durably.step";
/// The span of one batch of the group-commit writer, on the writer thread: `BEGIN IMMEDIATE`
/// through `COMMIT`, and the WAL's fsync when the writer makes it itself.
pub const SPAN_WRITER_BATCH: &str = "durably.writer.batch";

/// Counter: steps that ran (or whose ambiguity was resolved) in this process, by effect and
/// outcome.
pub const METRIC_STEPS: &str = "durably_steps_total";
/// Counter: steps answered from their recorded outcome without running, by effect.
pub const METRIC_STEPS_REPLAYED: &str = "durably_steps_replayed_total";
/// Histogram, seconds: a step's life from its call to its outcome, for steps that ran.
pub const METRIC_STEP_SECONDS: &str = "durably_step_duration_seconds";
/// Counter: attempts of a step retried after a retryable error, by effect.
pub const METRIC_STEP_RETRIES: &str = "durably_step_retries_total";
/// Counter: guarded steps found in the ambiguous window, by policy and what it decided.
pub const METRIC_AMBIGUOUS: &str = "durably_ambiguous_steps_total";
/// Counter: runs of executions begun in this process, by whether they resumed.
pub const METRIC_RUNS_STARTED: &str = "durably_runs_started_total";
/// Counter: runs ended in this process, by the status they left their execution in.
pub const METRIC_RUNS_ENDED: &str = "durably_runs_ended_total";
/// Counter: locks taken from a holder that is dead or leaked, by who took them and why.
pub const METRIC_TAKEOVERS: &str = "durably_takeovers_total";
/// Counter: the writer's transactions, by outcome.
pub const METRIC_COMMITS: &str = "durably_writer_commits_total";
/// Histogram: requests per writer batch.
pub const METRIC_BATCH_REQUESTS: &str = "durably_writer_batch_requests";
/// Histogram, seconds: a batch from `BEGIN IMMEDIATE` until `COMMIT` returned.
pub const METRIC_COMMIT_SECONDS: &str = "durably_writer_commit_duration_seconds";
/// Histogram, seconds: one fsync of the WAL by the writer or its syncer.
pub const METRIC_FSYNC_SECONDS: &str = "durably_writer_fsync_duration_seconds";
/// Gauge: requests waiting for the writer, sampled each time it takes a batch.
pub const METRIC_QUEUE_DEPTH: &str = "durably_writer_queue_depth";

/// Every metric the journal records, for tests and docs that check the list.
pub const METRICS: [&str; 13] = [
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
    METRIC_QUEUE_DEPTH,
];

/// The metadata every record carries: this crate, at INFO.
static METADATA: Metadata<'static> =
    Metadata::new("durably_journal", Level::INFO, Some(module_path!()));

/// Static keys of one metric: one per value of one label, or a table over the values of two.
macro_rules! keys {
    ($name:expr, $label:literal => [$($value:literal),* $(,)?]) => {
        [$({
            static LABELS: [Label; 1] = [Label::from_static_parts($label, $value)];
            Key::from_static_parts($name, &LABELS)
        }),*]
    };
    ($name:expr, $first:literal => [$($value:literal),* $(,)?], $second:literal => $values:tt) => {
        [$(keys!(@row $name, $first => $value, $second => $values)),*]
    };
    (@row $name:expr, $first:literal => $value:literal, $second:literal => [$($other:literal),*]) => {
        [$({
            static LABELS: [Label; 2] = [
                Label::from_static_parts($first, $value),
                Label::from_static_parts($second, $other),
            ];
            Key::from_static_parts($name, &LABELS)
        }),*]
    };
}

/// How a step call ended, as the `outcome` field and label say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepEnd {
    Done,
    Skipped,
    Failed,
    Ambiguous,
    LockLost,
    NonDeterminism,
    CancelRequested,
    Error,
    /// The step's future was dropped before its outcome (a timeout, the loser of a
    /// `select!`): the handle halted at it.
    Dropped,
}

impl StepEnd {
    /// The word of the `outcome` field and label.
    pub(crate) fn as_str(self) -> &'static str {
        STEP_ENDS[self as usize]
    }
}

const STEP_ENDS: [&str; 9] = [
    "done",
    "skipped",
    "failed",
    "ambiguous",
    "lock_lost",
    "non_determinism",
    "cancel_requested",
    "error",
    "dropped",
];

static STEPS: [[Key; 9]; 3] = keys!(METRIC_STEPS,
    "effect" => ["pure", "idempotent", "guarded"],
    "outcome" => ["done", "skipped", "failed", "ambiguous", "lock_lost", "non_determinism",
        "cancel_requested", "error", "dropped"]);
static STEPS_REPLAYED: [Key; 3] =
    keys!(METRIC_STEPS_REPLAYED, "effect" => ["pure", "idempotent", "guarded"]);
static STEP_SECONDS: [Key; 3] =
    keys!(METRIC_STEP_SECONDS, "effect" => ["pure", "idempotent", "guarded"]);
static STEP_RETRIES: [Key; 3] =
    keys!(METRIC_STEP_RETRIES, "effect" => ["pure", "idempotent", "guarded"]);

fn effect_index(effect: Effect) -> usize {
    match effect {
        Effect::Pure => 0,
        Effect::Idempotent => 1,
        Effect::Guarded => 2,
    }
}

/// What a step call records when it ends: its span's `outcome` and its count, with its
/// duration when it ran. A step whose future is dropped first records [`StepEnd::Dropped`].
pub(crate) struct StepRecord {
    span: tracing::Span,
    effect: Effect,
    replayed: bool,
    began: std::time::Instant,
    ended: bool,
}

impl StepRecord {
    /// Starts the record of a step call in `span`; `replayed` when its recorded outcome
    /// answers it.
    pub(crate) fn new(span: tracing::Span, effect: Effect, replayed: bool) -> Self {
        Self {
            span,
            effect,
            replayed,
            began: std::time::Instant::now(),
            ended: false,
        }
    }

    /// Records the step's end.
    pub(crate) fn end(mut self, end: StepEnd) {
        self.ended = true;
        self.record(end);
    }

    fn record(&self, end: StepEnd) {
        self.span.record("outcome", end.as_str());
        let effect = effect_index(self.effect);
        if self.replayed {
            increment(&STEPS_REPLAYED[effect]);
        } else {
            increment(&STEPS[effect][end as usize]);
            record(&STEP_SECONDS[effect], self.began.elapsed().as_secs_f64());
        }
    }
}

impl Drop for StepRecord {
    fn drop(&mut self) {
        if !self.ended {
            self.record(StepEnd::Dropped);
        }
    }
}

/// Counts a retry of a step after a retryable error.
pub(crate) fn step_retried(effect: Effect) {
    increment(&STEP_RETRIES[effect_index(effect)]);
}

/// What an ambiguity policy decided about a step found in the ambiguous window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The effect runs again with the same key (Retry, or Reconcile that found nothing).
    Rerun,
    /// The step is recorded skipped (Skip).
    Skipped,
    /// The probe found the effect's outcome, recorded as the step's (Reconcile).
    Reconciled,
    /// The execution waits for an operator (Fail, or a re-run limit reached).
    AwaitingOperator,
}

static AMBIGUOUS: [[Key; 4]; 4] = keys!(METRIC_AMBIGUOUS,
    "policy" => ["skip", "retry", "fail", "reconcile"],
    "decision" => ["rerun", "skipped", "reconciled", "awaiting_operator"]);

/// Counts a policy's decision on an ambiguous step, once it is committed.
pub(crate) fn ambiguity_decided(policy: PolicyKind, decision: Decision) {
    increment(&AMBIGUOUS[policy_index(policy)][decision as usize]);
}

fn policy_index(policy: PolicyKind) -> usize {
    match policy {
        PolicyKind::Skip => 0,
        PolicyKind::Retry => 1,
        PolicyKind::Fail => 2,
        PolicyKind::Reconcile => 3,
    }
}

static RUNS_STARTED: [Key; 2] = keys!(METRIC_RUNS_STARTED, "resumed" => ["false", "true"]);

/// The span of one run of execution `id` of `kind`, a child of the current span. Its
/// `resumed` field is recorded once the open knows, and `status` when the run ends.
pub(crate) fn execution_span(id: uuid::Uuid, kind: &str) -> tracing::Span {
    tracing::info_span!(
        SPAN_EXECUTION,
        execution_id = %id,
        kind,
        resumed = tracing::field::Empty,
        status = tracing::field::Empty,
    )
}

/// Counts a run begun on an execution.
pub(crate) fn run_started(resumed: bool) {
    increment(&RUNS_STARTED[usize::from(resumed)]);
}

/// How a run ended, as the `status` label of [`METRIC_RUNS_ENDED`] and the execution span's
/// `status` field say it: the status it left its execution in, or `dropped` for a handle
/// dropped without an end (the execution stays `running`, to be resumed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunEnd {
    Status(Status),
    Dropped,
}

impl RunEnd {
    /// The word of the label and field.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Status(status) => status.as_str(),
            Self::Dropped => "dropped",
        }
    }
}

static RUNS_ENDED: [Key; 7] = keys!(METRIC_RUNS_ENDED,
    "status" => ["completed", "failed", "cancelled", "waiting", "queued", "stuck", "dropped"]);

/// Counts a run's end.
pub(crate) fn run_ended(end: RunEnd) {
    increment(&RUNS_ENDED[run_end_index(end)]);
}

fn run_end_index(end: RunEnd) -> usize {
    match end {
        RunEnd::Status(Status::Completed) => 0,
        RunEnd::Status(Status::Failed) => 1,
        RunEnd::Status(Status::Cancelled) => 2,
        RunEnd::Status(Status::Waiting) => 3,
        RunEnd::Status(Status::Queued) => 4,
        RunEnd::Status(Status::Stuck) => 5,
        // A run ends in none of these; counted with the runs that left their execution open.
        RunEnd::Status(Status::Running | Status::Interrupted | Status::AwaitingOperator)
        | RunEnd::Dropped => 6,
    }
}

/// Who took a lock over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakenBy {
    /// An open, a claim or an operator action that needed the lock.
    Acquire,
    /// The crash-orphan sweep.
    Sweep,
}

/// Why a lock was taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakenBecause {
    /// Its holder is dead (exited, another boot, a reused pid, a zombie).
    Dead,
    /// Its holder's lease expired; the holder may still be alive.
    LeaseExpired,
    /// This process leaked it (its handle went away before the release committed).
    Leaked,
}

impl TakenBecause {
    /// The reason a lock judged dead was taken for.
    pub(crate) fn of(reason: &durably_lock::DeathReason) -> Self {
        match reason {
            durably_lock::DeathReason::LeaseExpired { .. } => Self::LeaseExpired,
            _ => Self::Dead,
        }
    }
}

static TAKEOVERS: [[Key; 3]; 2] = keys!(METRIC_TAKEOVERS,
    "by" => ["acquire", "sweep"],
    "reason" => ["dead", "lease_expired", "leaked"]);

/// Counts a takeover, written in the transaction of the caller (which may yet fail to commit:
/// the count is of takeovers made, and a failed commit is rare and counted in
/// [`METRIC_COMMITS`]).
pub(crate) fn taken_over(by: TakenBy, because: TakenBecause) {
    increment(&TAKEOVERS[by as usize][because as usize]);
}

static COMMITS: [Key; 2] = keys!(METRIC_COMMITS, "outcome" => ["committed", "failed"]);
static BATCH_REQUESTS: Key = Key::from_static_name(METRIC_BATCH_REQUESTS);
static COMMIT_SECONDS: Key = Key::from_static_name(METRIC_COMMIT_SECONDS);
static FSYNC_SECONDS: Key = Key::from_static_name(METRIC_FSYNC_SECONDS);
static QUEUE_DEPTH: Key = Key::from_static_name(METRIC_QUEUE_DEPTH);

/// Counts a batch of `requests` that committed after `elapsed`.
pub(crate) fn batch_committed(requests: usize, elapsed: Duration) {
    increment(&COMMITS[0]);
    record(&BATCH_REQUESTS, requests as f64);
    record(&COMMIT_SECONDS, elapsed.as_secs_f64());
}

/// Counts a batch of `requests` that failed: none of them committed.
pub(crate) fn batch_failed(requests: usize) {
    increment(&COMMITS[1]);
    record(&BATCH_REQUESTS, requests as f64);
}

/// Records one fsync of the WAL.
pub(crate) fn fsynced(elapsed: Duration) {
    record(&FSYNC_SECONDS, elapsed.as_secs_f64());
}

/// Sets the writer's queue depth.
pub(crate) fn queue_depth(queued: u64) {
    metrics::with_recorder(|recorder| recorder.register_gauge(&QUEUE_DEPTH, &METADATA))
        .set(queued as f64);
}

fn increment(key: &'static Key) {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA)).increment(1);
}

fn record(key: &'static Key, value: f64) {
    metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA)).record(value);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Each table's labels follow the order of the enum that indexes it, so a record lands
    /// under the words it means.
    #[test]
    fn the_key_tables_follow_their_enums() {
        let label = |key: &Key, name: &str| {
            key.labels()
                .find(|label| label.key() == name)
                .map(|label| label.value().to_owned())
                .unwrap()
        };
        for effect in [Effect::Pure, Effect::Idempotent, Effect::Guarded] {
            let row = &STEPS[effect_index(effect)];
            assert_eq!(label(&row[0], "effect"), effect.as_str());
            for (index, word) in STEP_ENDS.iter().enumerate() {
                assert_eq!(label(&row[index], "outcome"), *word);
            }
            assert_eq!(
                label(&STEP_SECONDS[effect_index(effect)], "effect"),
                effect.as_str()
            );
        }
        for end in [StepEnd::Done, StepEnd::Ambiguous, StepEnd::Error] {
            assert_eq!(label(&STEPS[0][end as usize], "outcome"), end.as_str());
        }
        for kind in PolicyKind::ALL {
            let row = &AMBIGUOUS[policy_index(*kind)];
            assert_eq!(label(&row[0], "policy"), kind.as_str());
        }
        let decisions = [
            (Decision::Rerun, "rerun"),
            (Decision::Skipped, "skipped"),
            (Decision::Reconciled, "reconciled"),
            (Decision::AwaitingOperator, "awaiting_operator"),
        ];
        for (decision, word) in decisions {
            assert_eq!(label(&AMBIGUOUS[0][decision as usize], "decision"), word);
        }
        let ends = [
            Status::Completed,
            Status::Failed,
            Status::Cancelled,
            Status::Waiting,
            Status::Queued,
            Status::Stuck,
        ]
        .map(RunEnd::Status);
        for end in ends.into_iter().chain([RunEnd::Dropped]) {
            assert_eq!(
                label(&RUNS_ENDED[run_end_index(end)], "status"),
                end.as_str()
            );
        }
        assert_eq!(label(&TAKEOVERS[TakenBy::Sweep as usize][0], "by"), "sweep");
        let leaked = &TAKEOVERS[0][TakenBecause::Leaked as usize];
        assert_eq!(label(leaked, "reason"), "leaked");
    }
}
