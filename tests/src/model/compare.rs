//! Comparing everything the journal shows with the model.

use std::sync::PoisonError;

use durably_journal::{IdempotencyKey, Journal};
use serde_json::{Value, json};

use super::EXECUTIONS;
use super::real::{Real, execution_id};
use super::state::{Model, ModelStep};

fn parse_json(text: Option<&str>) -> Option<Value> {
    text.map(|text| serde_json::from_str(text).unwrap_or_else(|_| json!({ "unparsable": text })))
}

/// Compares everything the journal shows with the model.
pub(super) fn compare(real: &Real, model: &Model) -> Result<(), String> {
    let journal = real.journal()?;
    for e in 0..EXECUTIONS {
        let id = execution_id(e);
        let record = journal.get(id).map_err(|error| error.to_string())?;
        let expected = model.executions[e].as_ref();
        let actual = record.as_ref().map(|record| {
            (
                record.status.as_str().to_owned(),
                i64::from(record.opens),
                parse_json(
                    record
                        .output
                        .as_ref()
                        .map(durably_journal::Payload::as_json),
                ),
                parse_json(record.error.as_ref().map(durably_journal::Payload::as_json)),
                record.finalized_at.is_some(),
                record.cancel_requested_at.is_some(),
            )
        });
        let wanted = expected.map(|execution| {
            (
                execution.status.to_owned(),
                execution.opens,
                execution.output.clone(),
                execution.error.clone(),
                execution.finalized_at_s.is_some(),
                execution.cancel_requested,
            )
        });
        if actual != wanted {
            return Err(format!(
                "execution {e} is {actual:?}, the model has {wanted:?}"
            ));
        }
        compare_steps(
            journal,
            e,
            expected.map_or(&[][..], |execution| &execution.steps),
        )?;
        let handle = real.handles[e]
            .as_ref()
            .map(|handle| handle.next_seq() as usize);
        let model_handle = model.handles[e].map(|handle| handle.cursor);
        if handle != model_handle {
            return Err(format!(
                "execution {e}: the handle is at {handle:?}, the model's at {model_handle:?}"
            ));
        }
    }
    compare_calls(real, model)?;
    compare_recoverable(journal, model)
}

fn compare_steps(journal: &Journal, e: usize, expected: &[ModelStep]) -> Result<(), String> {
    let id = execution_id(e);
    let steps = journal.steps(id).map_err(|error| error.to_string())?;
    let actual: Vec<ModelStep> = steps
        .iter()
        .map(|step| ModelStep {
            name: step.name.clone(),
            effect: match step.effect.as_str() {
                "pure" => "pure",
                "idempotent" => "idempotent",
                "guarded" => "guarded",
                _ => "unknown",
            },
            policy: step.policy.map(|policy| match policy.as_str() {
                "skip" => "skip",
                "retry" => "retry",
                "fail" => "fail",
                "reconcile" => "reconcile",
                _ => "unknown",
            }),
            state: match step.state.as_str() {
                "intent" => "intent",
                "completed" => "completed",
                "failed" => "failed",
                "skipped" => "skipped",
                _ => "unknown",
            },
            result: parse_json(step.result.as_ref().map(durably_journal::Payload::as_json)),
            error: parse_json(step.error.as_ref().map(durably_journal::Payload::as_json)),
            attempts: i64::from(step.attempts),
        })
        .collect();
    if actual != expected {
        return Err(format!(
            "execution {e} has steps {actual:#?}, the model has {expected:#?}"
        ));
    }
    for (seq, step) in steps.iter().enumerate() {
        let key = IdempotencyKey::derive(id, seq as u32, &step.name);
        if step.seq as usize != seq || step.idempotency_key != key {
            return Err(format!(
                "execution {e} step {seq}: wrong seq or key in {step:?}"
            ));
        }
        if (step.state.as_str() == "intent") != step.result_at.is_none()
            || (step.effect.as_str() == "guarded") != step.intent_at.is_some()
        {
            return Err(format!(
                "execution {e} step {seq}: inconsistent times in {step:?}"
            ));
        }
    }
    Ok(())
}

fn compare_calls(real: &Real, model: &Model) -> Result<(), String> {
    let closures = real
        .closure_calls
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if closures != model.closure_calls {
        return Err(format!(
            "closures were called {closures:?} times, the model expected {:?}",
            model.closure_calls
        ));
    }
    let probes = real
        .probe_calls
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if probes != model.probe_calls {
        return Err(format!(
            "probes were called {probes:?} times, the model expected {:?}",
            model.probe_calls
        ));
    }
    Ok(())
}

fn compare_recoverable(journal: &Journal, model: &Model) -> Result<(), String> {
    let mut actual: Vec<String> = journal
        .recoverable()
        .map_err(|error| error.to_string())?
        .into_iter()
        .map(|record| record.execution_id.to_string())
        .collect();
    actual.sort();
    let mut expected: Vec<String> = (0..EXECUTIONS)
        .filter(|&e| {
            model.executions[e].as_ref().is_some_and(|execution| {
                execution.status == "interrupted"
                    || (execution.status == "running" && model.handles[e].is_none())
            })
        })
        .map(|e| execution_id(e).to_string())
        .collect();
    expected.sort();
    if actual == expected {
        Ok(())
    } else {
        Err(format!(
            "recoverable() is {actual:?}, the model expected {expected:?}"
        ))
    }
}
