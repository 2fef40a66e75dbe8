//! An agent loop that survives being killed anywhere. Each turn, a model decides the next
//! action from what the agent has seen so far; the agent carries it out and loops. Here the
//! model asks a person to approve a refund (a durable wait for a message, up to seven days),
//! then has a payment provider refund the customer (a reconciled tool call), then waits for
//! the refund to settle (a durable timer), then replies. The "model" is a deterministic fake
//! function and the provider a fake that records its requests in a file next to the journal
//! (`examples/support/fake_provider.rs`); there is no network.
//!
//! It shows:
//! - which step kind each call is: the model call is guarded with `Retry`, the refund guarded
//!   with `reconcile` (see the comments where they run);
//! - resuming at start-up: starting the runtime recovers every execution a crash interrupted,
//!   and starting the same ticket again finds its execution instead of starting another.
//!
//! Kill it at any point and run it again: it goes on from where the journal says it was.
//! While it waits for the approval it is a row in the journal (status `waiting`), not a task.
//!
//! ```sh
//! cargo run -p durably --example agent -- agent.db
//! # in another terminal, with the id it prints:
//! durably --db agent.db send ID approval '{"approved": true, "by": "alice"}'
//! durably --db agent.db show ID     # the turns, the wait, the refund, the timer
//! ```

#[path = "support/fake_provider.rs"]
mod fake_provider;

use std::path::Path;
use std::time::Duration;

use durably::runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError};
use durably::{Effect, Guarded, Journal, Policy, StepError};
use fake_provider::FakeProvider;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The workflow kind, as stored in the journal.
const KIND: &str = "support-agent";
/// The most turns the agent takes before it gives up: the loop is bounded.
const TURNS_MAX: u32 = 8;
/// How long the agent waits for a person's decision.
const APPROVAL_WAIT: Duration = Duration::from_hours(7 * 24);
/// How long the fake model says a refund takes to settle. Longer than the runtime's
/// `park_after` (1 s by default), so the execution parks: a row with a wake time, no task.
const SETTLEMENT_SECONDS: u64 = 2;

/// What the agent works on: its input.
#[derive(Serialize, Deserialize)]
struct Ticket {
    number: u32,
    customer: String,
}

impl Ticket {
    /// One ticket, one execution: the id comes from the ticket, so a restarted process finds
    /// the execution it started before instead of starting another.
    fn execution_id(&self) -> Uuid {
        Uuid::new_v5(
            &Uuid::NAMESPACE_OID,
            format!("{KIND}/{}", self.number).as_bytes(),
        )
    }
}

/// Where the agent waits, published as its workflow event `waiting` for whoever watches it.
#[derive(Serialize, Deserialize)]
struct Waiting {
    /// What it waits for, in words.
    on: String,
    /// The topic a message must be sent on to end the wait, if a message ends it.
    topic: Option<String>,
}

/// The topic of the approval.
const APPROVAL_TOPIC: &str = "approval";

/// The message a person sends on the topic `approval`.
#[derive(Serialize, Deserialize)]
struct Decision {
    approved: bool,
    by: String,
}

/// What the model tells the agent to do next. Recorded as the model step's result, so a
/// resumed run replays the same decision.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "action")]
enum Action {
    AskApproval { cents: u32 },
    Refund { cents: u32 },
    WaitForSettlement { seconds: u64 },
    Reply { text: String },
}

/// What the agent saw after each action: the model's context.
enum Observation {
    Decided(Decision),
    NoDecision,
    Refunded,
    Settled,
}

/// The fake model: a deterministic function of the ticket and what the agent has seen.
fn fake_model(ticket: &Ticket, seen: &[Observation]) -> Action {
    let cents = ticket.number * 25 + 1_000;
    match seen.last() {
        None => Action::AskApproval { cents },
        Some(Observation::Decided(decision)) if decision.approved => Action::Refund { cents },
        Some(Observation::Decided(decision)) => Action::Reply {
            text: format!("{} declined the refund", decision.by),
        },
        Some(Observation::NoDecision) => Action::Reply {
            text: "nobody decided within seven days; the ticket goes to a person".to_owned(),
        },
        Some(Observation::Refunded) => Action::WaitForSettlement {
            seconds: SETTLEMENT_SECONDS,
        },
        Some(Observation::Settled) => Action::Reply {
            text: format!(
                "refunded {cents} cents to {}; it has settled",
                ticket.customer
            ),
        },
    }
}

/// The fake services the agent calls, each with its ledger next to the journal.
#[derive(Clone)]
struct Providers {
    model: FakeProvider,
    payments: FakeProvider,
}

impl Providers {
    fn next_to(db: &Path) -> Self {
        Self {
            model: FakeProvider::next_to(db, "model"),
            payments: FakeProvider::next_to(db, "payments"),
        }
    }
}

/// The agent loop: ask the model, act, observe, until the model replies.
async fn support_agent(
    ctx: WorkflowContext,
    ticket: Ticket,
    providers: Providers,
) -> Result<String, WorkflowError> {
    let mut seen = Vec::new();
    for turn in 0..TURNS_MAX {
        let observation = match ask_model(&ctx, &providers.model, turn, &ticket, &seen).await? {
            Action::AskApproval { cents } => wait_for_approval(&ctx, cents).await?,
            Action::Refund { cents } => refund(&ctx, &providers.payments, &ticket, cents).await?,
            Action::WaitForSettlement { seconds } => {
                let waiting = Waiting {
                    on: format!("on the timer `settlement` ({seconds} s)"),
                    topic: None,
                };
                ctx.set_event("waiting", &waiting).await?;
                // A durable timer: its wake time is recorded once, so a run resumed after a
                // crash waits only what is left.
                ctx.sleep("settlement", Duration::from_secs(seconds))
                    .await?;
                Observation::Settled
            }
            Action::Reply { text } => return Ok(text),
        };
        seen.push(observation);
    }
    Err(WorkflowError::new(format!(
        "no reply after {TURNS_MAX} turns"
    )))
}

