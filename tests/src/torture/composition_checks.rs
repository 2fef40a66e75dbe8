//! The checker's rules for composition and change: children, patches and forks. (Parallel
//! steps need no rule of their own: each member has its own key, so the key-based accounting
//! of [`super::checker`] counts its effects duplicated or lost like any other step's.)
//!
//! - **child_dups**: each parent's start step (`durably:child/<kind>`, completed, not copied
//!   by a fork) has exactly one child row (`runtime_executions.parent_execution_id`,
//!   `parent_seq`), whose id is the one the step recorded and the one derived from the parent
//!   and the seq; no (parent, seq) has two children.
//! - **patch_flips**: for every runtime execution whose plan has a patch point at journal seq
//!   S: its recorded answer (`runtime_patches`), its marker step (`durably:patch/<id>`) and its
//!   branch agree. Answered `true`: the marker is at S (the answer's seq) and the new branch's
//!   step after it; `false`: no marker, the old branch's step at S; no answer: no marker in a
//!   completed execution. Every answer a run acknowledged (`P`) is the recorded one; the ledger
//!   holds no effect of the new branch unless the answer is `true`, and no effect of the old
//!   branch appended after a run acknowledged `true`. (Old-branch effects of a run on code
//!   without the patch whose step was never recorded, before the answer `true`, are allowed:
//!   counted as `abandoned`.)
//! - **fork_reruns**: each fork's copied steps (seq below its `fork_seq`) were not run again:
//!   the ledger holds no effect of the fork at such a seq, and each copied row is the
//!   original's row at that seq (name, state, result).
//!
//! A journal whose runtime has none of these features has none of their tables and columns,
//! and nothing to check.

use std::collections::{HashMap, HashSet};

use durably_db::{Connection, OptionalExtension, Sql};
use durably_journal::IdempotencyKey;
use uuid::Uuid;

use super::BoxError;
use super::checker::{EffectRecord, Report};
use super::plan::{ExecutionPlan, PATCH_ID, PlanInput, RuntimeStep, StepKind, patch_step_name};
use super::runtime_workflow::RUNTIME_KIND;

/// What the other rules need to know of forks and patches before they run.
#[derive(Debug, Default)]
pub(super) struct Composition {
    /// Step rows a fork copied, by (execution, seq): they share their key with the original's
    /// row and were not run by the fork.
    pub(super) copied: HashSet<(String, i64)>,
    /// Keys of old-branch patch steps that an execution left for the new branch.
    pub(super) superseded: HashSet<String>,
    forks: Vec<Fork>,
    patch_points: Vec<PatchPoint>,
}

/// A fork's link to its original.
#[derive(Debug)]
struct Fork {
    id: String,
    original: String,
    /// The original's steps below this seq were copied.
    from_seq: i64,
}

/// Where an execution's plan meets the patch.
#[derive(Debug)]
struct PatchPoint {
    id: String,
    status: String,
    /// The journal seq of the patch point: the marker's on patched code, the old step's
    /// otherwise.
    seq: i64,
    old_name: String,
    new_name: String,
    old_key: String,
    new_key: String,
}

/// The name of the marker step of [`PATCH_ID`].
fn marker_name() -> String {
    format!("durably:patch/{PATCH_ID}")
}

