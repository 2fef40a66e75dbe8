//! `replay`: an execution with 10,000 committed steps is reopened and every step replayed. The
//! steps are written in one transaction through `Journal::write` (the rows the step protocol
//! writes, byte for byte), so building the fixture costs one commit instead of 10,000.
//!
//! The rate is replayed steps per second of replaying: from the first step call to the return
//! of the last, which is what replay costs a resumed program. The reopen is timed apart and
//! reported in a note (with the rate it gives when counted in): it is one lock commit, whose
//! fsync costs what the disk says, plus the read of the first window of recorded steps (the
//! later windows are read as replay reaches them, so they are counted in the rate).

use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use durably::db::params;
use durably::{IdempotencyKey, Journal};
use uuid::Uuid;

use crate::args::EffectArg;
use crate::context::Context;
use crate::error::{BenchError, Result};
use crate::report::Outcome;
use crate::scenarios::{STEP_NAME, open_running, step};
use crate::stats::Samples;

/// A fixed, valid journal timestamp for the fixture rows.
const FIXTURE_AT: &str = "2026-01-01T00:00:00.000Z";

/// Builds the fixture, then reopens and replays it several times.
pub async fn run(context: &Context, dir: &Path) -> Result<Outcome> {
    let journal = context.journal(&dir.join("journal.db"))?;
    let id = context.new_id();
    let steps = context.replay_steps;
    let execution = open_running(&journal, id).await?;
    write_committed_steps(&journal, id, 0..steps).await?;
    drop(execution);
    let rounds = if context.quick { 3 } else { 10 };
    let mut latencies = Samples::with_capacity(rounds * steps as usize);
    let mut opens = Samples::with_capacity(rounds);
    let (mut replaying, mut opening) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        let began = Instant::now();
        let mut execution = open_running(&journal, id).await?;
        let opened = Instant::now();
        opens.record(opened - began);
        for _ in 0..steps {
            let step_began = Instant::now();
            step(&mut execution, EffectArg::Idempotent).await?;
            latencies.record(step_began.elapsed());
        }
        replaying += opened.elapsed();
        opening += opened - began;
        if !execution.is_resume() || execution.next_seq() != steps {
            return Err(BenchError::Unexpected(
                "the replayed execution did not resume at its last step".to_owned(),
            ));
        }
        // Dropped without finalizing, so the next round can reopen and replay it again.
        drop(execution);
    }
    let ops = u64::from(steps) * rounds as u64;
    let with_opens = ops as f64 / (replaying + opening).as_secs_f64();
    let notes = vec![
        format!(
            "{steps} steps x {rounds} rounds; ops/s is steps per second from the first step call \
             to the last ({:.1} ms a round), the reopen excluded",
            replaying.as_secs_f64() * 1000.0 / rounds as f64
        ),
        format!(
            "the reopen (lock commit with its fsync, and reading the first replay window): p50 \
             {:.0} µs, \
             max {:.0} µs; counting it in: {with_opens:.0} steps/s",
            opens.quantile_us(0.5),
            opens.max_us()
        ),
    ];
    Ok(Outcome {
        ops,
        elapsed: replaying,
        latencies,
        notes,
        peak_rss_kib_elsewhere: None,
    })
}

/// Writes completed idempotent steps `seqs` of execution `id` in one transaction.
pub async fn write_committed_steps(journal: &Journal, id: Uuid, seqs: Range<u32>) -> Result<()> {
    journal
        .write(move |conn| {
            let resource = id.to_string();
            let mut insert = conn.prepare_cached(
                "INSERT INTO steps (execution_id, seq, name, effect, state, idempotency_key,
                                    result, attempts, result_at)
                 VALUES (?1, ?2, ?3, 'idempotent', 'completed', ?4, '1', 1, ?5)",
            )?;
            for seq in seqs {
                let key = IdempotencyKey::derive(id, seq, STEP_NAME).to_string();
                insert.execute(params![resource, seq, STEP_NAME, key, FIXTURE_AT])?;
            }
            Ok(())
        })
        .await?;
    Ok(())
}
