//! The storage ceiling of a step scenario: raw SQLite writing the rows the journal writes for
//! the same steps, into the journal's own tables, in transactions of the same shape, with no
//! engine in between. For `concurrent`, a transaction holds one request of each of C
//! executions (half of them intents, half results); for the `seq` scenarios, one request of
//! one execution. No engine can step faster than this on this disk with this layout, so it
//! tells the engine's own cost (how far below the ceiling it runs) apart from the storage's
//! (how far the ceiling is below the one-row baseline times the scenario's limit).

use std::path::Path;
use std::time::{Duration, Instant};

use durably::sqlite::rusqlite::{Connection, params};
use durably::{Durability, Journal};
use uuid::Uuid;

use crate::args::EffectArg;
use crate::baseline::open_like_journal;
use crate::error::{BenchError, Result};

/// What the ceiling measurement found.
#[derive(Debug, Clone, Copy)]
pub struct Ceiling {
    /// Guarded steps completed per second.
    pub steps_per_s: f64,
    /// Transactions committed per second.
    pub commits_per_s: f64,
}

/// Writes transactions of `ids.len()` requests, one per execution, for steps of `effect`, for
/// `duration`, into a new journal file at `path`.
///
/// # Errors
/// A storage error, or [`BenchError::Unexpected`] for a pure step (the scenarios measured here
/// write guarded and idempotent ones).
pub fn measure(
    path: &Path,
    durability: Durability,
    ids: &[Uuid],
    effect: EffectArg,
    duration: Duration,
) -> Result<Ceiling> {
    let guarded = match effect {
        EffectArg::Guarded => true,
        EffectArg::Idempotent => false,
        EffectArg::Pure => {
            return Err(BenchError::Unexpected(
                "no storage ceiling is measured for pure steps".to_owned(),
            ));
        }
    };
    // The journal makes the file with its schema; the batches then go in through a raw
    // connection with the journal's pragmas.
    drop(Journal::builder(path).durability(durability).open()?);
    let conn = open_like_journal(path, durability)?;
    let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    let now = "2026-01-01T00:00:00.000Z";
    conn.execute_batch("BEGIN IMMEDIATE")?;
    for id in &ids {
        conn.execute(
            "INSERT INTO executions (execution_id, kind, name, status, input, created_at,
                                     updated_at)
             VALUES (?1, 'bench', 'ceiling', 'running', '0', ?2, ?2)",
            params![id, now],
        )?;
    }
    conn.execute_batch("COMMIT")?;
    let mut executions: Vec<Execution<'_>> = ids
        .iter()
        .enumerate()
        .map(|(index, id)| Execution {
            id,
            seq: 0,
            // Half start with an intent, half with a result (of a step written just below), so
            // every batch holds both, as the writer's do.
            intent_next: guarded && index % 2 == 0,
            guarded,
        })
        .collect();
    conn.execute_batch("BEGIN IMMEDIATE")?;
    for execution in executions
        .iter_mut()
        .filter(|e| e.guarded && !e.intent_next)
    {
        execution.write_intent(&conn, now)?;
    }
    conn.execute_batch("COMMIT")?;

    let (mut steps, mut commits) = (0_u64, 0_u64);
    let start = Instant::now();
    while start.elapsed() < duration {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        for execution in &mut executions {
            if !execution.guarded {
                execution.write_completed(&conn, now)?;
                steps += 1;
            } else if execution.intent_next {
                execution.write_intent(&conn, now)?;
            } else {
                execution.write_result(&conn, now)?;
                steps += 1;
            }
        }
        conn.prepare_cached("COMMIT")?.execute([])?;
        commits += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(Ceiling {
        steps_per_s: steps as f64 / elapsed,
        commits_per_s: commits as f64 / elapsed,
    })
}

/// One execution's place in its run of guarded steps.
struct Execution<'a> {
    id: &'a str,
    seq: u32,
    intent_next: bool,
    guarded: bool,
}

impl Execution<'_> {
    /// The row the journal writes for a guarded step's intent.
    fn write_intent(&mut self, conn: &Connection, now: &str) -> Result<()> {
        conn.prepare_cached(
            "INSERT INTO steps (execution_id, seq, name, effect, policy, state,
                                idempotency_key, attempts, intent_at)
             VALUES (?1, ?2, 'step', 'guarded', 'fail', 'intent', ?3, 1, ?4)",
        )?
        .execute(params![self.id, self.seq, Uuid::new_v4().to_string(), now])?;
        self.intent_next = false;
        Ok(())
    }

    /// The one row the journal writes for an idempotent step.
    fn write_completed(&mut self, conn: &Connection, now: &str) -> Result<()> {
        conn.prepare_cached(
            "INSERT INTO steps (execution_id, seq, name, effect, state, idempotency_key,
                                result, error, attempts, result_at)
             VALUES (?1, ?2, 'step', 'idempotent', 'completed', ?3, '1', NULL, 1, ?4)",
        )?
        .execute(params![self.id, self.seq, Uuid::new_v4().to_string(), now])?;
        self.seq += 1;
        Ok(())
    }

    /// The update the journal makes for a guarded step's result.
    fn write_result(&mut self, conn: &Connection, now: &str) -> Result<()> {
        conn.prepare_cached(
            "UPDATE steps SET state = 'completed', result = '1', error = NULL, attempts = 1,
                              result_at = ?3
             WHERE execution_id = ?1 AND seq = ?2 AND state = 'intent'",
        )?
        .execute(params![self.id, self.seq, now])?;
        self.seq += 1;
        self.intent_next = true;
        Ok(())
    }
}
