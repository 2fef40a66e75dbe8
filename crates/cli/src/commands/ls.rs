//! `durably ls`: executions, newest first, with a DETAIL column saying where each one is:
//! its queue and place, what it waits for, why it is stuck, which step waits for an operator,
//! and whether a cancel is pending.

use durably::lock::format_timestamp;
use durably::runtime::NON_DETERMINISM_REASON;
use durably::{ExecutionRecord, ListFilter, Status};
use serde::Serialize;

use crate::cli::LsArgs;
use crate::db::Target;
use crate::error::Result;
use crate::escape::{escape, escape_json};
use crate::output::{or_dash, print_rows};

/// The most characters of the DETAIL column; the rest is cut with `…` (`show` prints it all).
const DETAIL_CHARS_MAX: usize = 120;

/// One row of `ls --json`, and the leading fields of `show --json`'s `execution`. Stable fields.
#[derive(Debug, Serialize)]
pub(super) struct Row {
    pub(super) execution_id: String,
    pub(super) kind: String,
    pub(super) name: String,
    pub(super) status: String,
    pub(super) opens: i64,
    pub(super) created_at: String,
    pub(super) updated_at: String,
    pub(super) finalized_at: Option<String>,
    pub(super) queue: Option<String>,
    pub(super) priority: i64,
    /// Its place in its queue's claim order (1: claimed next), while it is claimable.
    pub(super) position: Option<u64>,
    pub(super) due_at: Option<String>,
    pub(super) wait_topic: Option<String>,
    pub(super) cancel_requested_at: Option<String>,
    pub(super) cancel_reason: Option<String>,
    pub(super) status_detail: Option<serde_json::Value>,
    /// The DETAIL column.
    #[serde(skip)]
    pub(super) detail: String,
}

impl Row {
    /// The record's row fields, escaped, with its queue `position` when it is claimable.
    pub(super) fn from_record<P>(record: &ExecutionRecord<P>, position: Option<u64>) -> Self {
        Self {
            execution_id: record.execution_id.to_string(),
            kind: escape(&record.kind),
            name: escape(&record.name),
            status: record.status.as_str().to_owned(),
            opens: i64::from(record.opens),
            created_at: format_timestamp(record.created_at),
            updated_at: format_timestamp(record.updated_at),
            finalized_at: record.finalized_at.map(format_timestamp),
            queue: record.queue.as_deref().map(escape),
            priority: record.priority,
            position,
            due_at: record.due_at.map(format_timestamp),
            wait_topic: record.wait_topic.as_deref().map(escape),
            cancel_requested_at: record.cancel_requested_at.map(format_timestamp),
            cancel_reason: record.cancel_reason.as_deref().map(escape),
            status_detail: record.status_detail.as_ref().map(escape_json),
            detail: detail(record, position),
        }
    }
}

/// The DETAIL column of `record`: `q=NAME #POS p=PRIO`, `not before T`, `topic X until T` or
/// `timer X until T`,
/// why it is stuck, `step S NAME (POLICY)` awaiting an operator, `cancel requested`; escaped.
fn detail<P>(record: &ExecutionRecord<P>, position: Option<u64>) -> String {
    let mut parts = Vec::new();
    let status_detail = record.status_detail.as_ref();
    match record.status {
        Status::Queued => {
            let mut place = Vec::new();
            if let Some(queue) = &record.queue {
                place.push(format!("q={}", escape(queue)));
            }
            if let Some(position) = position {
                place.push(format!("#{position}"));
            }
            place.push(format!("p={}", record.priority));
            if let Some(due) = record.due_at {
                place.push(format!("not before {}", format_timestamp(due)));
            }
            parts.push(place.join(" "));
        }
        Status::Waiting => {
            let mut waits = Vec::new();
            let timer = status_detail
                .and_then(|detail| detail.get("timer"))
                .and_then(serde_json::Value::as_str);
            if let Some(timer) = timer {
                waits.push(format!("timer {}", escape(timer)));
            }
            if let Some(topic) = &record.wait_topic {
                waits.push(format!("topic {}", escape(topic)));
            }
            if let Some(due) = record.due_at {
                waits.push(format!("until {}", format_timestamp(due)));
            }
            parts.push(waits.join(" "));
        }
        Status::Stuck => parts.extend(status_detail.map(stuck_reason)),
        Status::AwaitingOperator => parts.extend(status_detail.map(awaited_step)),
        Status::Running
        | Status::Interrupted
        | Status::Completed
        | Status::Failed
        | Status::Cancelled => parts.extend(status_detail.map(compact)),
    }
    if record.cancel_requested_at.is_some() {
        parts.push("cancel requested".to_owned());
    }
    parts.retain(|part| !part.is_empty());
    cut(&parts.join("; "), DETAIL_CHARS_MAX)
}

/// `failed N runs in a row: MESSAGE`, from a stuck execution's `{failures, last: {message}}`;
/// `non-determinism at step SEQ: recorded R, called C` from a diverged one's
/// `{reason: "non_determinism", seq, recorded, called}`.
fn stuck_reason(detail: &serde_json::Value) -> String {
    if detail.get("reason").and_then(serde_json::Value::as_str) == Some(NON_DETERMINISM_REASON) {
        let field = |name| {
            detail.get(name).map(|value| match value.as_str() {
                Some(text) => escape(text),
                None => value.to_string(),
            })
        };
        if let (Some(seq), Some(recorded), Some(called)) =
            (field("seq"), field("recorded"), field("called"))
        {
            return format!("non-determinism at step {seq}: recorded {recorded}, called {called}");
        }
    }
    let failures = detail.get("failures").and_then(serde_json::Value::as_u64);
    let message = detail
        .get("last")
        .and_then(|last| last.get("message"))
        .and_then(serde_json::Value::as_str);
    match (failures, message) {
        (Some(failures), Some(message)) => {
            format!("failed {failures} runs in a row: {}", escape(message))
        }
        (Some(failures), None) => format!("failed {failures} runs in a row"),
        _ => compact(detail),
    }
}