/// One model call, as a guarded step with the `Retry` policy.
///
/// Not `pure`: pure means "free to run again, and the same answer every time". A model call
/// costs money and answers differently each time. Its answer is recorded whichever kind it
/// is, so a resumed run replays it instead of asking again; the kind decides what happens
/// when the process dies DURING the call. As a guarded step, its intent is written before the
/// request, so that crash is seen rather than silently paid twice: the step's `attempts` and
/// an `ambiguity_retried` event record the second request, which carries the same
/// idempotency key (a gateway that caches by key answers it from its cache), and re-asking is
/// bounded (`ambiguous_reruns_max`, 3 by default): a call that kills its process every time
/// ends up waiting for an operator instead of billing forever. `Retry` rather than
/// `reconcile`: most model APIs, like this fake one, cannot be asked "what did you answer for
/// this key?". Where a second call is unacceptable, use `Policy::Fail`.
async fn ask_model(
    ctx: &WorkflowContext,
    model: &FakeProvider,
    turn: u32,
    ticket: &Ticket,
    seen: &[Observation],
) -> Result<Action, WorkflowError> {
    let name = format!("model turn {turn}");
    let asked = ctx
        .guarded(&name, Policy::Retry, |key| async move {
            let action = fake_model(ticket, seen);
            model.serve(key.idempotency_key(), &format!("turn {turn}"))?;
            Ok::<_, StepError>(action)
        })
        .await?;
    done(asked)
}

/// Waits for a person's decision on the topic `approval`: parked (no task, no lock) until a
/// message arrives or the wait ends, in whichever process serves this kind then.
async fn wait_for_approval(
    ctx: &WorkflowContext,
    cents: u32,
) -> Result<Observation, WorkflowError> {
    let waiting = Waiting {
        on: format!("for the approval of a {cents}-cent refund"),
        topic: Some(APPROVAL_TOPIC.to_owned()),
    };
    ctx.set_event("waiting", &waiting).await?;
    let decision = ctx.recv::<Decision>(APPROVAL_TOPIC, APPROVAL_WAIT).await?;
    Ok(decision.map_or(Observation::NoDecision, Observation::Decided))
}

/// The tool call: a refund through the payment provider, as a guarded step with a
/// `reconcile` policy. Its intent is durable before the request leaves; if the process dies
/// before the provider's answer is recorded, the next run asks the provider whether it served
/// this step's idempotency key ([`FakeProvider::reconcile`]) instead of refunding again
/// blindly: found, its answer is the step's result; not found, the refund runs, with the
/// same key.
async fn refund(
    ctx: &WorkflowContext,
    payments: &FakeProvider,
    ticket: &Ticket,
    cents: u32,
) -> Result<Observation, WorkflowError> {
    let customer = &ticket.customer;
    let refunded = ctx
        .guarded("refund", payments.reconcile(), |key| async move {
            payments.serve(
                key.idempotency_key(),
                &format!("refund of {cents} cents to {customer}"),
            )
        })
        .await?;
    done(refunded)?;
    Ok(Observation::Refunded)
}

/// A guarded step's value. Only `Policy::Skip` skips a step, and no step here uses it.
fn done<T>(outcome: Guarded<T>) -> Result<T, WorkflowError> {
    outcome
        .into_result()
        .map_err(|skipped| WorkflowError::new(skipped.to_string()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "agent.db".to_owned());
    let providers = Providers::next_to(Path::new(&db));
    let journal = Journal::open(&db)?;

    // Start-up: the runtime's recovery finds every execution of the kinds it serves that a
    // crash interrupted, and puts it back in its queue; it then runs them like new ones.
    // Parked executions need nothing: their timer or message wakes them.
    let serving = providers.clone();
    let runtime = Runtime::builder(journal)
        .register(KIND, 1, move |ctx, ticket| {
            support_agent(ctx, ticket, serving.clone())
        })
        .start()
        .await?;
    println!(
        "start-up: {} interrupted execution(s) put back in their queue",
        runtime.recovery_report().requeued
    );

    let ticket = Ticket {
        number: 42,
        customer: "ada@example.com".to_owned(),
    };
    let id = ticket.execution_id();
    let handle = runtime
        .start::<_, String>(KIND, id, &ticket, StartOptions::default())
        .await?;
    println!("execution {id}: ticket {}", ticket.number);

    let waiting = runtime
        .get_event::<Waiting>(id, "waiting", Duration::from_secs(10))
        .await?;
    if let (Some(waiting), false) = (waiting, handle.status()?.is_final()) {
        println!("execution {id} waits {}", waiting.on);
        if let Some(topic) = waiting.topic {
            println!("approve it from another terminal (this process may be killed meanwhile):");
            println!(
                "  durably --db {db} send {id} {topic} '{{\"approved\": true, \"by\": \"alice\"}}'"
            );
        }
    }

    let reply = handle.result().await?;
    println!("execution {id} completed: {reply}");
    // Each effect once: what the providers' ledgers hold for each guarded step's key.
    for step in runtime.journal().steps(id)? {
        let provider = match step.effect {
            Effect::Guarded if step.name == "refund" => &providers.payments,
            Effect::Guarded => &providers.model,
            _ => continue,
        };
        let served = provider.served(step.idempotency_key)?;
        println!("step {} ({}): served {served} time(s)", step.seq, step.name);
    }
    Ok(())
}
