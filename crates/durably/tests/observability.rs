//! What docs/observability.md promises, checked on a real run: a scheduled fire whose workflow
//! retries a pure step and whose guarded step times out with its intent committed (the
//! execution goes back to its queue), so the next run finds the step ambiguous and its Retry
//! policy runs it again. A `tracing` layer records every span and event with all its fields,
//! and metrics-util's debugging recorder every metric.
//!
//! Checked: each documented span appears with its documented fields, nested fire > execution >
//! step; each documented metric that such a run records appears, the ambiguity counted by its
//! policy's decision; and no payload (the workflow's input, a step's output, a step's error
//! text, the workflow's output) appears in any span field, event field or metric label.
//!
//! The recorder and the subscriber are process-wide (the writer thread records too), so this
//! file holds one test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durably::observability::{self, METRICS, SPANS};
use durably::runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError};
use durably::scheduler::{Fire, Job, Scheduler};
use durably::{Guarded, Journal, Policy, StepError};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Payloads: values the workflows take, compute and return. None may leave the journal.
const SECRET_INPUT: &str = "secret-input-4711";
const SECRET_OUTPUT: &str = "secret-output-4712";
const SECRET_ERROR: &str = "secret-error-4713";
const SECRET_RESULT: &str = "secret-result-4714";
const SECRETS: [&str; 4] = [SECRET_INPUT, SECRET_OUTPUT, SECRET_ERROR, SECRET_RESULT];

/// Calls of the flaky step and of the guarded step's closure, across runs.
static FLAKY_CALLS: AtomicU32 = AtomicU32::new(0);
static SEND_CALLS: AtomicU32 = AtomicU32::new(0);

/// The scheduled workflow: a pure step that fails once with a retryable error, then a guarded
/// step that hangs on its first call past its timeout (its intent committed), and succeeds on
/// the re-run its Retry policy decides.
async fn nightly(ctx: WorkflowContext, _fire: Fire) -> Result<String, WorkflowError> {
    let drafted = ctx
        .pure("draft", || async { Ok(SECRET_OUTPUT.to_owned()) })
        .await?;
    ctx.pure("flaky", || async {
        if FLAKY_CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(StepError::retryable(SECRET_ERROR));
        }
        Ok(())
    })
    .await?;
    let sent = ctx
        .step("send")
        .timeout(Duration::from_millis(300))
        .guarded(Policy::Retry, |_key| async {
            if SEND_CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
                std::future::pending::<()>().await;
            }
            Ok(SECRET_RESULT.to_owned())
        })
        .await?;
    match sent {
        Guarded::Done(receipt) => Ok(format!("{drafted} {receipt}")),
        Guarded::Skipped(_) => Err(WorkflowError::new("skipped")),
    }
}

/// A workflow whose input and output are payloads.
async fn echo(ctx: WorkflowContext, input: String) -> Result<String, WorkflowError> {
    let echoed = ctx.pure("echo", || async { Ok(input.clone()) }).await?;
    Ok(echoed)
}

/// A span as recorded: its name, its parent's name, and its fields as text.
#[derive(Debug, Clone)]
struct SpanSeen {
    name: &'static str,
    parent: Option<&'static str>,
    fields: BTreeMap<String, String>,
}

/// Everything the layer saw.
#[derive(Debug, Default)]
struct Seen {
    spans: BTreeMap<u64, SpanSeen>,
    events: Vec<BTreeMap<String, String>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// A layer that records every span, its later fields, and every event.
struct Capture(Arc<Mutex<Seen>>);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent())
            .map(|p| p.name());
        let seen = SpanSeen {
            name: attrs.metadata().name(),
            parent,
            fields,
        };
        self.0.lock().unwrap().spans.insert(id.into_u64(), seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some(span) = self.0.lock().unwrap().spans.get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().events.push(fields);
    }
}

/// The spans named `name`.
fn spans_named(seen: &Seen, name: &str) -> Vec<SpanSeen> {
    seen.spans
        .values()
        .filter(|span| span.name == name)
        .cloned()
        .collect()
}

