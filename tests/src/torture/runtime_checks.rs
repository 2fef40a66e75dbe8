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
//!   fatal step in its plan, and not after a cancel was asked of it unless the operator
//!   resumed it since (a resume clears the request); failed at its planned
//!   fatal step (not at a receive that got what its plan rules out), or by a step timeout only
//!   when a cancel was asked of it (otherwise the operator resumes it); cancelled only after a
//!   canceller asked (`c` record), or with reason `timeout` when it was started with a deadline
//!   (`D` record), or at all when a cancel of an ancestor was asked or an ancestor had a
//!   deadline (the cancel of a parent cascades to its children); and
//!   one cancelled at once (`C … cancelled`) ends cancelled. (Unfinished ones count as
//!   `stuck`.)
//! - **bad_messages**: every acknowledged send (`S`) is in `messages` exactly once for its
//!   (receiver, key), with the acknowledged message id, topic and payload; every send of one
//!   key was answered with the same message id. Every consumed message is consumed by the
//!   receive step that recorded it (same execution, seq, topic and payload), and every receive
//!   step that recorded a message consumed it (R4); every acknowledged receive (`M`) returned
//!   what the journal's step holds, so no rerun got another message.
//! - **after_cancel**: no effect of an execution is appended after its cancel was acknowledged
//!   done (`C … cancelled`), nor of a step at or after the one where its run saw it was asked
//!   to stop (`O`); and no step row of an execution is newer (by `steps.id`, commit order)
//!   than the newest when a cancel was asked of it (the `cancel_requested` event's
//!   `last_step_id`), unless it was resumed since (R5).
//! - **early_wakes**: for every timer step (`durably:sleep/<name>`, result `{"wake_at": T}`),
//!   the execution's next step was first written at or after T, a completed or failed
//!   execution was finalized at or after T, and every `T` record (a sleep returning) was
//!   appended at or after T on the wall clock.

use std::collections::{HashMap, HashSet};

use durably_db::{Connection, OptionalExtension, Sql, params};
use durably_runtime::DEADLINE_REASON;

use super::BoxError;
use super::checker::{EffectRecord, Report};
use super::composition_checks::{Composition, has_column};
use super::plan::{
    ExecutionPlan, PROGRESS_EVENT, PlanInput, RuntimeStep, StepKind, progress_value,
};
use super::runs::RUN_KIND;
use super::runtime_workflow::{FATAL_MESSAGE, RUNTIME_KIND, RuntimeOutput, TIMED_OUT};

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
    composition: &Composition,
    report: &mut Report,
) -> Result<(), BoxError> {
    if !table_exists(conn, "runtime_executions")? {
        return Ok(());
    }
    check_queue_limits(conn, report)?;
    check_ends(conn, acks, report)?;
    check_messages(conn, acks, report)?;
    check_receives(conn, acks, composition, report)?;
    check_after_cancel(conn, acks, effects, report)?;
    check_timers(conn, acks, report)?;
    report.parked = conn.query_row(
        "SELECT count(*) FROM events WHERE kind = 'parked'",
        [],
        |row| row.get::<_, i64>(0),
    )? as u64;
    Ok(())
}

/// Whether the journal has table `name`.
pub(super) fn table_exists(conn: &Connection, name: &str) -> Result<bool, BoxError> {
    Ok(conn
        .query_row(
            conn.pick(&Sql {
                sqlite: "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                postgres: "SELECT 1 FROM information_schema.tables
                           WHERE table_schema = current_schema() AND table_name = ?1",
            }),
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
        "SELECT (detail ->> 'queue'),
                CAST(detail ->> 'previous_concurrency_max' AS BIGINT)
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
        "SELECT id, execution_id, kind, (detail ->> 'queue'),
                CAST(detail ->> 'concurrency_max' AS BIGINT)
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

/// The cancels the canceller acknowledged: asked (`c`), done at once (`C … cancelled`), and
/// asked of a live holder (`C … requested`); and the executions started with a deadline
/// (`D`).
#[derive(Default)]
struct Cancels<'a> {
    asked: HashSet<&'a str>,
    cancelled: HashSet<&'a str>,
    requested: HashSet<&'a str>,
    deadlines: HashSet<&'a str>,
    /// Each child execution's parent.
    parents: HashMap<String, String>,
}

impl Cancels<'_> {
    /// Whether a cancel of an ancestor of `id` was asked, or an ancestor had a deadline: the
    /// cancel of a parent cascades to its unfinished children.
    fn cascades_to(&self, id: &str) -> bool {
        let mut id = id;
        while let Some(parent) = self.parents.get(id) {
            if self.asked.contains(parent.as_str()) || self.deadlines.contains(parent.as_str()) {
                return true;
            }
            id = parent;
        }
        false
    }
}

/// Each child execution's parent (none before the runtime had children).
fn parents(conn: &Connection) -> Result<HashMap<String, String>, BoxError> {
    if !has_column(conn, "runtime_executions", "parent_execution_id")? {
        return Ok(HashMap::new());
    }
    let mut statement = conn.prepare(
        "SELECT execution_id, parent_execution_id FROM runtime_executions
         WHERE parent_execution_id IS NOT NULL",
    )?;
    let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    Ok(rows.collect::<Result<HashMap<_, _>, _>>()?)
}

fn cancels(acks: &[Vec<String>]) -> Cancels<'_> {
    let mut cancels = Cancels::default();
    for record in acks {
        match record.as_slice() {
            [kind, id, ..] if kind == "c" => {
                cancels.asked.insert(id.as_str());
            }
            [kind, id, ..] if kind == "D" => {
                cancels.deadlines.insert(id.as_str());
            }
            [kind, id, outcome, ..] if kind == "C" && outcome == "cancelled" => {
                cancels.cancelled.insert(id.as_str());
            }
            [kind, id, outcome, ..] if kind == "C" && outcome == "requested" => {
                cancels.requested.insert(id.as_str());
            }
            _ => {}
        }
    }
    cancels
}

