//! The checker: compares the ledger and the acknowledgement logs with the journal, after every
//! process of a run has exited, and counts each kind of violation.
//!
//! How each figure is decided (the journal's `steps` row is found by the idempotency key the
//! ledger recorded):
//!
//! - **duplicated**: a guarded step under Skip, Fail or Reconcile whose key appears more than
//!   once in the ledger; a Retry step with more effects than the attempts the journal recorded;
//!   any effect appended after an acknowledgement of its step (a completed step ran again); a
//!   guarded effect made with fencing token 0 (by a run that held no lock).
//! - **retried**: the extra effects of a Retry step, up to the attempts the journal recorded.
//!   (Re-runs of pure and idempotent steps, allowed by their kind, are counted as `reran`.)
//! - **lost**: an acknowledged step outcome, operator resolution or finalization that the
//!   journal does not hold; or a step the journal holds as completed with no effect in the
//!   ledger.
//! - **unexpected**: a ledger effect whose key no step row has (or a different step has), or an
//!   effect of a step the journal holds as failed (planned failures have no effect). A pure or
//!   idempotent effect with no row in a cancelled execution (or one failed after a cancel was
//!   asked of it) is not one: its result was never recorded, and nothing runs it again; nor is one of an execution that does not exist, made
//!   before a run's deferred open (fencing token 0) by a process that died before the open
//!   committed (both counted as `abandoned`).
//! - **stuck**: an execution not finalized at the end, a step still in the intent state (but
//!   in a cancelled execution, where an ambiguous intent is kept for people), or a scheduler
//!   fire not finished (a completed fire whose execution is not completed is lost).
//! - **reopened**: an execution run again while it awaited an operator: after its
//!   `ambiguity_failed` event (which parks it `awaiting_operator`), a claim of it, or another
//!   ambiguity decision or failed attempt of the parked step, before the `operator_resolved`
//!   event that ends the wait. Each reopen used to write another `ambiguity_failed`. A parallel
//!   sibling already in flight in the run that parked it still settles and records its outcome
//!   (no new step starts on a halted handle), so decisions at other seqs are not reopens.
//! - **over_limit**, **wrong_end**, **bad_messages**, **after_cancel**, **early_wakes**: the
//!   runtime's rules, see [`super::runtime_checks`].
//! - **child_dups**, **patch_flips**, **fork_reruns**: the rules of children, patches and
//!   forks, see [`super::composition_checks`]. A fork's copied step rows keep the original's
//!   keys: the rules above hold the original's row to its key's effects.
//! - **stale** (not a violation): on PostgreSQL, effects of a worker the driver stopped past its
//!   lease or cut off, made after that moment, of a step that worker never acknowledged: its
//!   run had lost the execution to a peer, and a lease keeps the journal right, not an outside
//!   effect. A guarded one is excused only when its fencing token is below its execution's
//!   final epoch (a later holder's), so an outside system that checks tokens refuses it; a
//!   pure or idempotent one only when another process made an effect of the same key (the
//!   peer that ran the step for the journal) or the journal never completed the step (the lost
//!   run halted at its write). A completed step keeps at least one effect.
//!   Excused effects are left out of every rule above.
//! - **leaked locks**: lock rows still held at the end.
//! - **integrity**: `PRAGMA integrity_check` and `PRAGMA foreign_key_check`.

use std::collections::HashMap;
use std::path::Path;

use durably_db::{Connection, Dialect};

use super::BoxError;
use super::composition_checks::{self, Composition};
use super::ledger::{LEDGER_FILE, read, read_acks};
use super::runtime_checks;
use super::store;