fn assert_fields(span: &SpanSeen, fields: &[&str]) {
    for field in fields {
        assert!(
            span.fields.contains_key(*field),
            "{field} missing: {span:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_an_ambiguous_step_records_the_documented_spans_and_metrics_and_no_payload() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let subscriber = tracing_subscriber::registry().with(Capture(Arc::clone(&seen)));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path().join("observability.db")).unwrap();
    let runtime = Runtime::builder(journal)
        .register("nightly", 1, nightly)
        .register("echo", 1, echo)
        .start()
        .await
        .unwrap();
    let scheduler = Scheduler::new((*runtime).clone()).await.unwrap();
    let job = Job::builder("nightly")
        .interval(Duration::from_hours(24), 0)
        .workflow("nightly")
        .build()
        .unwrap();
    let job_id = job.id().clone();
    scheduler.register(job).await.unwrap();

    let (_, fired) = scheduler.trigger(&job_id).await.unwrap();
    let output: String = runtime.handle(fired.execution_id()).result().await.unwrap();
    assert_eq!(output, format!("{SECRET_OUTPUT} {SECRET_RESULT}"));
    assert_eq!(
        SEND_CALLS.load(Ordering::SeqCst),
        2,
        "the ambiguous step ran again"
    );
    let id = durably::new_execution_id();
    let echoed: String = runtime
        .run(
            "echo",
            id,
            &SECRET_INPUT.to_owned(),
            StartOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(echoed, SECRET_INPUT);

    let seen = seen.lock().unwrap();
    let fires = spans_named(&seen, observability::SPAN_FIRE);
    assert_eq!(fires.len(), 1, "{fires:?}");
    assert_fields(&fires[0], &["fire_id", "schedule", "slot", "outcome"]);
    let executions = spans_named(&seen, observability::SPAN_EXECUTION);
    assert_eq!(
        executions.len(),
        3,
        "two runs of the fire, one of echo: {executions:?}"
    );
    for execution in &executions {
        assert_fields(execution, &["execution_id", "kind", "resumed", "status"]);
    }
    assert!(
        executions
            .iter()
            .any(|run| run.parent == Some(observability::SPAN_FIRE)),
        "the fire's first run nests under the fire: {executions:?}"
    );
    let ended: Vec<&str> = executions
        .iter()
        .map(|run| run.fields["status"].as_str())
        .collect();
    assert!(
        ended.contains(&"\"queued\""),
        "the timed-out run was requeued: {ended:?}"
    );
    let steps = spans_named(&seen, observability::SPAN_STEP);
    for step in &steps {
        assert_eq!(step.parent, Some(observability::SPAN_EXECUTION), "{step:?}");
        let fields = [
            "execution_id",
            "seq",
            "name",
            "effect",
            "replayed",
            "outcome",
        ];
        assert_fields(step, &fields);
    }
    let resolved = steps
        .iter()
        .find(|step| step.fields["name"] == "\"send\"" && step.fields["outcome"] == "\"done\"")
        .expect("the guarded step's re-run");
    assert_fields(resolved, &["policy", "attempt"]);
    assert_eq!(resolved.fields["attempt"], "2", "{resolved:?}");
    let batches = spans_named(&seen, observability::SPAN_WRITER_BATCH);
    assert!(!batches.is_empty());
    for batch in &batches {
        assert_fields(batch, &["size", "outcome"]);
    }

    // Every span has a documented name.
    for span in seen.spans.values() {
        assert!(SPANS.contains(&span.name), "undocumented span {span:?}");
    }
    let texts = seen
        .spans
        .values()
        .flat_map(|span| span.fields.values())
        .chain(seen.events.iter().flat_map(BTreeMap::values));
    for text in texts {
        for secret in SECRETS {
            assert!(!text.contains(secret), "a payload was traced: {text}");
        }
    }

    let metrics = snapshotter.snapshot().into_vec();
    let names: Vec<&str> = metrics.iter().map(|(key, ..)| key.key().name()).collect();
    // A takeover needs a dead holder: crates/journal's tests count those.
    for name in METRICS
        .iter()
        .filter(|name| **name != observability::METRIC_TAKEOVERS)
    {
        assert!(names.contains(name), "{name} was not recorded: {names:?}");
    }
    for (key, ..) in &metrics {
        assert!(METRICS.contains(&key.key().name()), "undocumented {key:?}");
        for label in key.key().labels() {
            for secret in SECRETS {
                assert!(!label.value().contains(secret), "a payload labels {key:?}");
            }
        }
    }
    let counter = |name: &str, labels: &[(&str, &str)]| -> u64 {
        metrics
            .iter()
            .filter(|(key, ..)| key.key().name() == name)
            .filter(|(key, ..)| {
                labels.iter().all(|(k, v)| {
                    key.key()
                        .labels()
                        .any(|label| label.key() == *k && label.value() == *v)
                })
            })
            .map(|(.., value)| match value {
                DebugValue::Counter(count) => *count,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    };
    let ambiguous = [("policy", "retry"), ("decision", "rerun")];
    assert_eq!(counter(observability::METRIC_AMBIGUOUS, &ambiguous), 1);
    assert_eq!(
        counter(observability::METRIC_STEP_RETRIES, &[("effect", "pure")]),
        1
    );
    assert_eq!(
        counter(observability::METRIC_RUNS_ENDED, &[("status", "queued")]),
        1
    );
    assert_eq!(
        counter(observability::METRIC_RUNS_STARTED, &[("resumed", "true")]),
        1
    );
    assert_eq!(
        counter(observability::METRIC_FIRES, &[("outcome", "started")]),
        1
    );
    assert!(counter(observability::METRIC_STEPS_REPLAYED, &[("effect", "pure")]) >= 2);
    let done = [("effect", "guarded"), ("outcome", "done")];
    assert_eq!(counter(observability::METRIC_STEPS, &done), 1);
}
