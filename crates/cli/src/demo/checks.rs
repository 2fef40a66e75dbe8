//! The demo's verdict: the effect ledger counted against what each policy promises, the journal
//! checked for the audit events each policy must leave, and the final table, whose POLICY AT
//! WORK column says which policy acted (see [`super::acted`]).

use durably::{EventRecord, StepRecord};
use uuid::Uuid;

use super::acted::policy_at_work;
use super::ledger::Entry;
use super::scenario::Scenario;
use super::scheduled::Fires;
use super::{Demo, narrate};
use crate::error::Result;
use crate::escape::escape;
use crate::output::Table;

/// What the checks found.
pub struct Verdict {
    /// Whether every invariant held.
    pub all_held: bool,
    /// The broken ones, in words.
    pub violations: Vec<String>,
}

/// Counts the ledger, checks the journal, and prints the table of effects.
///
/// # Errors
/// The ledger or the journal cannot be read.
pub fn run(
    demo: &Demo,
    executions: &[(Scenario, Uuid)],
    fires: &Fires,
    left: Uuid,
) -> Result<Verdict> {
    let entries = demo.ledger.entries()?;
    let mut violations = Vec::new();
    let mut table = Table::new(&["EFFECT", "WHERE", "POLICY AT WORK", "EXPECTED", "RAN", "OK"]);
    for (scenario, id) in executions {
        let id_text = id.to_string();
        let (steps, events) = (demo.journal.steps(*id)?, demo.journal.events(*id)?);
        for (effect, expected) in scenario.expected_counts() {
            let ran = count(&entries, effect, |entry| entry.execution_id == id_text);
            let acted = policy_at_work(&steps, &events, step_of(effect))?;
            let order = scenario.order();
            check_count(
                &mut violations,
                &mut table,
                effect,
                order,
                &acted,
                expected,
                ran,
            );
        }
        let recorded = (steps.as_slice(), events.as_slice());
        check_journal(demo, *scenario, *id, recorded, &entries, &mut violations)?;
    }
    for (slot, fire_id) in &fires.slots {
        let ran = count(&entries, "tick", |entry| &entry.key == fire_id);
        let place = format!("job {} slot {slot}", fires.job);
        table.row(vec![
            "tick".to_owned(),
            place.clone(),
            "fired by 2 schedulers".to_owned(),
            "1".to_owned(),
            ran.to_string(),
            yes_no(ran == 1),
        ]);
        if ran != 1 {
            violations.push(format!("{place} fired {ran} times, not once"));
        }
    }
    check_left(demo, &entries, left, &mut table, &mut violations)?;
    narrate("\nEffects, as counted in the independent ledger:\n")?;
    narrate(table.render().trim_end())?;
    narrate(
        "\nPOLICY AT WORK is the policy that decided the step after a crash, as the journal's \
         ambiguity_* audit events record it: \"not needed\" where no crash left the step \
         ambiguous (its configured policy never acted), \"-\" for a step that is not guarded.",
    )?;
    Ok(Verdict {
        all_held: violations.is_empty(),
        violations,
    })
}

/// The execution left for the reader: killed before charging, so no charge, its intent still
/// there, and its lock the only one held (by a dead process).
fn check_left(
    demo: &Demo,
    entries: &[Entry],
    left: Uuid,
    table: &mut Table,
    violations: &mut Vec<String>,
) -> Result<()> {
    let left_text = left.to_string();
    let charges = count(entries, "charge", |entry| entry.execution_id == left_text);
    let steps = demo.journal.steps(left)?;
    let acted = policy_at_work(&steps, &demo.journal.events(left)?, step_of("charge"))?;
    check_count(
        violations,
        table,
        "charge",
        super::story::LEFT_ORDER,
        &acted,
        0,
        charges,
    );
    let stray: Vec<String> = demo
        .journal
        .lock_holders()?
        .into_iter()
        .map(|(row, _)| row.resource)
        .filter(|resource| *resource != left_text)
        .collect();
    if !stray.is_empty() {
        violations.push(format!("{} locks are still held at the end", stray.len()));
    }
    let ambiguous = steps
        .iter()
        .any(|step| step.state == durably::StepState::Intent);
    if !ambiguous {
        violations.push(format!(
            "order {} is not left ambiguous",
            super::story::LEFT_ORDER
        ));
    }
    Ok(())
}

/// The checkout step that performs `effect` (a word of the effect ledger).
fn step_of(effect: &str) -> &'static str {
    match effect {
        "fetch" => "fetch order",
        "charge" => "charge",
        "email" => "send email",
        _ => "-",
    }
}

fn count(entries: &[Entry], effect: &str, matches: impl Fn(&Entry) -> bool) -> usize {
    entries
        .iter()
        .filter(|entry| entry.effect == effect && matches(entry))
        .count()
}

fn check_count(
    violations: &mut Vec<String>,
    table: &mut Table,
    effect: &str,
    order: u32,
    note: &str,
    expected: usize,
    ran: usize,
) {
    let place = format!("order {order}");
    table.row(vec![
        effect.to_owned(),
        place.clone(),
        note.to_owned(),
        expected.to_string(),
        ran.to_string(),
        yes_no(ran == expected),
    ]);
    if ran != expected {
        violations.push(format!(
            "{effect} of {place} ran {ran} times, expected {expected}"
        ));
    }
}

/// The journal must show each policy's decision, and every execution completed. The steps and
/// audit events are the execution's, as the journal recorded them.
fn check_journal(
    demo: &Demo,
    scenario: Scenario,
    id: Uuid,
    (steps, events): (&[StepRecord], &[EventRecord]),
    entries: &[Entry],
    violations: &mut Vec<String>,
) -> Result<()> {
    let place = format!("order {}", scenario.order());
    let status = demo.journal.get(id)?.map(|record| record.status);
    if status != Some(durably::Status::Completed) {
        violations.push(format!("{place} ended {status:?}, not completed"));
    }
    let has_event = |kind: &str| events.iter().any(|event| event.kind == kind);
    let wanted = match scenario {
        Scenario::Reconcile => "ambiguity_reconciled",
        Scenario::Fail => "operator_resolved",
        Scenario::Skip => "ambiguity_skipped",
        Scenario::Retry => "ambiguity_retried",
    };
    if !has_event(wanted) {
        violations.push(format!("{place} has no {wanted} audit event"));
    }
    let email = steps.iter().find(|step| step.name == "send email");
    if scenario == Scenario::Skip && email.map(|step| step.state.as_str()) != Some("skipped") {
        violations.push(format!("{place}: send email is not recorded as skipped"));
    }
    if scenario == Scenario::Retry {
        let id_text = id.to_string();
        let keys: Vec<&str> = entries
            .iter()
            .filter(|entry| entry.effect == "email" && entry.execution_id == id_text)
            .map(|entry| entry.key.as_str())
            .collect();
        if keys.windows(2).any(|pair| pair[0] != pair[1]) {
            violations.push(format!(
                "{place}: the retried email used a different idempotency key ({})",
                escape(&keys.join(", "))
            ));
        }
    }
    Ok(())
}

fn yes_no(ok: bool) -> String {
    if ok { "yes" } else { "NO" }.to_owned()
}
