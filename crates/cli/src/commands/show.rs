//! `durably show ID [--limit N] [--after SEQ] [--events-after ID] [--messages-before ID]
//! [--workflow-events-before SEQ]`: one execution, a page of its steps and a page of its audit
//! events, and for an execution of the runtime its runtime block and pages of its messages and
//! workflow events (see [`super::show_runtime`]). Payloads appear only as bounded, escaped
//! previews, which are read in SQL, so an execution of any length and payloads of any size cost
//! one page.

use std::fmt::Write as _;

use durably::lock::format_timestamp;
use durably::operator::SeenIntent;
use durably::{
    EventRecord, ExecutionRecord, Inspector, PayloadPreview, Status, StepRecord, StepState,
};
use serde::Serialize;
use uuid::Uuid;

use super::show_children::{self, FamilyShown};
use super::show_runtime::{self, RuntimeShown};
use crate::cli::ShowArgs;
use crate::db::Target;
use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::error_fields;
use crate::escape::{escape, preview, preview_opt};
use crate::output::{Table, or_dash, print, print_json};
use crate::runtime_rows::{self, Pages};

/// `show --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Shown {
    execution: Execution,
    holder: Option<super::locks::Holder>,
    steps: Vec<Step>,
    /// The `--after` that shows the next page of steps; `None` on the last page.
    steps_next_after: Option<u32>,
    events: Vec<Event>,
    /// The `--events-after` that shows the next page of events; `None` on the last page.
    events_next_after: Option<i64>,
    #[serde(flatten)]
    runtime: RuntimeShown,
    #[serde(flatten)]
    family: FamilyShown,
}

/// `ls --json`'s row, then the payload previews; flattening keeps the documented field order.
#[derive(Debug, Serialize)]
struct Execution {
    #[serde(flatten)]
    row: super::ls::Row,
    input_preview: String,
    output_preview: Option<String>,
    error_preview: Option<String>,
}

#[derive(Debug, Serialize)]
struct Step {
    seq: u32,
    name: String,
    effect: String,
    policy: Option<String>,
    state: String,
    attempts: i64,
    idempotency_key: String,
    intent_at: Option<String>,
    result_at: Option<String>,
    result_preview: Option<String>,
    error_preview: Option<String>,
    /// Which intent this is, for `resolve --seen`; only for a step in the ambiguous window.
    seen: Option<String>,
    /// Why a step in the ambiguous window has no token.
    #[serde(skip)]
    no_token_because: Option<String>,
}

#[derive(Debug, Serialize)]
struct Event {
    id: i64,
    at: String,
    seq: Option<i64>,
    kind: String,
    detail_preview: String,
}

impl Execution {
    fn from_record(record: &ExecutionRecord<PayloadPreview>, position: Option<u64>) -> Self {
        Self {
            row: super::ls::Row::from_record(record, position),
            input_preview: preview(&record.input),
            output_preview: preview_opt(record.output.as_ref()),
            error_preview: preview_opt(record.error.as_ref()),
        }
    }
}

impl Step {
    fn from_record(record: &StepRecord<PayloadPreview>, seen: Seen) -> Self {
        Self {
            seq: record.seq,
            name: escape(&record.name),
            effect: record.effect.as_str().to_owned(),
            policy: record.policy.map(|policy| policy.as_str().to_owned()),
            state: record.state.as_str().to_owned(),
            attempts: i64::from(record.attempts),
            idempotency_key: record.idempotency_key.to_string(),
            intent_at: record.intent_at.map(format_timestamp),
            result_at: record.result_at.map(format_timestamp),
            result_preview: preview_opt(record.result.as_ref()),
            error_preview: preview_opt(record.error.as_ref()),
            seen: seen.token.map(|seen| seen.to_string()),
            no_token_because: seen.no_token_because,
        }
    }
}

impl Event {
    fn from_record(record: &EventRecord<PayloadPreview>) -> Self {
        Self {
            id: record.id,
            at: format_timestamp(record.at),
            seq: record.seq.map(i64::from),
            kind: escape(&record.kind),
            detail_preview: preview(&record.detail),
        }
    }
}

