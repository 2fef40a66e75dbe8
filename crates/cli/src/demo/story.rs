//! One run of the checkout workflow: start a worker, kill it inside a guarded step, restart
//! it (no sweep: the restarted worker takes the dead worker's lock over itself), play the
//! operator when the policy asks for one, and narrate the audit trail.

use uuid::Uuid;

use super::child::{Stop, Worker, run_tool};
use super::scenario::{CrashPoint, Scenario};
use super::{Demo, failed, narrate};
use crate::demo::worker::EXIT_AMBIGUOUS;
use crate::error::Result;
use crate::escape::escape;

/// Runs one scenario and returns its execution id.
///
/// # Errors
/// A worker misbehaved, or the journal failed.
pub fn run(demo: &Demo, number: usize, scenario: Scenario) -> Result<Uuid> {
    let id = Uuid::new_v4();
    narrate(&format!(
        "\n{number}. {} — {}.",
        scenario.shown_policy(),
        scenario.story()
    ))?;
    narrate(&format!(
        "   execution {id} (checkout order {})",
        scenario.order()
    ))?;
    let mut worker = Worker::spawn(
        &demo.db,
        demo.ledger.path(),
        scenario,
        id,
        scenario.crash_point(),
    )?;
    if !matches!(worker.relay()?, Stop::Ready) {
        return Err(failed(
            "the demo worker exited before reaching its crash point",
        ));
    }
    show_blocked(demo, id, worker.pid())?;
    let pid = worker.pid();
    worker.kill()?;
    narrate(&format!(
        "   SIGKILL -> pid {pid}: it died inside the step, between the intent and the result."
    ))?;
    narrate(&format!(
        "   restarting the worker on the same execution, with no sweep: it takes the lock over \
         from dead pid {pid} itself:"
    ))?;
    let mut code = finish_worker(demo, scenario, id)?;
    if code == Some(i32::from(EXIT_AMBIGUOUS)) {
        operator(demo, id)?;
        narrate("   restarting the worker after the operator's answer:")?;
        code = finish_worker(demo, scenario, id)?;
    }
    if code != Some(0) {
        return Err(failed(format!(
            "the restarted demo worker for {id} ended with {code:?}"
        )));
    }
    audit_trail(demo, id)?;
    Ok(id)
}

fn finish_worker(demo: &Demo, scenario: Scenario, id: Uuid) -> Result<Option<i32>> {
    let mut worker = Worker::spawn(&demo.db, demo.ledger.path(), scenario, id, CrashPoint::None)?;
    match worker.relay()? {
        Stop::Exited(status) => Ok(status.code()),
        Stop::Ready => Err(failed(
            "the restarted demo worker stopped at a crash point it was not given",
        )),
    }
}

/// While the worker is blocked: who holds the execution, and what the journal says.
fn show_blocked(demo: &Demo, id: Uuid, pid: u32) -> Result<()> {
    let resource = id.to_string();
    for (row, judgement) in demo.journal.lock_holders()? {
        if row.resource == resource {
            narrate(&format!(
                "   durably locks: pid {pid} holds the execution ({})",
                escape(&judgement.to_string())
            ))?;
        }
    }
    for step in demo.journal.steps(id)? {
        if step.state == durably::StepState::Intent {
            narrate(&format!(
                "   journal: step {} ({}) has its intent committed at {} and no result — the \
                 ambiguous window",
                step.seq,
                escape(&step.name),
                step.intent_at
                    .map_or_else(|| "?".to_owned(), durably::lock::format_timestamp)
            ))?;
        }
    }
    Ok(())
}

/// Plays the operator: looks the charge up at the payment provider by its idempotency key and
/// answers with the real `durably resolve` command.
fn operator(demo: &Demo, id: Uuid) -> Result<()> {
    let Some(step) = demo
        .journal
        .steps(id)?
        .into_iter()
        .find(|step| step.state == durably::StepState::Intent)
    else {
        return Err(failed(
            "the worker stopped on an ambiguous step, but the journal shows none",
        ));
    };
    // Taken before looking at the provider: the answer then applies to this intent only.
    let seen = demo
        .journal
        .operator()
        .seen_intent(id, step.seq)?
        .ok_or_else(|| failed("the ambiguous step was resolved behind the demo's back"))?
        .to_string();
    let charges = demo
        .ledger
        .find("charge", &step.idempotency_key.to_string())?;
    let db = demo.db.display().to_string();
    let (id_text, seq) = (id.to_string(), step.seq.to_string());
    let mut args: Vec<&str> = vec!["--db", &db, "resolve", &id_text, &seq, "--seen", &seen];
    if charges.is_empty() {
        narrate(&format!(
            "   operator: the payment provider has no charge with key {}, so the effect did not \
             happen:",
            step.idempotency_key
        ))?;
        args.push("--not-done");
    } else {
        narrate("   operator: the payment provider has the charge, so the effect happened:")?;
        args.extend(["--completed", r#"{"receipt":"confirmed by an operator"}"#]);
    }
    narrate(&format!("   $ durably {}", args.join(" ")))?;
    let status = run_tool(&args)?;
    if !status.success() {
        return Err(failed(format!("`durably resolve` failed with {status}")));
    }
    Ok(())
}

fn audit_trail(demo: &Demo, id: Uuid) -> Result<()> {
    let events = demo.journal.events(id)?;
    let kinds: Vec<String> = events
        .iter()
        .map(|event| match event.seq {
            Some(seq) => format!("{} (step {seq})", escape(&event.kind)),
            None => escape(&event.kind),
        })
        .collect();
    narrate(&format!("   audit trail: {}", kinds.join(", ")))
}

/// The order left for the reader: killed inside "charge" under Fail and not swept, so the
/// database keeps a dead lock holder and a step in the ambiguous window to inspect.
pub const LEFT_ORDER: u32 = 1005;

/// The step of the left order that stays in the ambiguous window: "charge".
const LEFT_STEP: u32 = 2;

/// Kills one more worker inside "charge" (before charging, under Fail) and leaves it there.
///
/// # Errors
/// The worker misbehaved.
pub fn leave_for_inspection(demo: &Demo, number: usize) -> Result<Uuid> {
    let id = Uuid::new_v4();
    narrate(&format!(
        "\n{number}. Left for you — one more worker is killed inside \"charge\" (policy Fail), \
         and this time nobody sweeps or resolves it."
    ))?;
    narrate(&format!("   execution {id} (checkout order {LEFT_ORDER})"))?;
    let mut worker = Worker::spawn_order(
        &demo.db,
        demo.ledger.path(),
        Scenario::Fail,
        LEFT_ORDER,
        id,
        CrashPoint::ChargeBefore,
    )?;
    if !matches!(worker.relay()?, Stop::Ready) {
        return Err(failed(
            "the demo worker exited before reaching its crash point",
        ));
    }
    let pid = worker.pid();
    worker.kill()?;
    let db = escape(&demo.db.display().to_string());
    let seen = demo
        .journal
        .operator()
        .seen_intent(id, LEFT_STEP)?
        .ok_or_else(|| failed("the killed worker left no intent to resolve"))?;
    narrate(&format!(
        "   SIGKILL -> pid {pid}. Its lock row and its intent stay in the file. Try:\n\
         \x20    durably --db {db} locks                 # the holder, judged dead\n\
         \x20    sqlite3 {db} 'select * from ambiguous_steps'\n\
         \x20    durably --db {db} sweep                 # reclaim it, without resuming it\n\
         \x20    durably --db {db} show {id}\n\
         \x20    durably --db {db} resolve {id} {LEFT_STEP} --seen {seen} --not-done"
    ))?;
    Ok(id)
}
