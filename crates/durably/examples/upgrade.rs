//! Changing a workflow's code while a run is parked on it, with `patched`: a run started on
//! the old code waits for an approval; the new code adds a fraud check before that wait and a
//! receipt e-mail after it. The parked run, resumed by a process running the new code, skips
//! the fraud check (it passed that point on the old code: `patched` answers false) and sends
//! the receipt (it had not reached that point: `patched` answers true); a run started on the
//! new code does both. Each answer is recorded, so it never flips for a run.
//!
//! ```sh
//! cargo run -p durably --example upgrade -- old upgrade.db   # starts a run, parks, exits
//! cargo run -p durably --example upgrade -- new upgrade.db   # the patched code finishes it
//! durably --db upgrade.db patches fraud-check                # who still needs the old branch
//! ```

use std::time::Duration;

use durably::Journal;
use durably::runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The workflow kind, as stored in the journal; both codes serve version 1.
const KIND: &str = "order";
/// How long a run waits for its approval.
const APPROVAL_WAIT: Duration = Duration::from_hours(24);

/// What a run did on its way, for the example to print.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Outcome {
    charged_cents: u32,
    fraud_checked: bool,
    receipt_emailed: bool,
}

/// The old code: price, wait for approval, charge.
async fn old_code(ctx: WorkflowContext, order: u32) -> Result<Outcome, WorkflowError> {
    let cents: u32 = ctx.pure("price", || async move { Ok(order * 100) }).await?;
    ctx.recv::<bool>("approval", APPROVAL_WAIT).await?;
    ctx.idempotent("charge", |_key| async move { Ok(cents) })
        .await?;
    Ok(Outcome {
        charged_cents: cents,
        ..Outcome::default()
    })
}

/// The new code: a fraud check before the wait and a receipt after the charge, each behind a
/// patch, so runs that passed those points on the old code replay as they ran.
async fn new_code(ctx: WorkflowContext, order: u32) -> Result<Outcome, WorkflowError> {
    let cents: u32 = ctx.pure("price", || async move { Ok(order * 100) }).await?;
    let fraud_checked = ctx.patched("fraud-check").await?;
    if fraud_checked {
        ctx.pure("fraud check", || async { Ok(true) }).await?;
    }
    ctx.recv::<bool>("approval", APPROVAL_WAIT).await?;
    ctx.idempotent("charge", |_key| async move { Ok(cents) })
        .await?;
    let receipt_emailed = ctx.patched("receipt-email").await?;
    if receipt_emailed {
        ctx.idempotent("email receipt", |_key| async { Ok(()) })
            .await?;
    }
    Ok(Outcome {
        charged_cents: cents,
        fraud_checked,
        receipt_emailed,
    })
}

/// The execution of order `number`: the id comes from the order, so both processes name it.
fn order_id(number: u32) -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("{KIND}/{number}").as_bytes())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let code = args.next().unwrap_or_default();
    let db = args.next().unwrap_or_else(|| "upgrade.db".to_owned());
    let journal = Journal::open(&db)?;
    let (parked, fresh) = (order_id(7), order_id(8));
    match code.as_str() {
        "old" => {
            let runtime = Runtime::builder(journal)
                .register(KIND, 1, old_code)
                .start()
                .await?;
            runtime
                .start::<_, Outcome>(KIND, parked, &7_u32, StartOptions::default())
                .await?;
            let handle = runtime.handle::<Outcome>(parked);
            while handle.status()? != durably::Status::Waiting {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            println!("execution {parked} parked on the old code, waiting for its approval");
            runtime.shutdown();
        }
        "new" => {
            let runtime = Runtime::builder(journal)
                .register(KIND, 1, new_code)
                .start()
                .await?;
            runtime
                .start::<_, Outcome>(KIND, fresh, &8_u32, StartOptions::default())
                .await?;
            for id in [parked, fresh] {
                runtime
                    .send(id, "approval", &true, Some("approved"))
                    .await?;
            }
            for (id, label) in [
                (parked, "parked on the old code"),
                (fresh, "started on the new code"),
            ] {
                let outcome = runtime.handle::<Outcome>(id).result().await?;
                println!(
                    "execution {id} ({label}) finished on the new code: charged {} cents, \
                     fraud-check patched={}, receipt-email patched={}",
                    outcome.charged_cents, outcome.fraud_checked, outcome.receipt_emailed
                );
            }
            runtime.shutdown();
        }
        _ => return Err("usage: upgrade old|new [DATABASE]".into()),
    }
    Ok(())
}