/// What `show` says of a step's intent: the token for `resolve --seen`, or why there is none.
#[derive(Debug, Default)]
struct Seen {
    token: Option<SeenIntent>,
    no_token_because: Option<String>,
}

/// Shows one execution.
pub fn run(target: &Target, args: &ShowArgs, json: bool) -> Result<()> {
    let shown = load(&target.inspect()?, args)?;
    if json {
        return print_json(&shown);
    }
    print(&render(&shown))
}

fn load(inspector: &Inspector, args: &ShowArgs) -> Result<Shown> {
    let (id, previews) = (args.id, inspector.previews());
    let record = previews.get(id)?.ok_or_else(|| {
        CliError::new(
            ErrorCode::NotFound,
            format!("no execution {id} in this journal"),
        )
        .with(error_fields::execution(&id))
        .hint("`durably ls` lists the executions of this journal")
    })?;
    let resource = id.to_string();
    let holder = super::locks::holders(inspector)?
        .into_iter()
        .find(|holder| holder.resource == resource);
    // One row past the page says whether there is a next one.
    let page_and_one = args.limit.saturating_add(1);
    let mut steps = previews.steps_page(id, args.after, page_and_one)?;
    let steps_next_after = next_page(&mut steps, args.limit).map(|last| last.seq);
    let mut events = previews.events_page(id, args.events_after, page_and_one)?;
    let events_next_after = next_page(&mut events, args.limit).map(|last| last.id);
    let pages = Pages {
        rows: page_and_one,
        messages_before: args.messages_before,
        events_before: args.workflow_events_before,
    };
    let reading = runtime_rows::read(inspector, id, record.status == Status::Queued, pages)?;
    Ok(Shown {
        execution: Execution::from_record(&record, reading.position),
        holder,
        steps: steps
            .iter()
            .map(|step| Ok(Step::from_record(step, seen(inspector, id, step)?)))
            .collect::<Result<_>>()?,
        steps_next_after,
        events: events.iter().map(Event::from_record).collect(),
        events_next_after,
        runtime: RuntimeShown::new(reading, args.limit),
        family: FamilyShown::new(crate::children_rows::family(inspector, id)?),
    })
}

/// Cuts `rows`, read with one row past the page, to `limit`, and returns the page's last row
/// when a next page follows it.
pub(super) fn next_page<T>(rows: &mut Vec<T>, limit: u32) -> Option<&T> {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    if more { rows.last() } else { None }
}

/// The token of a step in the ambiguous window, or why it has none.
fn seen(inspector: &Inspector, id: Uuid, step: &StepRecord<PayloadPreview>) -> Result<Seen> {
    if step.state != StepState::Intent {
        return Ok(Seen::default());
    }
    let because = |text: String| Seen {
        token: None,
        no_token_because: Some(text),
    };
    match inspector.seen_intent(id, step.seq) {
        Ok(token) => Ok(Seen {
            token,
            no_token_because: None,
        }),
        // `render_steps` says why instead.
        Err(durably::Error::Locked { .. }) => Ok(because(
            "a live process holds the execution and may be running it".to_owned(),
        )),
        Err(durably::Error::LeaseExpiredHolderAlive { pid, .. }) => Ok(because(format!(
            "pid {pid} lost the execution when its lease expired and may still be running the \
             step, so its effect can still happen"
        ))),
        Err(error) => Err(error.into()),
    }
}