/// `step SEQ NAME (POLICY)`, or `(POLICY, re-run N times)` when re-runs are exhausted, from
/// the journal's `{seq, step, policy, reason, reruns}`.
fn awaited_step(detail: &serde_json::Value) -> String {
    let seq = detail.get("seq").and_then(serde_json::Value::as_u64);
    let step = detail.get("step").and_then(serde_json::Value::as_str);
    let policy = detail.get("policy").and_then(serde_json::Value::as_str);
    let (Some(seq), Some(step), Some(policy)) = (seq, step, policy) else {
        return compact(detail);
    };
    let why = match detail.get("reruns").and_then(serde_json::Value::as_u64) {
        Some(reruns) => format!("{}, re-run {reruns} times", escape(policy)),
        None => escape(policy),
    };
    format!("step {seq} {} ({why})", escape(step))
}

/// Any other status detail, as compact escaped JSON.
fn compact(detail: &serde_json::Value) -> String {
    escape(&detail.to_string())
}

/// `text` cut to `max` characters, ending in `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut head: String = text.chars().take(max.saturating_sub(1)).collect();
    head.push('…');
    head
}

/// Lists executions.
pub fn run(target: &Target, args: &LsArgs, json: bool) -> Result<()> {
    let inspector = target.inspect()?;
    let filter = ListFilter {
        status: args.status.map(crate::cli::StatusArg::status),
        kind: args.kind.clone(),
        name_contains: args.name.clone(),
        created_since: args.since,
        queue: args.queue.clone(),
        cancel_requested: args.cancel_requested,
        limit: Some(args.limit),
    };
    // Previews: the rows print no payload, and a preview never reads one over the cap.
    let records = match args.parent {
        Some(parent) => children(&inspector, parent, &filter)?,
        None => inspector.previews().list(&filter)?,
    };
    let queued: Vec<_> = records
        .iter()
        .filter(|record| record.status == Status::Queued)
        .map(|record| record.execution_id)
        .collect();
    let positions = crate::runtime_rows::positions(&inspector, &queued)?;
    let position_of = |id| {
        positions
            .iter()
            .find(|(queued, _)| *queued == id)
            .map(|(_, position)| *position)
    };
    let rows: Vec<Row> = records
        .iter()
        .map(|record| Row::from_record(record, position_of(record.execution_id)))
        .collect();
    let header = [
        "EXECUTION",
        "STATUS",
        "KIND",
        "NAME",
        "OPENS",
        "CREATED",
        "FINALIZED",
        "DETAIL",
    ];
    print_rows(&rows, json, "no executions match", &header, |row| {
        vec![
            row.execution_id.clone(),
            row.status.clone(),
            row.kind.clone(),
            row.name.clone(),
            row.opens.to_string(),
            row.created_at.clone(),
            or_dash(row.finalized_at.as_deref()),
            row.detail.clone(),
        ]
    })
}

/// The children of `parent` (at most `filter.limit`, in start order) that have `filter`'s
/// status and kind.
fn children(
    inspector: &durably::Inspector,
    parent: uuid::Uuid,
    filter: &ListFilter,
) -> Result<Vec<ExecutionRecord<durably::PayloadPreview>>> {
    let limit = filter.limit.unwrap_or(u32::MAX);
    let mut records = Vec::new();
    for id in crate::children_rows::children_ids(inspector, parent, limit)? {
        let Some(record) = inspector.previews().get(id)? else {
            continue;
        };
        let status_matches = filter.status.is_none_or(|status| record.status == status);
        let kind_matches = filter.kind.as_ref().is_none_or(|kind| record.kind == *kind);
        if status_matches && kind_matches {
            records.push(record);
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    //! What these prove: the DETAIL column says what the runtime plan's CLI table promises for
    //! each status, and stays escaped and bounded whatever the stored detail holds.
    use super::*;

    #[test]
    fn details_are_read_from_the_status_detail_and_cut() {
        let stuck = serde_json::json!({ "failures": 3, "last": { "message": "boom\u{1b}[2J" } });
        assert_eq!(stuck_reason(&stuck), "failed 3 runs in a row: boom\\e[2J");
        let diverged = serde_json::json!({
            "reason": "non_determinism", "seq": 0, "recorded": "pure step \"a\"",
            "called": "pure step \"b\""
        });
        assert_eq!(
            stuck_reason(&diverged),
            "non-determinism at step 0: recorded pure step \"a\", called pure step \"b\""
        );
        let policy = serde_json::json!({
            "seq": 2, "step": "charge", "policy": "fail", "reason": "policy_fail"
        });
        assert_eq!(awaited_step(&policy), "step 2 charge (fail)");
        let reruns = serde_json::json!({
            "seq": 1, "step": "ship", "policy": "retry", "reason": "reruns_exhausted",
            "reruns": 3, "max": 3
        });
        assert_eq!(awaited_step(&reruns), "step 1 ship (retry, re-run 3 times)");
        assert_eq!(awaited_step(&serde_json::json!({})), "{}");
        let long = "x".repeat(200);
        let shown = cut(&long, DETAIL_CHARS_MAX);
        assert_eq!(shown.chars().count(), DETAIL_CHARS_MAX);
        assert!(shown.ends_with('…'));
    }
}
