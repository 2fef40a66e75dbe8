//! The checker's rules for the runtime's executions (see [`super::runtime_roles`]):
//!
//! - **over_limit**: the journal's `events`, walked in `id` order (commit order, sounder than
//!   timestamps taken before the commit), recount each limited queue's running executions:
//!   +1 at a `claimed` event, −1 at the first event that ends that run (`released`,
//!   `orphan_reclaimed`, `unlocked_interrupted`, `ambiguity_failed`, `cancelled`, and the
//!   parking events `parked`, `yielded`, `stuck`). A count above the queue's limit at any
//!   commit (limits changed by `queue_configured` events followed), a claim of an execution
//!   whose earlier run still holds a slot, or a run that ended with no such event (its slot
//!   could not be recounted) is a violation.
//! - **wrong_end**: every runtime execution ends as its plan and the cancels explain:
//!   completed with its plan's output, the value of its plan's last published event, and no
//!   fatal step in its plan; failed at its planned fatal step (not at a receive that got what
//!   its plan rules out); cancelled only after a canceller asked (`c` record); and one whose
//!   cancel was acknowledged (`C ... cancelled`) ends cancelled. (Unfinished ones count as
//!   `stuck`.)
//! - **bad_messages**: every acknowledged send (`S`) is in `messages` exactly once for its
//!   (receiver, key), with the acknowledged message id, topic and payload; every send of one
//!   key was answered with the same message id. Every consumed message is consumed by the
//!   receive step that recorded it (same execution, seq, topic and payload), and every receive
//!   step that recorded a message consumed it (R4); every acknowledged receive (`M`) returned
//!   what the journal's step holds, so no rerun got another message.
//! - **after_cancel**: no effect of an execution is appended after its cancellation was
//!   acknowledged.
//! - **early_wakes**: for every timer step (`durably:sleep/<name>`, result `{"wake_at": T}`),
//!   the execution's next step was first written at or after T, a completed or failed
//!   execution was finalized at or after T, and every `T` record (a sleep returning) was
//!   appended at or after T on the wall clock.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params};

use super::BoxError;
use super::checker::{EffectRecord, Report};
use super::plan::{
    ExecutionPlan, PROGRESS_EVENT, PlanInput, RuntimeStep, StepKind, progress_value,
};
use super::runtime_workflow::{FATAL_MESSAGE, RuntimeOutput, TIMED_OUT};

/// The events that end a run holding a slot of a limited queue.
const RUN_ENDS: [&str; 8] = [
    "released",
    "orphan_reclaimed",
    "unlocked_interrupted",
    "ambiguity_failed",
    "cancelled",
    "parked",
    "yielded",
    "stuck",
];

/// Runs every runtime rule. A journal no runtime ever opened has none of the runtime's
/// tables, and nothing to check.
///
/// # Errors
/// The journal cannot be read, or a record is malformed.
pub(super) fn check(
    conn: &Connection,
    acks: &[Vec<String>],
    effects: &HashMap<String, Vec<EffectRecord>>,
    report: &mut Report,
) -> Result<(), BoxError> {
    if !table_exists(conn, "runtime_executions")? {
        return Ok(());
    }
    check_queue_limits(conn, report)?;
    check_ends(conn, acks, report)?;
    check_messages(conn, acks, report)?;
    check_receives(conn, acks, report)?;
    check_after_cancel(acks, effects, report)?;
    check_timers(conn, acks, report)?;
    report.parked = conn.query_row(
        "SELECT count(*) FROM events WHERE kind = 'parked'",
        [],
        |row| row.get::<_, i64>(0),
    )? as u64;
    Ok(())
}