/// Violation messages kept for the report, at most.
const VIOLATIONS_KEPT_MAX: usize = 50;

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Executions in the journal.
    pub executions: u64,
    /// Effects in the ledger.
    pub effects: u64,
    /// Effects of stopped or cut-off workers' lost runs, excused (see the module's doc).
    pub stale: u64,
    /// Re-runs the Retry policy allowed (same key, announced by the journal).
    pub retried: u64,
    /// Re-runs of pure and idempotent steps (allowed by their kind).
    pub reran: u64,
    /// Effects of pure and idempotent steps of cancelled executions whose result was never
    /// recorded (allowed: the step is repeatable and nothing will run it again).
    pub abandoned: u64,
    /// Guarded steps skipped under Skip.
    pub skipped: u64,
    /// Operator resolutions acknowledged.
    pub resolved: u64,
    /// Effects repeated where the policy promises no re-run.
    pub duplicated: u64,
    /// Acknowledged outcomes missing from the journal.
    pub lost: u64,
    /// Effects the journal does not know.
    pub unexpected: u64,
    /// Executions not finalized, and steps left in the intent state.
    pub stuck: u64,
    /// Runs of executions that awaited an operator.
    pub reopened: u64,
    /// Locks still held.
    pub leaked_locks: u64,
    /// Commits at which a limited queue had more executions running than its limit.
    pub over_limit: u64,
    /// Runtime executions that ended otherwise than their plan and the cancels explain.
    pub wrong_end: u64,
    /// Acknowledged sends the journal does not hold exactly once, as acknowledged.
    pub bad_messages: u64,
    /// Effects of executions made after their cancellation was acknowledged.
    pub after_cancel: u64,
    /// Timers that ended, or let a later step run, before their wake time.
    pub early_wakes: u64,
    /// Parent start steps with another number of children than one, or another child.
    pub child_dups: u64,
    /// Executions whose patch answer, marker step and branch disagree.
    pub patch_flips: u64,
    /// Copied steps of forks that were run again or differ from the original's.
    pub fork_reruns: u64,
    /// Child executions (not a violation).
    pub children: u64,
    /// Executions that answered `true` to the patch (not a violation).
    pub patched: u64,
    /// Executions that answered `false` to the patch (not a violation).
    pub unpatched: u64,
    /// Forks (not a violation).
    pub forks: u64,
    /// Receives that returned a message (not a violation).
    pub received: u64,
    /// Receives that timed out (not a violation).
    pub timed_out: u64,
    /// Times an execution was parked (not a violation).
    pub parked: u64,
    /// The most executions of a limited queue running at once (not a violation: it shows the
    /// limit was reached).
    pub queue_peak: u64,
    /// Runtime executions in the journal.
    pub runtime_executions: u64,
    /// Sends acknowledged.
    pub sent: u64,
    /// Cancels acknowledged as done.
    pub cancelled: u64,
    /// Whether the integrity checks passed; `None` where there are none (PostgreSQL).
    pub integrity_ok: Option<bool>,
    /// The first violations, in words.
    pub violations: Vec<String>,
}

impl Report {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.duplicated == 0
            && self.lost == 0
            && self.unexpected == 0
            && self.stuck == 0
            && self.reopened == 0
            && self.leaked_locks == 0
            && self.over_limit == 0
            && self.wrong_end == 0
            && self.bad_messages == 0
            && self.after_cancel == 0
            && self.early_wakes == 0
            && self.child_dups == 0
            && self.patch_flips == 0
            && self.fork_reruns == 0
            && self.integrity_ok != Some(false)
    }

    /// The summary line, exactly as the torture binary prints it last.
    pub fn line(&self, iterations: u64, kills: u64, seed: u64) -> String {
        format!(
            "torture: iterations={iterations} kills={kills} executions={} effects={} retried={} \
             duplicated={} lost={} unexpected={} stuck={} reopened={} leaked_locks={} \
             over_limit={} wrong_end={} bad_messages={} after_cancel={} early_wakes={} \
             child_dups={} patch_flips={} fork_reruns={} integrity={} seed={seed}",
            self.executions,
            self.effects,
            self.retried,
            self.duplicated,
            self.lost,
            self.unexpected,
            self.stuck,
            self.reopened,
            self.leaked_locks,
            self.over_limit,
            self.wrong_end,
            self.bad_messages,
            self.after_cancel,
            self.early_wakes,
            self.child_dups,
            self.patch_flips,
            self.fork_reruns,
            match self.integrity_ok {
                Some(true) => "ok",
                Some(false) => "FAIL",
                None => "n/a",
            },
        )
    }

    pub(super) fn violation(&mut self, message: String) {
        if self.violations.len() < VIOLATIONS_KEPT_MAX {
            self.violations.push(message);
        }
    }
}

