//! The small deterministic workload of the failpoint matrix. One run of it reaches every
//! failpoint of the engine at least once:
//!
//! 0. the journal is opened first here, so a fresh file is migrated in this process
//!    (`migration-before-commit`, inside the rebuild of migration 7);
//! 1. an orphan maker (a child process) opens three executions, runs a few steps of each and
//!    aborts, one of them inside a guarded step: three locks of a dead process;
//! 2. the journal opens, and its crash-orphan sweep reclaims them (`sweep-*` failpoints on the
//!    open path);
//! 3. a second orphan maker, then an explicit `Journal::sweep` (the `sweep-*` failpoints on the
//!    async path);
//! 4. a third orphan maker, whose executions are then opened directly: the lock is taken over
//!    from the dead holder (`lock::between-judgement-and-takeover`);
//! 5. every orphan and four covering executions (every step kind and policy) are driven to the
//!    end (`after-lock-commit`, `after-intent-commit`, `after-effect`, `after-result-commit`;
//!    a `Fail` step an orphan maker left ambiguous parks its execution for the operator,
//!    `after-awaiting-operator-commit`);
//! 6. two executions run through `Runtime::run` with write-behind and the deferred open
//!    (`after-lock-commit` at the open, `after-deferred-flush-commit`,
//!    `runtime::after-finalize-commit`; see [`super::runs`]);
//! 7. two slots of four scheduled jobs (one per policy) are fired
//!    (`scheduler::after-fire-registered`), and one job is paused and resumed
//!    (`scheduler::after-pause-commit`);
//! 8. five executions are cancelled and collected by the retention sweep in batches of two
//!    (`gc-between-batches`);
//! 9. the runtime's part (see [`super::matrix_runtime`]): a runtime orphan maker aborts inside
//!    a step, so the next runtimes' recovery requeues its execution
//!    (`runtime::after-recovery-batch`); two runtimes run covering workflows in a limited queue
//!    and without one, with timers, messages and events, and a queued execution is sent a
//!    message and cancelled.
//!
//! Rerunning it after a crash resumes everything, so "restart to completion" is running it
//! again without failpoints.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use durably_journal::{Durability, Error, GcOptions, Journal, JournalBuilder, Opened, RetryPolicy};
use uuid::Uuid;

use super::plan::{ExecutionPlan, PlanInput, SeededRng, Shape};
use super::store;
use super::workload::{Stop, Workload};
use super::{BoxError, fires, matrix_runtime, runs, worker};

/// The first index of each group of orphans.
pub const ORPHAN_GROUPS: [u64; 3] = [100, 110, 120];
/// Executions per orphan group.
pub const ORPHANS_PER_GROUP: u64 = 2;
/// Covering executions (every step kind and policy once each).
pub const COVERING_EXECUTIONS: u64 = 2;
/// Slots fired of each of the four jobs (`scheduler::after-fire-registered`).
pub const FIRE_SLOTS: u64 = 2;
/// Executions cancelled and then collected by the retention sweep.
pub const FODDER_EXECUTIONS: u64 = 5;
/// When the fodder executions are created and cancelled: 2000-01-01T00:00:00Z.
const FODDER_EPOCH_SECONDS: i64 = 946_684_800;
/// Executions the retention sweep deletes per batch.
pub const GC_BATCH: u32 = 2;
/// Rounds of the final pass that drives every unfinished execution.
pub const FINISH_ROUNDS_MAX: u32 = 16;

/// Opens the run's journal with the harness's settings: fast retries of retryable step errors
/// and a long busy timeout (several processes write at once).
///
/// # Errors
/// As [`durably_journal::JournalBuilder::open`].
pub fn open_journal(
    dir: &Path,
    durability: Durability,
    sweep_on_open: bool,
) -> Result<Journal, BoxError> {
    Ok(journal_builder(dir, durability, sweep_on_open)?.open()?)
}

fn journal_builder(
    dir: &Path,
    durability: Durability,
    sweep_on_open: bool,
) -> Result<JournalBuilder, BoxError> {
    let builder = Journal::builder(store::target(dir)?);
    // On PostgreSQL the driver stops workers for longer than this lease, so that a peer takes
    // their executions over while they still run (see `super::driver`).
    let builder = match store::Backend::of(dir) {
        store::Backend::Sqlite => builder,
        store::Backend::Postgres => builder.lease_ms(store::LEASE_MS),
    };
    Ok(builder
        .durability(durability)
        .busy_timeout_ms(20_000)
        .sweep_on_open(sweep_on_open)
        .retry(RetryPolicy {
            attempts_max: 3,
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(4),
        }))
}

fn covering(seed: u64, index: u64) -> ExecutionPlan {
    ExecutionPlan::from_input(PlanInput {
        seed,
        index,
        slot: 0,
        shape: Shape::Covering,
    })
}