/// A runtime execution's end, as the journal holds it.
struct End {
    id: String,
    status: String,
    input: String,
    output: Option<String>,
    /// The message of its error (a workflow's failure).
    message: Option<String>,
    /// The reason of its cancel.
    cancel_reason: Option<String>,
    /// The reason of its status (`step_timeout`).
    detail_reason: Option<String>,
    /// Whether a cancel was asked of it while it ran.
    cancel_requested: bool,
    /// Whether the operator resumed it after the last cancel asked of it (a resume clears the
    /// request).
    resumed_since_request: bool,
    /// Its last published progress event.
    progress: Option<String>,
}

fn ends(conn: &Connection) -> Result<Vec<End>, BoxError> {
    let mut statement = conn.prepare(
        "SELECT e.execution_id, e.status, e.input, e.output, e.error ->> 'message',
                e.error ->> 'cancelled', e.status_detail ->> 'reason',
                e.cancel_requested_at IS NOT NULL,
                (SELECT value FROM workflow_events w
                 WHERE w.execution_id = e.execution_id AND w.key = ?1),
                EXISTS (SELECT 1 FROM events r
                        WHERE r.execution_id = e.execution_id AND r.kind = 'resumed'
                          AND r.id > (SELECT max(c.id) FROM events c
                                      WHERE c.execution_id = e.execution_id
                                        AND c.kind = 'cancel_requested'))
         FROM executions e JOIN runtime_executions r ON r.execution_id = e.execution_id
         WHERE e.kind IN (?2, ?3)",
    )?;
    let rows = statement.query_map([PROGRESS_EVENT, RUNTIME_KIND, RUN_KIND], |row| {
        Ok(End {
            id: row.get(0)?,
            status: row.get(1)?,
            input: row.get(2)?,
            output: row.get(3)?,
            message: row.get(4)?,
            cancel_reason: row.get(5)?,
            detail_reason: row.get(6)?,
            cancel_requested: row.get(7)?,
            progress: row.get(8)?,
            resumed_since_request: row.get(9)?,
        })
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

fn check_ends(
    conn: &Connection,
    acks: &[Vec<String>],
    report: &mut Report,
) -> Result<(), BoxError> {
    let mut cancels = cancels(acks);
    report.cancelled = (cancels.cancelled.len() + cancels.requested.len()) as u64;
    cancels.parents = parents(conn)?;
    // Every runtime execution of a plan.
    for end in ends(conn)? {
        let input: PlanInput = serde_json::from_str(&end.input)?;
        if !input.shape.is_runtime() {
            continue;
        }
        report.runtime_executions += 1;
        if let Some(why) = wrong_end(&end, input, &cancels)? {
            report.wrong_end += 1;
            report.violation(format!(
                "wrong_end: runtime execution {} ended {}, but {why} ({:?})",
                end.id, end.status, end.message
            ));
        }
    }
    Ok(())
}

/// Why `end` is not an end its plan and the cancels explain, if it is not.
fn wrong_end(
    end: &End,
    input: PlanInput,
    cancels: &Cancels<'_>,
) -> Result<Option<&'static str>, BoxError> {
    let plan = ExecutionPlan::from_input(input);
    let fatal = plan.steps.iter().any(|step| step.kind == StepKind::Fatal);
    let steps = end
        .output
        .as_deref()
        .map(serde_json::from_str::<RuntimeOutput>)
        .transpose()?
        .map(|output| output.steps);
    let progress: Option<serde_json::Value> = end
        .progress
        .as_deref()
        .map(serde_json::from_str)
        .transpose()?;
    let id = end.id.as_str();
    let timed_out = end.detail_reason.as_deref() == Some(STEP_TIMEOUT_REASON);
    Ok(match end.status.as_str() {
        status if cancels.cancelled.contains(id) && status != "cancelled" => {
            Some("it was cancelled at once")
        }
        "completed" if cancels.requested.contains(id) && !end.resumed_since_request => {
            Some("a cancel was asked of it")
        }
        "completed" if fatal => Some("its plan has a fatal step"),
        "completed" if steps != Some(plan.steps.len() as u64) => {
            Some("its output is not its plan's")
        }
        "completed" if progress != last_progress(&plan) => {
            Some("its published event is not its plan's last")
        }
        // A step timeout's failure stands only when a cancel was asked of the run, which then
        // stops before anyone resumes it.
        "failed" if timed_out && !end.cancel_requested => Some("its step timeout was not resumed"),
        "failed" if !timed_out && (!fatal || end.message.as_deref() != Some(FATAL_MESSAGE)) => {
            Some("it did not fail at its planned fatal step")
        }
        "cancelled" if cancels.cascades_to(id) => None,
        "cancelled" if end.cancel_reason.as_deref() == Some(DEADLINE_REASON) => {
            (!cancels.deadlines.contains(id)).then_some("it was started with no deadline")
        }
        "cancelled" if !cancels.asked.contains(id) => Some("nobody asked to cancel it"),
        _ => None,
    })
}

/// The `status_detail.reason` of an execution a step timeout failed.
const STEP_TIMEOUT_REASON: &str = "step_timeout";

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
    conn: &Connection,
    acks: &[Vec<String>],
    effects: &HashMap<String, Vec<EffectRecord>>,
    report: &mut Report,
) -> Result<(), BoxError> {
    // When each execution was seen stopped, and from which step on nothing may run: a cancel
    // done at once stops every step; a run that saw a request stops the step it was at.
    let mut stopped: HashMap<&str, Vec<(u64, u32)>> = HashMap::new();
    for record in acks {
        match record.as_slice() {
            [kind, id, outcome, _pid, at] if kind == "C" && outcome == "cancelled" => {
                stopped.entry(id).or_default().push((at.parse()?, 0));
            }
            [kind, id, seq, _pid, at] if kind == "O" => {
                stopped
                    .entry(id)
                    .or_default()
                    .push((at.parse()?, seq.parse()?));
            }
            _ => {}
        }
    }
    for effect in effects.values().flatten() {
        let Some(stops) = stopped.get(effect.execution_id.as_str()) else {
            continue;
        };
        let seq: u32 = effect.seq.parse()?;
        if let Some((_, from)) = stops
            .iter()
            .find(|(at, from)| effect.at_ns > *at && seq >= *from)
        {
            report.after_cancel += 1;
            report.violation(format!(
                "after_cancel: step {seq} of execution {} made an effect after the execution \
                 was seen stopped from step {from} on",
                effect.execution_id
            ));
        }
    }
    check_requests(conn, report)
}

/// R5 by commit order: no step row of an execution is newer than the newest one when a cancel
/// was asked of it (the `cancel_requested` event's `last_step_id`; a guarded step's result
/// updates its intent's row), unless it was resumed since.
fn check_requests(conn: &Connection, report: &mut Report) -> Result<(), BoxError> {
    let mut statement = conn.prepare(
        "SELECT e.execution_id, CAST(e.detail ->> 'last_step_id' AS BIGINT),
                (SELECT max(s.id) FROM steps s WHERE s.execution_id = e.execution_id)
         FROM events e
         WHERE e.kind = 'cancel_requested'
           AND NOT EXISTS (SELECT 1 FROM events r
                           WHERE r.execution_id = e.execution_id AND r.kind = 'resumed'
                             AND r.id > e.id)",
    )?;
    let requests = statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Option<i64>>(1)?,
                row.get::<_, Option<i64>>(2)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (id, last_step_id, newest) in requests {
        if newest > last_step_id {
            report.after_cancel += 1;
            report.violation(format!(
                "after_cancel: execution {id} has step row {newest:?}, newer than its newest \
                 ({last_step_id:?}) when a cancel was asked of it"
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
    composition: &Composition,
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
        // A fork's copied receive holds the message its original consumed.
        if received.message_id.is_some()
            && !consumed_by_step.contains(place)
            && !composition.copied.contains(place)
        {
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
        "SELECT s.execution_id, s.seq, (s.result ->> 'wake_at'),
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