#[derive(Debug)]
struct StepRow {
    execution_id: String,
    name: String,
    /// The status of its execution.
    execution_status: String,
    seq: i64,
    effect: String,
    policy: Option<String>,
    state: String,
    result: Option<String>,
    attempts: i64,
}

/// One effect in the ledger.
#[derive(Debug)]
pub(super) struct EffectRecord {
    pub(super) execution_id: String,
    pub(super) seq: String,
    effect: String,
    policy: String,
    pub(super) at_ns: u64,
    value: String,
    pid: u32,
    /// The fencing token the closure was handed; `None` for a pure step or a fire.
    token: Option<u64>,
}

impl EffectRecord {
    /// Whether a guarded step made it.
    pub(super) fn is_guarded(&self) -> bool {
        self.effect == "guarded"
    }
}

/// Checks the run in `dir`. Call it only after every process of the run has exited.
///
/// # Errors
/// The journal, the ledger or a log cannot be read.
pub fn check(dir: &Path) -> Result<Report, BoxError> {
    let conn = store::connect(dir)?;
    let mut report = Report {
        integrity_ok: integrity(&conn)?,
        ..Report::default()
    };
    let rows = load_steps(&conn)?;
    let mut effects = load_effects(dir)?;
    let acks = read_acks(dir)?;
    let completed: std::collections::HashSet<&str> = rows
        .iter()
        .filter(|(_, row)| row.state == "completed")
        .map(|(key, _)| key.as_str())
        .collect();
    report.stale = drop_stale(dir, &conn, &acks, &completed, &mut effects)?;
    let statuses = load_statuses(&conn)?;
    let composition = composition_checks::load(&conn, &effects)?;
    // A fork's copied rows share their keys with the original's, which made the effects.
    let steps: HashMap<&str, &StepRow> = rows
        .iter()
        .filter(|(_, row)| {
            !composition
                .copied
                .contains(&(row.execution_id.clone(), row.seq))
        })
        .map(|(key, row)| (key.as_str(), row))
        .collect();
    report.effects = effects.values().map(|list| list.len() as u64).sum();
    check_executions(&conn, &mut report)?;
    check_awaiting_operator(&conn, &mut report)?;
    check_fires(&conn, &mut report)?;
    check_steps(&steps, &effects, &statuses, &composition, &mut report);
    check_acks(&acks, &statuses, &rows, &effects, &mut report)?;
    runtime_checks::check(&conn, &acks, &effects, &composition, &mut report)?;
    composition_checks::check(&conn, &composition, &acks, &effects, &mut report)?;
    Ok(report)
}

/// SQLite's integrity checks; `None` on PostgreSQL, whose server keeps its own.
fn integrity(conn: &Connection) -> Result<Option<bool>, BoxError> {
    if conn.dialect() == Dialect::Postgres {
        return Ok(None);
    }
    let mut statement = conn.prepare("PRAGMA integrity_check")?;
    let rows = statement
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    let foreign: i64 =
        conn.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |row| {
            row.get(0)
        })?;
    Ok(Some(rows == ["ok"] && foreign == 0))
}

/// Every step row with its key.
fn load_steps(conn: &Connection) -> Result<Vec<(String, StepRow)>, BoxError> {
    let mut statement = conn.prepare(
        "SELECT s.idempotency_key, s.execution_id, s.seq, s.effect, s.policy, s.state, s.result,
                s.attempts, e.status, s.name
         FROM steps s JOIN executions e ON e.execution_id = s.execution_id",
    )?;
    let rows = statement.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            StepRow {
                execution_id: row.get(1)?,
                seq: row.get(2)?,
                effect: row.get(3)?,
                policy: row.get(4)?,
                state: row.get(5)?,
                result: row.get(6)?,
                attempts: row.get(7)?,
                execution_status: row.get(8)?,
                name: row.get(9)?,
            },
        ))
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