/// Whether `table` has `column` (a runtime with or without a feature's migration).
pub(super) fn has_column(conn: &Connection, table: &str, column: &str) -> Result<bool, BoxError> {
    Ok(conn
        .query_row(
            conn.pick(&Sql {
                sqlite: "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2",
                postgres: "SELECT 1 FROM information_schema.columns
                           WHERE table_schema = current_schema()
                             AND table_name = ?1 AND column_name = ?2",
            }),
            [table, column],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

/// Reads the forks and the patch points of the journal, with what they imply for the other
/// rules.
///
/// # Errors
/// The journal cannot be read, or an input is not a plan.
pub(super) fn load(
    conn: &Connection,
    effects: &HashMap<String, Vec<EffectRecord>>,
) -> Result<Composition, BoxError> {
    let mut composition = Composition::default();
    if has_column(conn, "runtime_executions", "forked_from")? {
        let mut statement = conn.prepare(
            "SELECT execution_id, forked_from, fork_seq FROM runtime_executions
             WHERE forked_from IS NOT NULL",
        )?;
        composition.forks = statement
            .query_map([], |row| {
                Ok(Fork {
                    id: row.get(0)?,
                    original: row.get(1)?,
                    from_seq: row.get(2)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let mut copied =
            conn.prepare("SELECT seq FROM steps WHERE execution_id = ?1 AND seq < ?2")?;
        for fork in &composition.forks {
            for seq in copied.query_map(durably_db::params![fork.id, fork.from_seq], |row| {
                row.get::<_, i64>(0)
            })? {
                composition.copied.insert((fork.id.clone(), seq?));
            }
        }
    }
    composition.patch_points = patch_points(conn)?;
    let answers = answers(conn)?;
    let mut by_execution: HashMap<&str, Vec<(&String, &EffectRecord)>> = HashMap::new();
    for (key, list) in effects {
        for record in list {
            by_execution
                .entry(record.execution_id.as_str())
                .or_default()
                .push((key, record));
        }
    }
    for point in &composition.patch_points {
        if !answers.get(&point.id).is_some_and(|(answer, _)| *answer) {
            continue;
        }
        if effects.contains_key(&point.old_key) {
            composition.superseded.insert(point.old_key.clone());
        }
        // A run of old code that crashed past the patch point made its pure and idempotent
        // effects at old seqs, one below where patched code puts the same steps; their rows
        // were never written (else the point would have answered false), and the steps ran
        // again on new code at the new seqs. A guarded effect is never superseded: its intent
        // is durable before it runs.
        for (key, record) in by_execution.get(point.id.as_str()).into_iter().flatten() {
            let past_point = record.seq.parse::<i64>().is_ok_and(|seq| seq > point.seq);
            if past_point && !record.is_guarded() {
                composition.superseded.insert((*key).clone());
            }
        }
    }
    Ok(composition)
}

/// Every runtime execution whose plan has a patch point.
fn patch_points(conn: &Connection) -> Result<Vec<PatchPoint>, BoxError> {
    let mut statement = conn.prepare(
        "SELECT e.execution_id, e.status, e.input FROM executions e
           JOIN runtime_executions r ON r.execution_id = e.execution_id
         WHERE e.kind = ?1",
    )?;
    let rows = statement
        .query_map([RUNTIME_KIND], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut points = Vec::new();
    for (id, status, input) in rows {
        let input: PlanInput = serde_json::from_str(&input)?;
        if !input.shape.is_runtime() {
            continue;
        }
        let plan = ExecutionPlan::from_input(input);
        let Some(at) = plan
            .steps
            .iter()
            .position(|step| step.kind == StepKind::Runtime(RuntimeStep::Patch))
        else {
            continue;
        };
        // Only a patch point shifts the seqs after it, and a plan has one at most.
        let seq = plan.journal_seqs()[at];
        let uuid: Uuid = id.parse()?;
        let (old_name, new_name) = (patch_step_name(at, false), patch_step_name(at, true));
        points.push(PatchPoint {
            old_key: IdempotencyKey::derive(uuid, seq, &old_name).to_string(),
            new_key: IdempotencyKey::derive(uuid, seq + 1, &new_name).to_string(),
            id,
            status,
            seq: i64::from(seq),
            old_name,
            new_name,
        });
    }
    Ok(points)
}

/// Each execution's recorded answer to [`PATCH_ID`] and its seq.
fn answers(conn: &Connection) -> Result<HashMap<String, (bool, i64)>, BoxError> {
    if !super::runtime_checks::table_exists(conn, "runtime_patches")? {
        return Ok(HashMap::new());
    }
    let mut statement =
        conn.prepare("SELECT execution_id, answer, seq FROM runtime_patches WHERE patch_id = ?1")?;
    let rows = statement.query_map([PATCH_ID], |row| {
        Ok((
            row.get::<_, String>(0)?,
            (row.get::<_, bool>(1)?, row.get(2)?),
        ))
    })?;
    Ok(rows.collect::<Result<HashMap<_, _>, _>>()?)
}

/// Runs the rules of children, patches and forks.
///
/// # Errors
/// The journal cannot be read, or a record is malformed.
pub(super) fn check(
    conn: &Connection,
    composition: &Composition,
    acks: &[Vec<String>],
    effects: &HashMap<String, Vec<EffectRecord>>,
    report: &mut Report,
) -> Result<(), BoxError> {
    check_children(conn, composition, report)?;
    check_patches(conn, composition, acks, effects, report)?;
    check_forks(conn, composition, effects, report)
}

/// Every step's name by (execution, seq).
fn step_names(conn: &Connection) -> Result<HashMap<(String, i64), String>, BoxError> {
    let mut statement = conn.prepare("SELECT execution_id, seq, name FROM steps")?;
    let rows = statement.query_map([], |row| {
        Ok((
            (row.get::<_, String>(0)?, row.get::<_, i64>(1)?),
            row.get(2)?,
        ))
    })?;
    Ok(rows.collect::<Result<HashMap<_, _>, _>>()?)
}

fn check_children(
    conn: &Connection,
    composition: &Composition,
    report: &mut Report,
) -> Result<(), BoxError> {
    if !has_column(conn, "runtime_executions", "parent_execution_id")? {
        return Ok(());
    }
    let mut statement = conn.prepare(
        "SELECT execution_id, parent_execution_id, parent_seq FROM runtime_executions
         WHERE parent_execution_id IS NOT NULL",
    )?;
    let rows = statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                (row.get::<_, String>(1)?, row.get::<_, i64>(2)?),
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    report.children = rows.len() as u64;
    let mut children: HashMap<(String, i64), Vec<String>> = HashMap::new();
    for (child, place) in rows {
        children.entry(place).or_default().push(child);
    }
    for ((parent, seq), ids) in &children {
        if ids.len() > 1 {
            report.child_dups += ids.len() as u64 - 1;
            report.violation(format!(
                "child_dups: step {seq} of {parent} has {} children: {ids:?}",
                ids.len()
            ));
        }
    }
    let mut statement = conn.prepare(
        "SELECT execution_id, seq, result ->> 'child_id' FROM steps
         WHERE name LIKE 'durably:child/%' AND state = 'completed'",
    )?;
    let starts = statement
        .query_map([], |row| {
            Ok((
                (row.get::<_, String>(0)?, row.get::<_, i64>(1)?),
                row.get::<_, Option<String>>(2)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (place, recorded) in starts {
        if composition.copied.contains(&place) {
            continue;
        }
        let derived = derived_child(&place.0, place.1)?;
        let found = children.get(&place).map(Vec::as_slice).unwrap_or_default();
        if found != [derived.clone()] || recorded.as_deref() != Some(derived.as_str()) {
            report.child_dups += 1;
            report.violation(format!(
                "child_dups: start step {} of {} recorded child {recorded:?} and derives \
                 {derived}, but its children are {found:?}",
                place.1, place.0
            ));
        }
    }
    Ok(())
}

/// The id of the child that step `seq` of execution `parent` starts.
fn derived_child(parent: &str, seq: i64) -> Result<String, BoxError> {
    let parent: Uuid = parent.parse()?;
    Ok(durably_runtime::child_execution_id(parent, u32::try_from(seq)?).to_string())
}

fn check_patches(
    conn: &Connection,
    composition: &Composition,
    acks: &[Vec<String>],
    effects: &HashMap<String, Vec<EffectRecord>>,
    report: &mut Report,
) -> Result<(), BoxError> {
    let answers = answers(conn)?;
    report.patched = answers.values().filter(|(answer, _)| *answer).count() as u64;
    report.unpatched = answers.len() as u64 - report.patched;
    let names = step_names(conn)?;
    // What runs acknowledged `patched` returned, and when they first saw `true`.
    let mut returned: HashMap<&str, Vec<bool>> = HashMap::new();
    let mut first_true: HashMap<&str, u64> = HashMap::new();
    for record in acks {
        if let [kind, id, answer, _pid, at] = record.as_slice()
            && kind == "P"
        {
            let answer = answer == "true";
            returned.entry(id).or_default().push(answer);
            if answer {
                let at: u64 = at.parse()?;
                let first = first_true.entry(id).or_insert(at);
                *first = (*first).min(at);
            }
        }
    }
    let marker = marker_name();
    for point in &composition.patch_points {
        let answer = answers.get(&point.id).copied();
        let at = |seq: i64| names.get(&(point.id.clone(), seq)).map(String::as_str);
        let markers = names
            .iter()
            .filter(|((id, _), name)| *id == point.id && **name == marker)
            .count();
        let mut flips = Vec::new();
        match answer {
            Some((true, seq)) => {
                if seq != point.seq || at(seq) != Some(marker.as_str()) || markers != 1 {
                    flips.push(format!(
                        "answered true at {seq} but its markers are not there"
                    ));
                }
                if at(point.seq + 1).is_some_and(|name| name != point.new_name) {
                    flips.push(format!("answered true but runs {:?}", at(point.seq + 1)));
                }
            }
            Some((false, seq))
                if seq != point.seq || markers != 0 || at(seq) != Some(point.old_name.as_str()) =>
            {
                flips.push(format!(
                    "answered false at {seq} but has {markers} marker(s) and runs {:?}",
                    at(point.seq)
                ));
            }
            None if markers > 0 && point.status == "completed" => {
                flips.push("has a marker but no answer".to_owned());
            }
            Some((false, _)) | None => {}
        }
        let recorded = answer.map(|(answer, _)| answer);
        for seen in returned.get(point.id.as_str()).into_iter().flatten() {
            if Some(*seen) != recorded {
                flips.push(format!(
                    "a run was told {seen}, the journal holds {recorded:?}"
                ));
            }
        }
        if recorded != Some(true) && effects.contains_key(&point.new_key) {
            flips.push("the new branch made an effect".to_owned());
        }
        if let Some(first) = first_true.get(point.id.as_str()) {
            let late = effects
                .get(&point.old_key)
                .into_iter()
                .flatten()
                .filter(|effect| effect.at_ns > *first)
                .count();
            if late > 0 {
                flips.push(format!(
                    "the old branch made {late} effect(s) after a run was told true"
                ));
            }
        }
        if !flips.is_empty() {
            report.patch_flips += 1;
            report.violation(format!(
                "patch_flips: execution {} (patch point at seq {}): {}",
                point.id,
                point.seq,
                flips.join("; ")
            ));
        }
    }
    Ok(())
}

fn check_forks(
    conn: &Connection,
    composition: &Composition,
    effects: &HashMap<String, Vec<EffectRecord>>,
    report: &mut Report,
) -> Result<(), BoxError> {
    report.forks = composition.forks.len() as u64;
    let fork_seqs: HashMap<&str, i64> = composition
        .forks
        .iter()
        .map(|fork| (fork.id.as_str(), fork.from_seq))
        .collect();
    for effect in effects.values().flatten() {
        if let Some(fork_seq) = fork_seqs.get(effect.execution_id.as_str())
            && effect.seq.parse::<i64>()? < *fork_seq
        {
            report.fork_reruns += 1;
            report.violation(format!(
                "fork_reruns: fork {} ran its copied step {} again (copied below {fork_seq})",
                effect.execution_id, effect.seq
            ));
        }
    }
    let mut statement = conn.prepare(
        "SELECT f.seq, f.name, f.state, f.result, o.name, o.state, o.result
         FROM steps f LEFT JOIN steps o ON o.execution_id = ?2 AND o.seq = f.seq
         WHERE f.execution_id = ?1 AND f.seq < ?3",
    )?;
    for fork in &composition.forks {
        let rows = statement
            .query_map(
                durably_db::params![fork.id, fork.original, fork.from_seq],
                |row| {
                    let copy: (String, String, Option<String>) =
                        (row.get(1)?, row.get(2)?, row.get(3)?);
                    let original: (Option<String>, Option<String>, Option<String>) =
                        (row.get(4)?, row.get(5)?, row.get(6)?);
                    Ok((row.get::<_, i64>(0)?, copy, original))
                },
            )?
            .collect::<Result<Vec<_>, _>>()?;
        for (seq, copy, original) in rows {
            let same = original.0.as_ref() == Some(&copy.0)
                && original.1.as_ref() == Some(&copy.1)
                && original.2 == copy.2;
            if !same {
                report.fork_reruns += 1;
                report.violation(format!(
                    "fork_reruns: copied step {seq} of fork {} is {copy:?}, but the original \
                     {} has {original:?}",
                    fork.id, fork.original
                ));
            }
        }
    }
    Ok(())
}
