//! An agent that waits for a person: it drafts a refund, publishes "awaiting approval", and
//! waits up to seven days for a message on the topic `approval`. While it waits, the execution
//! is a row in the journal (status `waiting`), not a task: kill the process, start it again,
//! and it picks up the same execution. Approve it from another terminal with `durably send`;
//! the refund then runs once, as a guarded step.
//!
//! ```sh
//! cargo run -p durably --example approval -- approval.db
//! # in another terminal, with the id it prints:
//! durably --db approval.db send ID approval '{"approved": true, "by": "alice"}'
//! ```

use std::time::Duration;

use durably::runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError};
use durably::{Guarded, Journal, Policy, StepError};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The workflow kind, as stored in the journal.
const KIND: &str = "refund-approval";
/// How long the workflow waits for a decision before it gives up.
const APPROVAL_WAIT: Duration = Duration::from_hours(7 * 24);

/// What the workflow starts from.
#[derive(Serialize, Deserialize)]
struct Order {
    number: u32,
    customer: String,
}

/// The message a person sends on the topic `approval`.
#[derive(Serialize, Deserialize)]
struct Decision {
    approved: bool,
    by: String,
}

/// Drafts the refund, waits for a decision, and refunds once if it is approved.
async fn refund_with_approval(ctx: WorkflowContext, order: Order) -> Result<String, WorkflowError> {
    let cents: u32 = ctx
        .pure(
            "draft refund",
            || async move { Ok(order.number * 25 + 1_000) },
        )
        .await?;
    ctx.set_event(
        "status",
        &format!("awaiting approval of a {cents}-cent refund"),
    )
    .await?;

    // Parks the execution: no task, no lock, until a message arrives or the wait ends.
    let Some(decision) = ctx.recv::<Decision>("approval", APPROVAL_WAIT).await? else {
        ctx.set_event("status", &"expired").await?;
        return Err(WorkflowError::new("no decision within seven days"));
    };
    if !decision.approved {
        ctx.set_event("status", &format!("rejected by {}", decision.by))
            .await?;
        return Ok(format!("refund rejected by {}", decision.by));
    }

    // Intent first, result after: a crash inside this step never refunds twice unnoticed.
    let customer = &order.customer;
    let refunded = ctx
        .guarded("refund", Policy::Retry, |key| async move {
            // A real provider call would pass `key` as its idempotency key.
            Ok::<_, StepError>(format!("refunded {cents} cents to {customer} (key {key})"))
        })
        .await?;
    let Guarded::Done(receipt) = refunded else {
        return Err(WorkflowError::new("the refund was skipped"));
    };
    ctx.set_event("status", &format!("approved by {}", decision.by))
        .await?;
    Ok(receipt)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "approval.db".to_owned());
    let journal = Journal::open(&db)?;
    let runtime = Runtime::builder(journal)
        .register(KIND, 1, refund_with_approval)
        .start()
        .await?;

    // One order, one execution: the id comes from the order, so a restarted process finds
    // the execution it started before instead of starting another.
    let order = Order {
        number: 42,
        customer: "ada@example.com".to_owned(),
    };
    let id = Uuid::new_v5(
        &Uuid::NAMESPACE_OID,
        format!("{KIND}/{}", order.number).as_bytes(),
    );
    let handle = runtime
        .start::<_, String>(KIND, id, &order, StartOptions::default())
        .await?;

    if let Some(status) = runtime
        .get_event::<String>(id, "status", Duration::from_secs(10))
        .await?
    {
        println!("execution {id}: {status}");
    }
    if !handle.status()?.is_final() {
        println!("approve it from another terminal (this process may be killed meanwhile):");
        println!(
            "  durably --db {db} send {id} approval '{{\"approved\": true, \"by\": \"alice\"}}'"
        );
    }

    let outcome = handle.result().await?;
    println!("execution {id} completed: {outcome}");
    Ok(())
}