/// The status [`load_statuses`] gives an execution that failed after a cancel was asked of it
/// (a step timeout's failure, which then stands): like a cancelled one, nothing runs it again.
const FAILED_AFTER_REQUEST: &str = "failed after a cancel request";

/// Every execution's status ([`FAILED_AFTER_REQUEST`] for a failed one a cancel was asked of).
fn load_statuses(conn: &Connection) -> Result<HashMap<String, String>, BoxError> {
    let mut statement = conn.prepare(&format!(
        "SELECT execution_id,
                CASE WHEN status = 'failed' AND cancel_requested_at IS NOT NULL
                     THEN '{FAILED_AFTER_REQUEST}' ELSE status END
         FROM executions"
    ))?;
    let rows = statement.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
    })?;
    Ok(rows.collect::<Result<HashMap<_, _>, _>>()?)
}

fn load_effects(dir: &Path) -> Result<HashMap<String, Vec<EffectRecord>>, BoxError> {
    let mut effects: HashMap<String, Vec<EffectRecord>> = HashMap::new();
    for record in read(&dir.join(LEDGER_FILE))? {
        let [
            kind,
            execution_id,
            seq,
            key,
            effect,
            policy,
            pid,
            at,
            value,
            token,
        ] = record.as_slice()
        else {
            return Err(format!("malformed ledger record {record:?}").into());
        };
        if kind != "E" {
            return Err(format!("unknown ledger record {record:?}").into());
        }
        effects.entry(key.clone()).or_default().push(EffectRecord {
            execution_id: execution_id.clone(),
            seq: seq.clone(),
            effect: effect.clone(),
            policy: policy.clone(),
            at_ns: at.parse()?,
            value: value.clone(),
            pid: pid.parse()?,
            token: match token.as_str() {
                "-" => None,
                token => Some(token.parse()?),
            },
        });
    }
    Ok(effects)
}

/// The file of the run directory in which the driver notes each worker it stopped or cut off:
/// `<pid> <CLOCK_MONOTONIC ns>` lines, written before the signal or the termination.
pub const INTERRUPTED_FILE: &str = "interrupted";