/// Runs the matrix workload in this process; its orphan makers are [`super::worker`] processes.
///
/// # Errors
/// An unexpected engine error, or an orphan maker that did not abort.
pub async fn run(dir: &Path, seed: u64, durability: Durability) -> Result<(), BoxError> {
    drop(open_journal(dir, durability, false)?);
    let orphans = |first| make_orphans(dir, seed, durability, first);
    orphans(ORPHAN_GROUPS[0])?;
    let workload = Arc::new(Workload::new(open_journal(dir, durability, true)?, dir)?);
    orphans(ORPHAN_GROUPS[1])?;
    workload.journal().operator().sweep(false).await?;
    orphans(ORPHAN_GROUPS[2])?;
    for first in ORPHAN_GROUPS.into_iter().rev() {
        for index in first..first + ORPHANS_PER_GROUP {
            workload
                .drive(&covering(seed, index), Stop::default())
                .await?;
        }
    }
    for index in 0..COVERING_EXECUTIONS {
        workload
            .drive(&covering(seed, index), Stop::default())
            .await?;
    }
    let runtime = runs::runtime(workload.journal(), dir).await?;
    runs::run_all(&runtime, &workload, seed).await?;
    drop(runtime);
    let engines = fires::scheduler(&workload).await?;
    for number in 0..FIRE_SLOTS {
        for job in engines.scheduler.job_ids() {
            fires::fire_one(&workload, &engines, &job, fires::slot(number)?).await?;
        }
    }
    fires::pause_and_resume(&engines).await?;
    drop(engines);
    collect_fodder(workload.journal(), dir, durability, seed).await?;
    workload.finish(FINISH_ROUNDS_MAX).await?;
    fires::finish(&workload, FINISH_ROUNDS_MAX).await?;
    matrix_runtime::run(&workload, dir, seed, durability).await
}

/// The orphan maker: opens the executions of one group, runs some steps of each, keeps their
/// locks, and aborts, the last one inside a step (before or after its effect).
///
/// # Errors
/// An unexpected engine error; on success it does not return.
pub async fn orphans(
    dir: &Path,
    seed: u64,
    durability: Durability,
    first: u64,
) -> Result<(), BoxError> {
    let workload = Workload::new(open_journal(dir, durability, true)?, dir)?;
    for index in first..first + ORPHANS_PER_GROUP {
        let last = index + 1 == first + ORPHANS_PER_GROUP;
        let stop = Stop {
            before_step: Some(3 + ((index / 10 + index) % 4) as usize),
            abort_after_effect: last.then_some((index / 10) % 2 == 0),
        };
        workload.drive(&covering(seed, index), stop).await?;
    }
    std::process::abort();
}

fn make_orphans(dir: &Path, seed: u64, durability: Durability, first: u64) -> Result<(), BoxError> {
    let first = first.to_string();
    run_orphan_maker(dir, seed, durability, &["orphans", "--first", &first])
}

/// Runs the orphan maker `mode` in a [`super::worker`] process, which must abort.
///
/// # Errors
/// The child does not start, or ends otherwise than by aborting.
pub fn run_orphan_maker(
    dir: &Path,
    seed: u64,
    durability: Durability,
    mode: &[&str],
) -> Result<(), BoxError> {
    let status = worker::command()?
        .args(mode)
        .arg("--dir")
        .arg(dir)
        .args(["--seed", &seed.to_string()])
        .args(["--durability", durability.as_str()])
        .env_remove("FAILPOINTS")
        .stdin(Stdio::null())
        .status()?;
    if status.signal() == Some(libc::SIGABRT) {
        Ok(())
    } else {
        Err(format!("the orphan maker should abort, but it exited with {status}").into())
    }
}

/// Creates and cancels the fodder executions on a journal instance whose clock stands at
/// [`FODDER_EPOCH_SECONDS`], then has `journal` collect what was finalized before a day after
/// it: exactly the fodder, whatever else of the run (or of an earlier run of it) is cancelled.
async fn collect_fodder(
    journal: &Journal,
    dir: &Path,
    durability: Durability,
    seed: u64,
) -> Result<(), BoxError> {
    let epoch = chrono::DateTime::from_timestamp(FODDER_EPOCH_SECONDS, 0)
        .ok_or("the fodder's epoch is a time")?;
    let clock = Arc::new(durably_runtime::testing::TestClock::new(epoch));
    let fodder = journal_builder(dir, durability, false)?
        .clock(clock)
        .open()?;
    for number in 0..FODDER_EXECUTIONS {
        let mut rng = SeededRng::new(seed, 0xf0dd_e000 + number);
        let id = uuid::Builder::from_random_bytes(
            *Uuid::from_u64_pair(rng.next_u64(), rng.next_u64()).as_bytes(),
        )
        .into_uuid();
        match fodder.open_execution(id, "fodder", "fodder", &number).await {
            Ok(Opened::Running(execution)) => drop(execution),
            Ok(Opened::Finished(_)) | Err(Error::Cancelled(_)) => continue,
            Err(error) => return Err(error.into()),
        }
        match fodder
            .operator()
            .cancel(id, "fodder for the retention sweep")
            .await
        {
            Ok(_) | Err(Error::Refused(_)) => {}
            Err(error) => return Err(error.into()),
        }
    }
    let cutoff = epoch + chrono::TimeDelta::days(1);
    let options = GcOptions {
        completed_older_than: Duration::from_hours(100 * 365 * 24),
        failed_older_than: (chrono::Utc::now() - cutoff).to_std()?,
        dry_run: false,
        batch_executions_max: GC_BATCH,
    };
    journal.operator().collect_garbage(options, |_| {}).await?;
    Ok(())
}