fn render(shown: &Shown) -> String {
    let execution = &shown.execution;
    let row = &execution.row;
    let mut text = String::new();
    let fields = [
        ("execution", row.execution_id.clone()),
        ("kind", row.kind.clone()),
        ("name", row.name.clone()),
        ("status", row.status.clone()),
        ("opens", row.opens.to_string()),
        ("created", row.created_at.clone()),
        ("updated", row.updated_at.clone()),
        ("finalized", or_dash(row.finalized_at.as_deref())),
        ("input", execution.input_preview.clone()),
        ("output", or_dash(execution.output_preview.as_deref())),
        ("error", or_dash(execution.error_preview.as_deref())),
    ];
    for (label, value) in fields {
        let _ = writeln!(text, "{label:<10} {value}");
    }
    if let Some(detail) = &row.status_detail {
        let _ = writeln!(text, "{:<10} {detail}", "detail");
    }
    if let Some(at) = &row.cancel_requested_at {
        let reason = row.cancel_reason.as_deref().unwrap_or("no reason given");
        let _ = writeln!(text, "{:<10} requested at {at}: {reason}", "cancel");
    }
    let holder = shown.holder.as_ref().map_or_else(
        || "nobody".to_owned(),
        |holder| {
            format!(
                "pid {} on {} since {} ({}: {})",
                holder.pid, holder.hostname, holder.since, holder.verdict, holder.reason
            )
        },
    );
    let _ = writeln!(text, "{:<10} {holder}", "held by");
    text.push_str(&show_runtime::render(&shown.runtime, row));
    text.push_str(&show_children::render(&shown.family, &row.execution_id));
    text.push_str(&render_steps(shown));
    text.push_str(&render_events(shown));
    text
}

fn render_steps(shown: &Shown) -> String {
    let mut text = format!("\nsteps ({})\n", shown.steps.len());
    if shown.steps.is_empty() {
        return text;
    }
    let id = &shown.execution.row.execution_id;
    let mut table = Table::new(&[
        "SEQ",
        "NAME",
        "EFFECT",
        "POLICY",
        "STATE",
        "ATTEMPTS",
        "INTENT AT",
        "RESULT AT",
        "RESULT OR ERROR",
    ]);
    for step in &shown.steps {
        let outcome = match (&step.result_preview, &step.error_preview) {
            (_, Some(error)) => format!("error: {error}"),
            (Some(result), None) => result.clone(),
            (None, None) => "-".to_owned(),
        };
        table.row(vec![
            step.seq.to_string(),
            step.name.clone(),
            step.effect.clone(),
            or_dash(step.policy.as_deref()),
            step.state.clone(),
            step.attempts.to_string(),
            or_dash(step.intent_at.as_deref()),
            or_dash(step.result_at.as_deref()),
            outcome,
        ]);
    }
    text.push_str(&table.render());
    if let Some(after) = shown.steps_next_after {
        let _ = writeln!(
            text,
            "more steps follow: `durably show {id} --after {after}`"
        );
    }
    for step in shown.steps.iter().filter(|step| step.state == "intent") {
        let _ = match &step.seen {
            Some(seen) => writeln!(
                text,
                "step {} is in the ambiguous window: its effect may or may not have happened. \
                 Check the outside world with key {}, then \
                 `durably resolve {id} {} --seen {seen} --completed JSON` or `--not-done`.",
                step.seq, step.idempotency_key, step.seq
            ),
            None => writeln!(
                text,
                "step {} is in the ambiguous window, but {}: look again once that process has \
                 stopped.",
                step.seq,
                step.no_token_because
                    .as_deref()
                    .unwrap_or("it cannot be checked now")
            ),
        };
    }
    text
}

fn render_events(shown: &Shown) -> String {
    let events = &shown.events;
    let mut text = format!("\naudit events ({})\n", events.len());
    if events.is_empty() {
        return text;
    }
    let mut table = Table::new(&["ID", "AT", "SEQ", "KIND", "DETAIL"]);
    for event in events {
        table.row(vec![
            event.id.to_string(),
            event.at.clone(),
            event
                .seq
                .map_or_else(|| "-".to_owned(), |seq| seq.to_string()),
            event.kind.clone(),
            event.detail_preview.clone(),
        ]);
    }
    text.push_str(&table.render());
    if let Some(after) = shown.events_next_after {
        let id = &shown.execution.row.execution_id;
        let _ = writeln!(
            text,
            "more events follow: `durably show {id} --events-after {after}`"
        );
    }
    text
}
