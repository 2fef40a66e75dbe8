//! The runtime's part of `durably show`: the execution's runtime row (version, deadline,
//! deduplication key, failures), where it is in its queue or what it waits for, and pages of
//! the messages sent to it and the workflow events it set, newest first, with their counts.
//! Payloads appear only as escaped previews. On a journal no runtime has used, and for an
//! execution driven by hand with nothing sent to it, the text shows none of it.

use std::fmt::Write as _;

use serde::Serialize;

use super::show::next_page;
use crate::escape::{escape, escape_json, preview};
use crate::output::{Table, or_dash};
use crate::runtime_rows::{MessageRow, RuntimeReading, WorkflowEventRow};

/// The runtime's fields of `show --json`, flattened into it. Stable fields.
#[derive(Debug, Serialize)]
pub(super) struct RuntimeShown {
    /// `null` for an execution the runtime did not start.
    runtime: Option<RuntimeBlock>,
    messages: Vec<Message>,
    messages_count: i64,
    messages_pending: i64,
    /// The `--messages-before` that shows the next page; `None` on the last page.
    messages_next_before: Option<i64>,
    workflow_events: Vec<WorkflowEvent>,
    workflow_events_count: i64,
    /// The `--workflow-events-before` that shows the next page; `None` on the last page.
    workflow_events_next_before: Option<i64>,
}

#[derive(Debug, Serialize)]
struct RuntimeBlock {
    version: i64,
    deadline_at: Option<String>,
    dedup_key: Option<String>,
    resume_failures: i64,
    last_failure: Option<serde_json::Value>,
    /// The execution this one was forked from; `null` for one that is no fork.
    forked_from: Option<ForkLink>,
    /// Its forks, at most 20.
    forks: Vec<ForkLink>,
}

/// One end of a fork's link.
#[derive(Debug, Serialize)]
struct ForkLink {
    execution_id: String,
    /// The fork copied the original's steps before this seq.
    from_seq: i64,
}

impl ForkLink {
    fn new((execution_id, from_seq): &(String, i64)) -> Self {
        Self {
            execution_id: escape(execution_id),
            from_seq: *from_seq,
        }
    }
}

#[derive(Debug, Serialize)]
struct Message {
    id: i64,
    topic: String,
    sent_at: String,
    idempotency_key: Option<String>,
    consumed_seq: Option<i64>,
    consumed_at: Option<String>,
    preview: String,
}

#[derive(Debug, Serialize)]
struct WorkflowEvent {
    key: String,
    seq: i64,
    set_at: String,
    value_preview: String,
}

impl RuntimeShown {
    /// What was read, escaped, cut to pages of `limit`.
    pub(super) fn new(reading: RuntimeReading, limit: u32) -> Self {
        let RuntimeReading {
            row,
            mut messages,
            messages_count,
            messages_pending,
            mut events,
            events_count,
            ..
        } = reading;
        let messages_next_before = next_page(&mut messages, limit).map(|message| message.id);
        let events_next_before = next_page(&mut events, limit).map(|event| event.seq);
        Self {
            runtime: row.map(|row| RuntimeBlock {
                version: row.version,
                deadline_at: row.deadline_at.as_deref().map(escape),
                dedup_key: row.dedup_key.as_deref().map(escape),
                resume_failures: row.resume_failures,
                // Written by the runtime as JSON; shown as text should it not parse.
                last_failure: row.last_failure.map(|text| {
                    serde_json::from_str(&text).map_or_else(
                        |_| serde_json::Value::String(escape(&text)),
                        |value| escape_json(&value),
                    )
                }),
                forked_from: row.forked_from.as_ref().map(ForkLink::new),
                forks: row.forks.iter().map(ForkLink::new).collect(),
            }),
            messages: messages.iter().map(Message::from_row).collect(),
            messages_count,
            messages_pending,
            messages_next_before,
            workflow_events: events.iter().map(WorkflowEvent::from_row).collect(),
            workflow_events_count: events_count,
            workflow_events_next_before: events_next_before,
        }
    }

    /// Whether the text has anything of the runtime to show.
    fn is_empty(&self) -> bool {
        self.runtime.is_none() && self.messages_count == 0 && self.workflow_events_count == 0
    }
}

impl Message {
    fn from_row(row: &MessageRow) -> Self {
        Self {
            id: row.id,
            topic: escape(&row.topic),
            sent_at: escape(&row.sent_at),
            idempotency_key: row.idempotency_key.as_deref().map(escape),
            consumed_seq: row.consumed_seq,
            consumed_at: row.consumed_at.as_deref().map(escape),
            preview: preview(&row.payload),
        }
    }
}