/// Takes the stale effects (see the module's doc) out of `effects`, and counts them.
fn drop_stale(
    dir: &Path,
    conn: &Connection,
    acks: &[Vec<String>],
    completed: &std::collections::HashSet<&str>,
    effects: &mut HashMap<String, Vec<EffectRecord>>,
) -> Result<u64, BoxError> {
    // The steps each process acknowledged: (execution, seq, pid).
    let acknowledged: std::collections::HashSet<(&str, &str, &str)> = acks
        .iter()
        .filter_map(|record| match record.as_slice() {
            [kind, id, seq, _, _, pid, _] if kind == "A" => {
                Some((id.as_str(), seq.as_str(), pid.as_str()))
            }
            _ => None,
        })
        .collect();
    let mut interrupted: HashMap<u32, u64> = HashMap::new();
    match std::fs::read_to_string(dir.join(INTERRUPTED_FILE)) {
        Ok(text) => {
            for line in text.lines() {
                let Some((pid, at)) = line.split_once(' ') else {
                    return Err(format!("malformed interruption {line:?}").into());
                };
                let at: u64 = at.parse()?;
                let first = interrupted.entry(pid.parse()?).or_insert(at);
                *first = (*first).min(at);
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(error.into()),
    }
    let mut statement = conn.prepare("SELECT resource, epoch FROM locks")?;
    let epochs: HashMap<String, i64> = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut stale = 0;
    for (key, list) in effects.iter_mut() {
        let is_stale = |effect: &EffectRecord| {
            let after_interruption = interrupted
                .get(&effect.pid)
                .is_some_and(|&at| effect.at_ns > at);
            let unacknowledged = !acknowledged.contains(&(
                effect.execution_id.as_str(),
                effect.seq.as_str(),
                effect.pid.to_string().as_str(),
            ));
            let excused = if effect.is_guarded() {
                matches!(
                    (effect.token, epochs.get(&effect.execution_id)),
                    (Some(token), Some(&epoch)) if (token as i64) < epoch
                )
            } else {
                list.iter().any(|other| other.pid != effect.pid)
                    || !completed.contains(key.as_str())
            };
            after_interruption && unacknowledged && excused
        };
        let flags: Vec<bool> = list.iter().map(is_stale).collect();
        // The last effects of a completed step are the ones its result came from, whoever
        // made them (a worker killed after its result and before its acknowledgement).
        if completed.contains(key.as_str()) && flags.iter().all(|&stale| stale) {
            continue;
        }
        let mut flag = flags.iter();
        list.retain(|_| !flag.next().copied().unwrap_or(false));
        stale += flags.iter().filter(|&&stale| stale).count() as u64;
    }
    effects.retain(|_, list| !list.is_empty());
    Ok(stale)
}

fn check_executions(conn: &Connection, report: &mut Report) -> Result<(), BoxError> {
    report.executions = conn.query_row("SELECT count(*) FROM executions", [], |row| {
        row.get::<_, i64>(0)
    })? as u64;
    let mut statement = conn.prepare(
        "SELECT execution_id, status FROM executions
         WHERE status NOT IN ('completed', 'failed', 'cancelled')",
    )?;
    let unfinished = statement
        .query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (id, status) in unfinished {
        report.stuck += 1;
        report.violation(format!("stuck: execution {id} is {status} at the end"));
    }
    let mut statement =
        conn.prepare("SELECT resource, pid, epoch FROM locks WHERE instance_id IS NOT NULL")?;
    let held = statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (resource, pid, epoch) in held {
        report.leaked_locks += 1;
        report.violation(format!(
            "leaked lock: {resource} is still held by pid {pid} at epoch {epoch}"
        ));
    }
    Ok(())
}

/// No execution runs between the `ambiguity_failed` event that parks it `awaiting_operator`
/// and the `operator_resolved` event that ends the wait (events in commit order): no claim,
/// and no decision about the parked step. Any later run replays to the parked step and decides
/// it again, so a reopen always shows there; siblings of the parked step that were in flight
/// when it parked settle in the same run, at their own seqs.
fn check_awaiting_operator(conn: &Connection, report: &mut Report) -> Result<(), BoxError> {
    let mut statement = conn.prepare(
        "SELECT execution_id, seq, kind FROM events
         WHERE execution_id IS NOT NULL
           AND (kind LIKE 'ambiguity_%'
                OR kind IN ('attempt_failed', 'operator_resolved', 'claimed'))
         ORDER BY id",
    )?;
    let events = statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Option<i64>>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut awaiting: HashMap<String, Option<i64>> = HashMap::new();
    for (id, seq, kind) in events {
        if kind == "operator_resolved" {
            awaiting.remove(&id);
            continue;
        }
        if let Some(&parked_at) = awaiting.get(&id)
            && (kind == "claimed" || seq == parked_at)
        {
            report.reopened += 1;
            report.violation(format!(
                "reopened: execution {id} ran again ({kind} at step {seq:?}) while step \
                 {parked_at:?} awaited an operator"
            ));
        }
        if kind == "ambiguity_failed" {
            awaiting.insert(id, seq);
        }
    }
    Ok(())
}

/// Every registered fire must be finished (its state follows its execution, through the
/// `fire_ledger` view), and a completed fire's execution completed.
fn check_fires(conn: &Connection, report: &mut Report) -> Result<(), BoxError> {
    let mut statement = conn.prepare(
        "SELECT job, slot, state, execution_status FROM fire_ledger
         WHERE state NOT IN ('completed', 'failed', 'skipped')
            OR (state = 'completed' AND execution_status IS DISTINCT FROM 'completed')",
    )?;
    let rows = statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (job, slot, state, status) in rows {
        if state == "completed" {
            report.lost += 1;
            report.violation(format!(
                "lost: fire {job} at {slot} is completed but its execution is {status:?}"
            ));
        } else {
            report.stuck += 1;
            report.violation(format!("stuck: fire {job} at {slot} is {state} at the end"));
        }
    }
    Ok(())
}

fn check_steps(
    steps: &HashMap<&str, &StepRow>,
    effects: &HashMap<String, Vec<EffectRecord>>,
    statuses: &HashMap<String, String>,
    composition: &Composition,
    report: &mut Report,
) {
    for (key, list) in effects {
        let Some(row) = steps.get(key.as_str()) else {
            if abandoned(list, statuses) || composition.superseded.contains(key) {
                report.abandoned += list.len() as u64;
                continue;
            }
            report.unexpected += list.len() as u64;
            report.violation(format!(
                "unexpected: {} effect(s) with key {key} (execution {} step {}) have no step row",
                list.len(),
                list[0].execution_id,
                list[0].seq
            ));
            continue;
        };
        for effect in list {
            if effect.is_guarded() && effect.token == Some(0) {
                report.duplicated += 1;
                report.violation(format!(
                    "duplicated: guarded effect {key} (step {} of {}) was made by a run that \
                     held no lock (fencing token 0)",
                    effect.seq, effect.execution_id
                ));
            }
            let policy = row.policy.as_deref().unwrap_or("-");
            if effect.execution_id != row.execution_id
                || effect.seq != row.seq.to_string()
                || effect.effect != row.effect
                || effect.policy != policy
            {
                report.unexpected += 1;
                report.violation(format!(
                    "unexpected: effect {key} was made as {} step {} of {}, but the journal has \
                     it as {} step {} of {}",
                    effect.effect,
                    effect.seq,
                    effect.execution_id,
                    row.effect,
                    row.seq,
                    row.execution_id
                ));
            }
        }
        count_repeats(key, row, list.len() as u64, report);
    }
    for (key, row) in steps {
        // The runtime's own steps (timers, receives, sends, events) make no effect.
        if row.name.starts_with("durably:") {
            continue;
        }
        let count = effects.get(*key).map_or(0, Vec::len);
        check_state(key, row, count, effects.get(*key), report);
    }
}

/// Whether the effects of one key, which no step row holds, belong to a step whose result
/// nothing will ever record, which its kind allows: pure or idempotent effects of a cancelled
/// execution, or of a run that died before its deferred open wrote the execution (its
/// closures ran with fencing token 0, or none for a pure step). (Old-branch effects of a patch
/// point that the execution left for the new branch are too; see
/// [`super::composition_checks`].)
fn abandoned(list: &[EffectRecord], statuses: &HashMap<String, String>) -> bool {
    let repeatable = list.iter().all(|effect| !effect.is_guarded());
    match statuses.get(&list[0].execution_id).map(String::as_str) {
        Some("cancelled" | FAILED_AFTER_REQUEST) => repeatable,
        None => repeatable && list.iter().all(|effect| effect.token.unwrap_or(0) == 0),
        Some(_) => false,
    }
}

/// Counts the repeats of one key against what its kind and policy allow.
fn count_repeats(key: &str, row: &StepRow, count: u64, report: &mut Report) {
    let extra = count.saturating_sub(1);
    match (row.effect.as_str(), row.policy.as_deref()) {
        ("pure" | "idempotent", _) => report.reran += extra,
        ("guarded", Some("retry")) => {
            let attempts = row.attempts.max(0) as u64;
            report.retried += extra.min(attempts.saturating_sub(1));
            if count > attempts {
                report.duplicated += count - attempts;
                report.violation(format!(
                    "duplicated: retry step {} of {} ({key}) ran {count} times but the journal \
                     recorded {attempts} attempts",
                    row.seq, row.execution_id
                ));
            }
        }
        (_, policy) => {
            if extra > 0 {
                report.duplicated += extra;
                report.violation(format!(
                    "duplicated: {} step {} of {} ({key}, policy {policy:?}) ran {count} times",
                    row.effect, row.seq, row.execution_id
                ));
            }
        }
    }
}

/// Checks a step row's final state against its effects.
fn check_state(
    key: &str,
    row: &StepRow,
    count: usize,
    list: Option<&Vec<EffectRecord>>,
    report: &mut Report,
) {
    let place = format!("step {} of {} ({key})", row.seq, row.execution_id);
    match row.state.as_str() {
        "completed" => {
            let Some(first) = list.and_then(|list| list.first()) else {
                report.lost += 1;
                report.violation(format!("lost: {place} is completed but no effect happened"));
                return;
            };
            let expected = serde_json::Value::String(first.value.clone()).to_string();
            if row.result.as_deref() != Some(expected.as_str()) {
                report.lost += 1;
                report.violation(format!(
                    "lost: {place} holds {:?} but its effect returned {expected}",
                    row.result
                ));
            }
        }
        "skipped" => report.skipped += 1,
        "failed" if count > 0 => {
            report.unexpected += count as u64;
            report.violation(format!(
                "unexpected: {place} failed but has {count} effect(s)"
            ));
        }
        "failed" => {}
        // A cancel keeps an ambiguous intent for people to see; nothing runs it any more.
        "intent" if row.execution_status == "cancelled" => {}
        state => {
            report.stuck += 1;
            report.violation(format!("stuck: {place} is left in state {state}"));
        }
    }
}

fn check_acks(
    acks: &[Vec<String>],
    statuses: &HashMap<String, String>,
    steps: &[(String, StepRow)],
    effects: &HashMap<String, Vec<EffectRecord>>,
    report: &mut Report,
) -> Result<(), BoxError> {
    let by_place: HashMap<(String, String), (&String, &StepRow)> = steps
        .iter()
        .map(|(key, row)| ((row.execution_id.clone(), row.seq.to_string()), (key, row)))
        .collect();
    for record in acks {
        let fields: Vec<&str> = record.iter().map(String::as_str).collect();
        match fields.as_slice() {
            ["A", id, seq, outcome, value, _pid, at] => {
                let expected = match *outcome {
                    "done" => "completed",
                    "skipped" => "skipped",
                    _ => "failed",
                };
                let at: u64 = at.parse()?;
                check_acked_step(&by_place, effects, (id, seq), expected, value, at, report);
            }
            ["R", id, seq, "completed", value, _pid, at] => {
                report.resolved += 1;
                let at: u64 = at.parse()?;
                check_acked_step(
                    &by_place,
                    effects,
                    (id, seq),
                    "completed",
                    value,
                    at,
                    report,
                );
            }
            ["R", ..] => report.resolved += 1,
            ["F", id, status, _pid, _at] => {
                let held = match statuses.get(*id).map(String::as_str) {
                    Some(FAILED_AFTER_REQUEST) => Some("failed"),
                    held => held,
                };
                if held != Some(*status) {
                    report.lost += 1;
                    report.violation(format!(
                        "lost: execution {id} was acknowledged {status} but is {:?}",
                        statuses.get(*id)
                    ));
                }
            }
            // The runtime roles' records, checked by `runtime_checks`.
            ["S" | "c" | "C" | "D" | "M" | "T" | "O" | "P", ..] => {}
            _ => return Err(format!("malformed acknowledgement {record:?}").into()),
        }
    }
    Ok(())
}

fn check_acked_step(
    by_place: &HashMap<(String, String), (&String, &StepRow)>,
    effects: &HashMap<String, Vec<EffectRecord>>,
    (id, seq): (&str, &str),
    expected_state: &str,
    value: &str,
    acked_at_ns: u64,
    report: &mut Report,
) {
    let Some((key, row)) = by_place.get(&(id.to_owned(), seq.to_owned())) else {
        report.lost += 1;
        report.violation(format!("lost: acknowledged step {seq} of {id} has no row"));
        return;
    };
    let result_ok = expected_state != "completed"
        || row.result.as_deref()
            == Some(
                serde_json::Value::String(value.to_owned())
                    .to_string()
                    .as_str(),
            );
    if row.state != expected_state || !result_ok {
        report.lost += 1;
        report.violation(format!(
            "lost: step {seq} of {id} was acknowledged {expected_state} {value:?} but the \
             journal has it {} {:?}",
            row.state, row.result
        ));
    }
    let later = effects.get(*key).map_or(0, |list| {
        list.iter()
            .filter(|effect| effect.at_ns > acked_at_ns)
            .count()
    });
    if later > 0 {
        report.duplicated += later as u64;
        report.violation(format!(
            "duplicated: step {seq} of {id} ran {later} time(s) after it was acknowledged"
        ));
    }
}
