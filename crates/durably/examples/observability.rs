//! durably's spans and metrics on stdout: a `tracing-subscriber` fmt layer prints each span
//! as it closes (with the spans it nests in), and a Prometheus recorder's text is printed at
//! the end. A scheduled job fires once; its workflow runs a pure, an idempotent and a guarded
//! step. Neither output holds a payload: the order's address below never appears.
//!
//! ```sh
//! cargo run -p durably --example observability
//! ```
//!
//! A program ships the same data elsewhere by installing another subscriber (an OpenTelemetry
//! layer) or another recorder (Prometheus's HTTP listener, StatsD, ...): durably only records
//! through the `tracing` and `metrics` facades.

use std::time::Duration;

use durably::runtime::{Runtime, WorkflowContext, WorkflowError};
use durably::scheduler::{Fire, Job, Scheduler};
use durably::{Guarded, Journal, Policy};
use metrics_exporter_prometheus::PrometheusBuilder;
use tracing_subscriber::fmt::format::FmtSpan;

/// The workflow kind the job's fires start.
const KIND: &str = "nightly-invoice";

/// Builds tonight's invoice and sends it once. Its values (an address, an amount) are
/// payloads: journaled, never traced nor counted.
async fn nightly_invoice(ctx: WorkflowContext, fire: Fire) -> Result<String, WorkflowError> {
    let address = ctx
        .pure("look up address", || async {
            Ok("Ms. Example, 12 Payload Lane".to_owned())
        })
        .await?;
    let cents: u64 = ctx
        .idempotent("total", |_key| async { Ok(4_200_u64) })
        .await?;
    let address = &address;
    let sent = ctx
        .guarded("send invoice", Policy::Retry, |key| async move {
            Ok(format!("{cents} cents to {address}, key {key}"))
        })
        .await?;
    match sent {
        Guarded::Done(receipt) => Ok(format!("{}: {receipt}", fire.slot.to_rfc3339())),
        Guarded::Skipped(skipped) => Err(WorkflowError::new(skipped.to_string())),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Spans print when they close, with the spans around them: fire > execution > step.
    tracing_subscriber::fmt()
        .with_writer(std::io::stdout)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .init();
    // Any recorder of the `metrics` facade; this one renders Prometheus's text format.
    let metrics = PrometheusBuilder::new().install_recorder()?;

    let dir = tempfile::tempdir()?;
    let journal = Journal::open(dir.path().join("observability.db"))?;
    let runtime = Runtime::builder(journal)
        .register(KIND, 1, nightly_invoice)
        .start()
        .await?;
    let scheduler = Scheduler::new((*runtime).clone()).await?;
    let job = Job::builder("nightly")
        .interval(Duration::from_hours(24), 0)
        .workflow(KIND)
        .build()?;
    let job_id = job.id().clone();
    let _ = scheduler.register(job).await?;

    // Fires the upcoming slot now; the runtime claims and runs it.
    let (_, fired) = scheduler.trigger(&job_id).await?;
    let _receipt: String = runtime.handle(fired.execution_id()).result().await?;
    println!("the fire's workflow completed");
    // The result is readable once its commit lands; its run ends (and is counted) just after.
    runtime.drain().await;

    println!("--- metrics (Prometheus text) ---");
    print!("{}", metrics.render());
    Ok(())
}