fn table_exists(conn: &Connection, name: &str) -> Result<bool, BoxError> {
    Ok(conn
        .query_row(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [name],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

/// Each queue's limit before its first `queue_configured` event: that event's previous value,
/// or the stored limit when it never changed.
fn first_limits(conn: &Connection) -> Result<HashMap<String, Option<i64>>, BoxError> {
    let mut limits = HashMap::new();
    let mut statement = conn.prepare("SELECT queue, concurrency_max FROM queues")?;
    for row in statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))? {
        let (queue, limit): (String, Option<i64>) = row?;
        limits.insert(queue, limit);
    }
    let mut statement = conn.prepare(
        "SELECT json_extract(detail, '$.queue'),
                json_extract(detail, '$.previous_concurrency_max')
         FROM events WHERE kind = 'queue_configured' ORDER BY id DESC",
    )?;
    for row in statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))? {
        let (queue, previous): (String, Option<i64>) = row?;
        limits.insert(queue, previous);
    }
    Ok(limits)
}

/// One event of the queue walk.
struct QueueEvent {
    id: i64,
    execution_id: Option<String>,
    kind: String,
    queue: Option<String>,
    limit: Option<i64>,
}

fn check_queue_limits(conn: &Connection, report: &mut Report) -> Result<(), BoxError> {
    let mut limits = first_limits(conn)?;
    let ends = RUN_ENDS.map(|kind| format!("'{kind}'")).join(", ");
    let mut statement = conn.prepare(&format!(
        "SELECT id, execution_id, kind, json_extract(detail, '$.queue'),
                json_extract(detail, '$.concurrency_max')
         FROM events WHERE kind IN ('claimed', 'queue_configured', {ends}) ORDER BY id"
    ))?;
    let events = statement
        .query_map([], |row| {
            Ok(QueueEvent {
                id: row.get(0)?,
                execution_id: row.get(1)?,
                kind: row.get(2)?,
                queue: row.get(3)?,
                limit: row.get(4)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut holding: HashMap<String, String> = HashMap::new();
    let mut running: HashMap<String, u64> = HashMap::new();
    for event in events {
        let QueueEvent {
            id,
            execution_id,
            kind,
            queue,
            limit,
        } = event;
        match (kind.as_str(), execution_id, queue) {
            ("queue_configured", _, Some(queue)) => {
                limits.insert(queue, limit);
            }
            ("claimed", Some(execution), Some(queue)) => {
                if let Some(earlier) = holding.get(&execution) {
                    report.over_limit += 1;
                    report.violation(format!(
                        "over_limit: execution {execution} was claimed in {queue} (event {id}) \
                         while its earlier run in {earlier} still held a slot"
                    ));
                    continue;
                }
                let count = running.entry(queue.clone()).or_default();
                *count += 1;
                report.queue_peak = report.queue_peak.max(*count);
                if let Some(Some(limit)) = limits.get(&queue)
                    && *count > *limit as u64
                {
                    report.over_limit += 1;
                    report.violation(format!(
                        "over_limit: {count} executions of queue {queue} were running after \
                         event {id} (claim of {execution}), over its limit of {limit}"
                    ));
                }
                holding.insert(execution, queue);
            }
            (_, Some(execution), _) => {
                if let Some(queue) = holding.remove(&execution)
                    && let Some(count) = running.get_mut(&queue)
                {
                    *count = count.saturating_sub(1);
                }
            }
            _ => {}
        }
    }
    for (execution, queue) in holding {
        let status: Option<String> = conn
            .query_row(
                "SELECT status FROM executions WHERE execution_id = ?1",
                [&execution],
                |row| row.get(0),
            )
            .optional()?;
        // Still running: reported as stuck. Otherwise its run ended with no event saying so.
        if status.as_deref() != Some("running") {
            report.over_limit += 1;
            report.violation(format!(
                "over_limit: execution {execution} left its run in queue {queue} (now \
                 {status:?}) with no event that gives its slot back"
            ));
        }
    }
    Ok(())
}

/// Whether a cancel of each execution was asked (`c`), and whether one was acknowledged done.
fn cancels(acks: &[Vec<String>]) -> (HashSet<&str>, HashSet<&str>) {
    let (mut asked, mut done) = (HashSet::new(), HashSet::new());
    for record in acks {
        match record.as_slice() {
            [kind, id, ..] if kind == "c" => {
                asked.insert(id.as_str());
            }
            [kind, id, outcome, ..] if kind == "C" && outcome == "cancelled" => {
                done.insert(id.as_str());
            }
            _ => {}
        }
    }
    (asked, done)
}

fn check_ends(
    conn: &Connection,
    acks: &[Vec<String>],
    report: &mut Report,
) -> Result<(), BoxError> {
    let (asked, done) = cancels(acks);
    report.cancelled = done.len() as u64;
    let mut statement = conn.prepare(
        "SELECT e.execution_id, e.status, e.input, e.output, json_extract(e.error, '$.message'),
                (SELECT value FROM workflow_events w
                 WHERE w.execution_id = e.execution_id AND w.key = ?1)
         FROM executions e JOIN runtime_executions r ON r.execution_id = e.execution_id",
    )?;
    // Every kind the torture runs through the runtime; its input says it is a runtime plan.
    let rows = statement
        .query_map([PROGRESS_EVENT], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?,
                row.get::<_, Option<String>>(4)?,
                row.get::<_, Option<String>>(5)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (id, status, input, output, message, progress) in rows {
        let input: PlanInput = serde_json::from_str(&input)?;
        if !input.shape.is_runtime() {
            continue;
        }
        report.runtime_executions += 1;
        let plan = ExecutionPlan::from_input(input);
        let fatal = plan.steps.iter().any(|step| step.kind == StepKind::Fatal);
        let steps = output
            .as_deref()
            .map(serde_json::from_str::<RuntimeOutput>)
            .transpose()?
            .map(|output| output.steps);
        let progress: Option<serde_json::Value> =
            progress.as_deref().map(serde_json::from_str).transpose()?;
        let wrong = match status.as_str() {
            _ if done.contains(id.as_str()) && status != "cancelled" => {
                Some("its cancel was acknowledged")
            }
            "completed" if fatal => Some("its plan has a fatal step"),
            "completed" if steps != Some(plan.steps.len() as u64) => {
                Some("its output is not its plan's")
            }
            "completed" if progress != last_progress(&plan) => {
                Some("its published event is not its plan's last")
            }
            "failed" if !fatal || message.as_deref() != Some(FATAL_MESSAGE) => {
                Some("it did not fail at its planned fatal step")
            }
            "cancelled" if !asked.contains(id.as_str()) => Some("nobody asked to cancel it"),
            _ => None,
        };
        if let Some(why) = wrong {
            report.wrong_end += 1;
            report.violation(format!(
                "wrong_end: runtime execution {id} ended {status}, but {why} ({message:?})"
            ));
        }
    }
    Ok(())
}

/// The value of the last event `plan` publishes, if it publishes one.
fn last_progress(plan: &ExecutionPlan) -> Option<serde_json::Value> {
    plan.steps
        .iter()
        .rposition(|step| step.kind == StepKind::Runtime(RuntimeStep::SetEvent))
        .map(|seq| serde_json::Value::String(progress_value(plan.input.index, seq)))
}

/// An acknowledged send: its topic, payload and the message id each send of its key got.
struct AckedSend<'a> {
    topic: &'a str,
    value: &'a str,
    message_ids: HashSet<&'a str>,
}

fn check_messages(
    conn: &Connection,
    acks: &[Vec<String>],
    report: &mut Report,
) -> Result<(), BoxError> {
    let mut sends: HashMap<(&str, &str), AckedSend<'_>> = HashMap::new();
    for record in acks {
        if let [kind, receiver, topic, key, value, _outcome, message_id, ..] = record.as_slice()
            && kind == "S"
        {
            report.sent += 1;
            sends
                .entry((receiver.as_str(), key.as_str()))
                .or_insert_with(|| AckedSend {
                    topic,
                    value,
                    message_ids: HashSet::new(),
                })
                .message_ids
                .insert(message_id);
        }
    }
    let mut stored = conn.prepare(
        "SELECT id, topic, payload FROM messages
         WHERE execution_id = ?1 AND idempotency_key = ?2",
    )?;
    for ((receiver, key), send) in &sends {
        let rows = stored
            .query_map(params![receiver, key], |row| {
                Ok((
                    row.get::<_, i64>(0)?.to_string(),
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let payload = serde_json::Value::String(send.value.to_owned()).to_string();
        let matches = match rows.as_slice() {
            [(id, topic, stored)] => {
                send.message_ids.len() == 1
                    && send.message_ids.contains(id.as_str())
                    && topic == send.topic
                    && *stored == payload
            }
            _ => false,
        };
        if !matches {
            report.bad_messages += 1;
            report.violation(format!(
                "bad_messages: the send of key {key} to {receiver} was acknowledged as message \
                 {:?} on {} but the journal holds {rows:?}",
                send.message_ids, send.topic
            ));
        }
    }
    Ok(())
}

fn check_after_cancel(
    acks: &[Vec<String>],
    effects: &HashMap<String, Vec<EffectRecord>>,
    report: &mut Report,
) -> Result<(), BoxError> {
    let mut cancelled_at: HashMap<&str, u64> = HashMap::new();
    for record in acks {
        if let [kind, id, outcome, _pid, at] = record.as_slice()
            && kind == "C"
            && outcome == "cancelled"
        {
            let at: u64 = at.parse()?;
            let earliest = cancelled_at.entry(id.as_str()).or_insert(at);
            *earliest = (*earliest).min(at);
        }
    }
    for effect in effects.values().flatten() {
        if let Some(at) = cancelled_at.get(effect.execution_id.as_str())
            && effect.at_ns > *at
        {
            report.after_cancel += 1;
            report.violation(format!(
                "after_cancel: execution {} made an effect after its cancel was acknowledged",
                effect.execution_id
            ));
        }
    }
    Ok(())
}

/// A receive step's recorded result.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct Received {
    message_id: Option<i64>,
    message: Option<serde_json::Value>,
    #[serde(default)]
    timed_out: bool,
}

/// Completed receive steps by (execution, seq): each one's topic and recorded result.
type ReceiveSteps = HashMap<(String, i64), (String, Received)>;

/// Every completed receive step.
fn receive_steps(conn: &Connection) -> Result<ReceiveSteps, BoxError> {
    let mut statement = conn.prepare(
        "SELECT execution_id, seq, substr(name, length('durably:recv/') + 1), result FROM steps
         WHERE name LIKE 'durably:recv/%' AND state = 'completed'",
    )?;
    let rows = statement
        .query_map([], |row| {
            Ok((
                (row.get::<_, String>(0)?, row.get::<_, i64>(1)?),
                (row.get::<_, String>(2)?, row.get::<_, String>(3)?),
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut steps = HashMap::new();
    for (place, (topic, result)) in rows {
        steps.insert(place, (topic, serde_json::from_str(&result)?));
    }
    Ok(steps)
}

/// A consumed message row.
struct Consumed {
    id: i64,
    execution_id: String,
    topic: String,
    payload: String,
    /// The seq of the receive step that consumed it.
    by_seq: i64,
}

fn check_receives(
    conn: &Connection,
    acks: &[Vec<String>],
    report: &mut Report,
) -> Result<(), BoxError> {
    let steps = receive_steps(conn)?;
    let mut statement = conn.prepare(
        "SELECT id, execution_id, topic, payload, consumed_seq FROM messages
         WHERE consumed_seq IS NOT NULL",
    )?;
    let consumed = statement
        .query_map([], |row| {
            Ok(Consumed {
                id: row.get(0)?,
                execution_id: row.get(1)?,
                topic: row.get(2)?,
                payload: row.get(3)?,
                by_seq: row.get(4)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut consumed_by_step = HashSet::new();
    for row in &consumed {
        let place = (row.execution_id.clone(), row.by_seq);
        let recorded = steps.get(&place).is_some_and(|(topic, received)| {
            received.message_id == Some(row.id)
                && *topic == row.topic
                && received
                    .message
                    .as_ref()
                    .map(ToString::to_string)
                    .as_deref()
                    == Some(row.payload.as_str())
        });
        if !recorded {
            report.bad_messages += 1;
            report.violation(format!(
                "bad_messages: message {} to {} is consumed by step {} but that step does not \
                 record it",
                row.id, row.execution_id, row.by_seq
            ));
        }
        consumed_by_step.insert(place);
    }
    for (place, (topic, received)) in &steps {
        if received.timed_out {
            report.timed_out += 1;
        } else {
            report.received += 1;
        }
        if received.message_id.is_some() && !consumed_by_step.contains(place) {
            report.bad_messages += 1;
            report.violation(format!(
                "bad_messages: receive step {} of {} on {topic} recorded message {:?}, which is \
                 not consumed by it",
                place.1, place.0, received.message_id
            ));
        }
    }
    check_receive_acks(&steps, acks, report)
}

/// Every `M` record returned what the journal's receive step holds.
fn check_receive_acks(
    steps: &ReceiveSteps,
    acks: &[Vec<String>],
    report: &mut Report,
) -> Result<(), BoxError> {
    for record in acks {
        let [kind, id, seq, returned, ..] = record.as_slice() else {
            continue;
        };
        if kind != "M" {
            continue;
        }
        let place = (id.clone(), seq.parse::<i64>()?);
        let agrees = steps.get(&place).is_some_and(|(_, received)| {
            if returned == TIMED_OUT {
                received.timed_out
            } else {
                received
                    .message
                    .as_ref()
                    .and_then(|message| message.as_str())
                    == Some(returned.as_str())
            }
        });
        if !agrees {
            report.bad_messages += 1;
            report.violation(format!(
                "bad_messages: receive step {seq} of {id} returned {returned:?}, but the \
                 journal holds {:?}",
                steps.get(&place)
            ));
        }
    }
    Ok(())
}

fn timestamp(text: &str) -> Result<chrono::DateTime<chrono::Utc>, BoxError> {
    durably_lock::parse_timestamp(text).ok_or_else(|| format!("bad timestamp {text:?}").into())
}

fn check_timers(
    conn: &Connection,
    acks: &[Vec<String>],
    report: &mut Report,
) -> Result<(), BoxError> {
    let mut statement = conn.prepare(
        "SELECT s.execution_id, s.seq, json_extract(s.result, '$.wake_at'),
                (SELECT coalesce(n.intent_at, n.result_at) FROM steps n
                 WHERE n.execution_id = s.execution_id AND n.seq = s.seq + 1),
                CASE WHEN e.status IN ('completed', 'failed') THEN e.finalized_at END
         FROM steps s JOIN executions e ON e.execution_id = s.execution_id
         WHERE s.name LIKE 'durably:sleep/%' AND s.state = 'completed'",
    )?;
    let timers = statement
        .query_map([], |row| {
            Ok((
                (row.get::<_, String>(0)?, row.get::<_, i64>(1)?),
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?,
                row.get::<_, Option<String>>(4)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut wake_at = HashMap::new();
    for (place, wake, next, finalized) in timers {
        let wake = timestamp(&wake)?;
        for (what, at) in [("its next step", next), ("its end", finalized)] {
            if let Some(at) = at
                && timestamp(&at)? < wake
            {
                report.early_wakes += 1;
                report.violation(format!(
                    "early_wakes: timer step {} of {} wakes at {wake}, but {what} was written \
                     at {at}",
                    place.1, place.0
                ));
            }
        }
        wake_at.insert(place, wake);
    }
    for record in acks {
        if let [kind, id, seq, wall_ms, ..] = record.as_slice()
            && kind == "T"
        {
            let place = (id.clone(), seq.parse::<i64>()?);
            let returned = chrono::DateTime::from_timestamp_millis(wall_ms.parse()?);
            let early = match (wake_at.get(&place), returned) {
                (Some(wake), Some(returned)) => returned < *wake,
                // A sleep returned, but the journal has no timer there.
                _ => true,
            };
            if early {
                report.early_wakes += 1;
                report.violation(format!(
                    "early_wakes: the sleep of step {seq} of {id} returned at {returned:?}, \
                     before its wake time {:?}",
                    wake_at.get(&place)
                ));
            }
        }
    }
    Ok(())
}