impl WorkflowEvent {
    fn from_row(row: &WorkflowEventRow) -> Self {
        Self {
            key: escape(&row.key),
            seq: row.seq,
            set_at: escape(&row.set_at),
            value_preview: preview(&row.value),
        }
    }
}

/// The runtime block and the messages and workflow events sections of `show`'s text for the
/// execution of `row`; empty when there is nothing of the runtime to show.
pub(super) fn render(shown: &RuntimeShown, row: &super::ls::Row) -> String {
    if shown.is_empty() {
        return String::new();
    }
    let mut text = String::new();
    if let Some(runtime) = &shown.runtime {
        text.push_str("\nruntime\n");
        let queue = or_dash(row.queue.as_deref());
        let place = match row.position {
            Some(position) => format!("{queue} (#{position})"),
            None => queue,
        };
        let last = runtime.last_failure.as_ref().map(ToString::to_string);
        let fields = [
            ("version", runtime.version.to_string()),
            ("queue", place),
            ("priority", row.priority.to_string()),
            ("due", or_dash(row.due_at.as_deref())),
            ("waits for", or_dash(row.wait_topic.as_deref())),
            ("deadline", or_dash(runtime.deadline_at.as_deref())),
            ("dedup key", or_dash(runtime.dedup_key.as_deref())),
            ("failures", runtime.resume_failures.to_string()),
            ("last failure", or_dash(last.as_deref())),
        ];
        for (label, value) in fields {
            let _ = writeln!(text, "{label:<12} {value}");
        }
        if let Some(original) = &runtime.forked_from {
            let (id, seq) = (&original.execution_id, original.from_seq);
            let _ = writeln!(
                text,
                "{:<12} {id} (its steps before seq {seq})",
                "forked from"
            );
        }
        for fork in &runtime.forks {
            let (id, seq) = (&fork.execution_id, fork.from_seq);
            let _ = writeln!(
                text,
                "{:<12} {id} (copied its steps before seq {seq})",
                "fork"
            );
        }
    }
    text.push_str(&render_messages(shown, &row.execution_id));
    text.push_str(&render_events(shown, &row.execution_id));
    text
}

fn render_messages(shown: &RuntimeShown, id: &str) -> String {
    let messages = &shown.messages;
    if shown.messages_count == 0 {
        return "\nmessages (none)\n".to_owned();
    }
    let mut text = format!(
        "\nmessages ({} of {}, {} pending)\n",
        messages.len(),
        shown.messages_count,
        shown.messages_pending
    );
    if messages.is_empty() {
        return text;
    }
    let mut table = Table::new(&["ID", "TOPIC", "SENT", "KEY", "STATE", "MESSAGE"]);
    for message in messages {
        let state = match (message.consumed_seq, &message.consumed_at) {
            (Some(seq), Some(at)) => format!("consumed by step {seq} at {at}"),
            (Some(seq), None) => format!("consumed by step {seq}"),
            (None, _) => "pending".to_owned(),
        };
        table.row(vec![
            message.id.to_string(),
            message.topic.clone(),
            message.sent_at.clone(),
            or_dash(message.idempotency_key.as_deref()),
            state,
            message.preview.clone(),
        ]);
    }
    text.push_str(&table.render());
    if let Some(before) = shown.messages_next_before {
        let _ = writeln!(
            text,
            "more messages follow: `durably show {id} --messages-before {before}`"
        );
    }
    text
}

fn render_events(shown: &RuntimeShown, id: &str) -> String {
    let events = &shown.workflow_events;
    if shown.workflow_events_count == 0 {
        return "\nworkflow events (none)\n".to_owned();
    }
    let mut text = format!(
        "\nworkflow events ({} of {})\n",
        events.len(),
        shown.workflow_events_count
    );
    if events.is_empty() {
        return text;
    }
    let mut table = Table::new(&["KEY", "SEQ", "SET AT", "VALUE"]);
    for event in events {
        table.row(vec![
            event.key.clone(),
            event.seq.to_string(),
            event.set_at.clone(),
            event.value_preview.clone(),
        ]);
    }
    text.push_str(&table.render());
    if let Some(before) = shown.workflow_events_next_before {
        let _ = writeln!(
            text,
            "more workflow events follow: `durably show {id} --workflow-events-before {before}`"
        );
    }
    text
}
