//! Test helper for `tests/tests/power_loss.rs`: writes the deterministic workload of
//! `durably_tests::power_loss` one commit at a time and prints `ack <index>` on stdout after each
//! commit was acknowledged.
//!
//! Usage: `power_loss_writer <database> <seed> <executions> <full|process-crash>`.
//!
//! It first opens and closes the journal once, so the schema is checkpointed into the database
//! file and the WAL is removed; then it reopens it with `wal_autocheckpoint` raised so no commit
//! of the workload leaves the WAL. It prints `ready`, the acks, then `done`, and then waits on
//! stdin until it is killed (closing the journal would checkpoint the WAL, which the test must
//! not see happen).

use std::io::{BufRead, Write};
use std::path::PathBuf;

use durably_journal::{Durability, Execution, Guarded, Journal, Opened, Policy, StepError};
use durably_tests::power_loss::{
    self, ExecutionPlan, Finish, StepPlan, step_error, step_name, step_value,
};

type Outcome<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Pages the WAL may hold before an automatic checkpoint: far more than the workload writes.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 1_000_000;

fn main() -> Outcome {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: power_loss_writer <database> <seed> <executions> <full|process-crash>";
    let (Some(database), Some(seed), Some(executions), Some(durability)) =
        (args.get(1), args.get(2), args.get(3), args.get(4))
    else {
        return Err(usage.into());
    };
    let durability = match durability.as_str() {
        "full" => Durability::Full,
        "process-crash" => Durability::ProcessCrash,
        _ => return Err(usage.into()),
    };
    let plan = power_loss::plan(seed.parse()?, executions.parse()?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(PathBuf::from(database), durability, &plan))
}

async fn run(database: PathBuf, durability: Durability, plan: &[ExecutionPlan]) -> Outcome {
    // A clean close checkpoints the schema into the database file and deletes the WAL.
    drop(Journal::builder(&database).durability(durability).open()?);
    let journal = Journal::builder(&database).durability(durability).open()?;
    let pages = journal
        .write(|conn| {
            conn.execute_batch(&format!(
                "PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}"
            ))?;
            Ok(conn.query_row("PRAGMA wal_autocheckpoint", [], |row| row.get::<_, i64>(0))?)
        })
        .await?;
    if pages != WAL_AUTOCHECKPOINT_PAGES {
        return Err(format!("wal_autocheckpoint did not take: {pages}").into());
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut acks = Acks { out, next: 0 };
    // Held until the process is killed: dropping it would release its lock (another commit).
    let mut left_open = Vec::new();
    for (index, planned) in plan.iter().enumerate() {
        if let Some(execution) = run_execution(&journal, index, planned, &mut acks).await? {
            left_open.push(execution);
        }
    }
    writeln!(acks.out, "done")?;
    acks.out.flush()?;
    // Wait to be killed; never close the journal (that would checkpoint).
    for line in std::io::stdin().lock().lines() {
        line?;
    }
    // Abort rather than return: returning would drop the journal, and closing it checkpoints.
    std::process::abort();
}

struct Acks<W: Write> {
    out: W,
    next: usize,
}

impl<W: Write> Acks<W> {
    /// Logs that the next planned commit was acknowledged.
    fn ack(&mut self) -> Outcome {
        writeln!(self.out, "ack {}", self.next)?;
        self.out.flush()?;
        self.next += 1;
        Ok(())
    }
}

async fn run_execution<W: Write>(
    journal: &Journal,
    index: usize,
    planned: &ExecutionPlan,
    acks: &mut Acks<W>,
) -> Outcome<Option<Execution>> {
    let Opened::Running(mut execution) = journal
        .open_execution(planned.id, "power-loss", "power loss", &index)
        .await?
    else {
        return Err("a new execution was already finished".into());
    };
    acks.ack()?;
    for (seq, step) in (0_u32..).zip(&planned.steps) {
        run_step(&mut execution, index, seq, *step, acks).await?;
    }
    match planned.finish {
        Finish::Complete => execution.complete(&step_value(index, u32::MAX)).await?,
        Finish::Fail => execution.fail(&step_error(index, u32::MAX)).await?,
        Finish::LeaveOpen => return Ok(Some(execution)),
    }
    acks.ack()?;
    Ok(None)
}

async fn run_step<W: Write>(
    execution: &mut Execution,
    index: usize,
    seq: u32,
    step: StepPlan,
    acks: &mut Acks<W>,
) -> Outcome {
    let name = step_name(seq);
    let value = step_value(index, seq);
    match step {
        StepPlan::Pure { fails: false } => {
            execution
                .pure(&name, || async { Ok(value.clone()) })
                .await?;
        }
        StepPlan::Pure { fails: true } => {
            let error = StepError::fatal(step_error(index, seq));
            match execution
                .pure::<String, _, _>(&name, || async { Err(error.clone()) })
                .await
            {
                Err(durably_journal::Error::StepFailed { .. }) => {}
                other => return Err(format!("a failing step returned {other:?}").into()),
            }
        }
        StepPlan::Idempotent => {
            execution
                .idempotent(&name, |_key| async { Ok(value.clone()) })
                .await?;
        }
        StepPlan::Guarded { policy } => {
            let policy = match policy {
                "skip" => Policy::Skip,
                "retry" => Policy::Retry,
                "fail" => Policy::Fail,
                _ => Policy::reconcile(|_key| async { Ok(None) }),
            };
            // The intent's commit is acknowledged before the closure runs: log it from there.
            let outcome = execution
                .guarded(&name, policy, |_key| {
                    let acked = acks.ack();
                    let value = value.clone();
                    async move {
                        acked.map_err(|error| StepError::fatal(error.to_string()))?;
                        Ok(value)
                    }
                })
                .await?;
            if !matches!(outcome, Guarded::Done(_)) {
                return Err("a fresh guarded step was skipped".into());
            }
        }
    }
    acks.ack()
}
