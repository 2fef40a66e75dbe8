//! The "POLICY AT WORK" column of the demo's table: the ambiguity policy that acted on a step,
//! read from the journal's `ambiguity_*` audit events (and the operator's answer), not the
//! policy the program configured. A guarded step that no crash left ambiguous had no policy at
//! work, whatever its configured one: the table says so.

use durably::{Effect, EventRecord, StepRecord, StepState, event_kind};
use serde_json::Value;

use crate::error::Result;

/// What acted on the step named `step` of one execution, whose `steps` and `events` are given:
/// `-` for a step that has no policy (not guarded) or did not run, `not needed` for a guarded
/// step that was never ambiguous, `not yet` for one still in the ambiguous window that no run
/// has met since, and otherwise each decision in the order it was made (`fail, operator:
/// not-done`).
///
/// # Errors
/// An audit event's detail is not JSON.
pub fn policy_at_work(steps: &[StepRecord], events: &[EventRecord], step: &str) -> Result<String> {
    let Some(step) = steps.iter().find(|record| record.name == step) else {
        return Ok("-".to_owned());
    };
    if step.effect != Effect::Guarded {
        return Ok("-".to_owned());
    }
    let mut decisions = Vec::new();
    for event in events.iter().filter(|event| event.seq == Some(step.seq)) {
        if let Some(decision) = decision(event)? {
            decisions.push(decision);
        }
    }
    Ok(if !decisions.is_empty() {
        decisions.join(", ")
    } else if step.state == StepState::Intent {
        "not yet (left ambiguous)".to_owned()
    } else {
        "not needed".to_owned()
    })
}

/// The decision an audit event records about a step in the ambiguous window, if it records
/// one: the policy named in its detail, with what it found or did.
fn decision(event: &EventRecord) -> Result<Option<String>> {
    let detail = event.detail.to_value()?;
    let text = |key: &str| detail.get(key).and_then(Value::as_str).unwrap_or("?");
    let policy = text("policy");
    Ok(Some(match event.kind.as_str() {
        event_kind::AMBIGUITY_RECONCILED => {
            if detail.get("found").and_then(Value::as_bool) == Some(true) {
                format!("{policy} (found it)")
            } else {
                format!("{policy} (found nothing, ran it)")
            }
        }
        event_kind::AMBIGUITY_RETRIED => format!("{policy} (ran it again, same key)"),
        event_kind::AMBIGUITY_SKIPPED | event_kind::AMBIGUITY_FAILED => policy.to_owned(),
        event_kind::OPERATOR_RESOLVED => format!("operator: {}", text("resolution")),
        _ => return Ok(None),
    }))
}
