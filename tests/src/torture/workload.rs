//! Driving planned executions through the engine, with every effect appended to the ledger and
//! every acknowledged outcome appended to this process's acknowledgement log.
//!
//! The harness also plays the operator for `Policy::Fail`: it checks the ledger and resolves the
//! step `completed` (with the value the ledger shows) or `not-done`. Operators serialize on a
//! `flock`ed file and read the ledger only while holding it, so two operators can never both
//! see "not done" for one step and let it run twice.

use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use durably_journal::{
    Error, Execution, FencingToken, Guarded, IdempotencyKey, Journal, Opened, Policy, Resolution,
    StepError, StepKey,
};
use serde_json::json;
use uuid::Uuid;

use super::BoxError;
use super::ledger::{LEDGER_FILE, RecordFile, monotonic_ns};
use super::plan::{
    EXECUTION_KIND, ExecutionPlan, PlanInput, PolicyKind, RuntimeStep, SLOW_HANG_MS, StepKind,
    effect_value,
};

/// How many times one drive reopens an execution after resolving an ambiguous step.
const DRIVE_ROUNDS_MAX: u32 = 16;
/// How long an operator waits for another operator's `flock` before giving up for now.
const OPERATOR_WAIT_MS_MAX: u64 = 30_000;
/// The database file inside a run directory.
pub const DATABASE_FILE: &str = "journal.db";

/// What driving an execution came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriveOutcome {
    /// It had already finished (or was cancelled) before this drive.
    AlreadyFinished,
    /// This drive completed it.
    Completed,
    /// This drive failed it (a planned fatal step).
    Failed,
    /// Someone else holds it, or the database was busy: try again later.
    Busy,
    /// The plan asked to stop early and keep the lock (the orphan maker).
    Held,
}

/// How far a drive goes: to the end, or up to a step and then stop holding the lock, possibly
/// aborting the process inside that step's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stop {
    /// Stop before this step (keep the handle, do not finalize).
    pub before_step: Option<usize>,
    /// Abort the process inside that step's closure: `Some(true)` after its effect,
    /// `Some(false)` before it.
    pub abort_after_effect: Option<bool>,
}

enum Steps {
    Finished(DriveOutcome),
    Ambiguous { seq: u32, key: IdempotencyKey },
    Held(Execution),
}

/// One process's view of a run: its journal, the shared ledger and its own acknowledgement log.
#[derive(Debug)]
pub struct Workload {
    journal: Journal,
    dir: PathBuf,
    ledger: Arc<RecordFile>,
    acks: RecordFile,
    /// The keys whose closure this process has already called once: a flaky step refuses its
    /// first attempt here, a slow one hangs in it.
    first_attempts: Arc<Mutex<HashSet<IdempotencyKey>>>,
    held: Mutex<Vec<Execution>>,
}

impl Workload {
    /// The workload of the run in `dir`, on `journal`.
    ///
    /// # Errors
    /// The ledger or the acknowledgement log cannot be opened.
    pub fn new(journal: Journal, dir: &Path) -> std::io::Result<Self> {
        Ok(Self {
            journal,
            dir: dir.to_owned(),
            ledger: Arc::new(RecordFile::open(&dir.join(LEDGER_FILE))?),
            acks: RecordFile::own_acks(dir)?,
            first_attempts: Arc::default(),
            held: Mutex::default(),
        })
    }

    /// The journal.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The shared ledger.
    pub fn ledger(&self) -> &Arc<RecordFile> {
        &self.ledger
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Drives `plan` to its end (or to `stop`), resolving `Fail` ambiguities as the operator.
    ///
    /// # Errors
    /// An engine error the workload never expects (`LockLost`, `NonDeterminism`,
    /// `Inconsistent`, ...), or a ledger I/O error.
    pub async fn drive(&self, plan: &ExecutionPlan, stop: Stop) -> Result<DriveOutcome, BoxError> {
        for _ in 0..DRIVE_ROUNDS_MAX {
            let opened = self
                .journal
                .open_execution(plan.id, EXECUTION_KIND, &plan.name(), &plan.input)
                .await;
            let execution = match opened {
                Ok(Opened::Running(execution)) => execution,
                Ok(Opened::Finished(_)) | Err(Error::Cancelled(_)) => {
                    return Ok(DriveOutcome::AlreadyFinished);
                }
                // An earlier drive left a step to the operator, and no open reopens it until
                // the operator answers.
                Err(Error::AwaitingOperator { seq, .. }) => {
                    let name = &plan.steps[seq as usize].name;
                    if !self
                        .operate(plan.id, seq, IdempotencyKey::derive(plan.id, seq, name))
                        .await?
                    {
                        return Ok(DriveOutcome::Busy);
                    }
                    continue;
                }
                Err(error) if error.is_retryable() => return Ok(DriveOutcome::Busy),
                Err(error) => return Err(error.into()),
            };
            match self.run_steps(execution, plan, stop).await? {
                Steps::Finished(outcome) => return Ok(outcome),
                Steps::Held(execution) => {
                    self.held
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(execution);
                    return Ok(DriveOutcome::Held);
                }
                Steps::Ambiguous { seq, key } => {
                    if !self.operate(plan.id, seq, key).await? {
                        return Ok(DriveOutcome::Busy);
                    }
                }
            }
        }
        Ok(DriveOutcome::Busy)
    }

    async fn run_steps(
        &self,
        execution: Execution,
        plan: &ExecutionPlan,
        stop: Stop,
    ) -> Result<Steps, BoxError> {
        for (seq, step) in plan.steps.iter().enumerate() {
            let abort = if stop.before_step == Some(seq) {
                match stop.abort_after_effect {
                    None => return Ok(Steps::Held(execution)),
                    Some(after) => Some(after),
                }
            } else {
                None
            };
            let effect = self.effect(plan, seq, abort);
            let result = match step.kind {
                StepKind::Pure => execution
                    .pure(&step.name, || effect.clone().run_pure())
                    .await
                    .map(Guarded::Done),
                StepKind::Idempotent { .. } | StepKind::Fatal => execution
                    .idempotent(&step.name, |key| effect.clone().run_keyed(key))
                    .await
                    .map(Guarded::Done),
                StepKind::Guarded(policy) => {
                    execution
                        .guarded(&step.name, self.policy(policy), |key| {
                            effect.clone().run_keyed(key)
                        })
                        .await
                }
                StepKind::Runtime(_) => {
                    return Err(format!("{} is a runtime plan, not driven by hand", plan.id).into());
                }
            };
            let ack = |fields: &[&str]| {
                self.ack(&[&["A", &plan.id.to_string(), &seq.to_string()], fields].concat())
            };
            match result {
                Ok(Guarded::Done(value)) => {
                    if value != effect.value {
                        return Err(format!(
                            "step {seq} of {} returned {value:?}, not {:?}",
                            plan.id, effect.value
                        )
                        .into());
                    }
                    ack(&["done", &value])?;
                }
                Ok(Guarded::Skipped(_)) => ack(&["skipped", "-"])?,
                Err(Error::StepFailed { .. }) if step.kind == StepKind::Fatal => {
                    ack(&["failed", "-"])?;
                    return self
                        .finalize(execution, plan, false)
                        .await
                        .map(Steps::Finished);
                }
                Err(Error::Ambiguous { seq, .. }) => {
                    drop(execution);
                    return Ok(Steps::Ambiguous {
                        seq,
                        key: IdempotencyKey::derive(plan.id, seq, &step.name),
                    });
                }
                Err(error) if error.is_retryable() => {
                    return Ok(Steps::Finished(DriveOutcome::Busy));
                }
                Err(error) => return Err(error.into()),
            }
        }
        self.finalize(execution, plan, true)
            .await
            .map(Steps::Finished)
    }

    async fn finalize(
        &self,
        execution: Execution,
        plan: &ExecutionPlan,
        completed: bool,
    ) -> Result<DriveOutcome, BoxError> {
        let result = if completed {
            execution
                .complete(&json!({ "steps": plan.steps.len() }))
                .await
        } else {
            execution.fail(&json!({ "planned": "fatal step" })).await
        };
        match result {
            Ok(()) => {
                let status = if completed { "completed" } else { "failed" };
                self.ack(&["F", &plan.id.to_string(), status])?;
                Ok(if completed {
                    DriveOutcome::Completed
                } else {
                    DriveOutcome::Failed
                })
            }
            Err(error) if error.is_retryable() => Ok(DriveOutcome::Busy),
            Err(error) => Err(error.into()),
        }
    }

    /// The closure of step `seq` of `plan`, aborting the process inside it as `abort` says
    /// (see [`Stop::abort_after_effect`]).
    pub(super) fn effect(&self, plan: &ExecutionPlan, seq: usize, abort: Option<bool>) -> Effect {
        // The journal numbers its steps, and a runtime step may record several.
        self.effect_at(plan, seq, plan.journal_seqs()[seq], abort)
    }

    /// As [`Workload::effect`], for a step at journal seq `journal_seq` (a patch point
    /// answered `true` shifts the steps after it).
    pub(super) fn effect_at(
        &self,
        plan: &ExecutionPlan,
        seq: usize,
        journal_seq: u32,
        abort: Option<bool>,
    ) -> Effect {
        let step = &plan.steps[seq];
        let (effect, policy) = match step.kind {
            StepKind::Idempotent { .. }
            | StepKind::Fatal
            | StepKind::Runtime(RuntimeStep::Slow { policy: None }) => ("idempotent", "-"),
            StepKind::Guarded(policy)
            | StepKind::Runtime(RuntimeStep::Slow {
                policy: Some(policy),
            }) => ("guarded", policy.as_str()),
            StepKind::Pure | StepKind::Runtime(_) => ("pure", "-"),
        };
        let hang_ms = match step.kind {
            StepKind::Runtime(RuntimeStep::Slow { .. }) => SLOW_HANG_MS,
            _ => 0,
        };
        Effect {
            hang_ms,
            fatal: step.kind == StepKind::Fatal,
            flaky: matches!(step.kind, StepKind::Idempotent { flaky: true }),
            abort,
            ..self.inner_effect(
                plan,
                seq,
                (journal_seq, &step.name),
                (effect, policy),
                effect_value(plan.input.index, seq),
            )
        }
    }

    /// The closure of a step that plan step `seq` runs inside it (a member of parallel steps,
    /// a patch point's branch): step `name` at journal seq `journal_seq`, of `effect` kind
    /// under `policy` (`-` for none), returning `value`.
    pub(super) fn inner_effect(
        &self,
        plan: &ExecutionPlan,
        seq: usize,
        (journal_seq, name): (u32, &str),
        (effect, policy): (&'static str, &'static str),
        value: String,
    ) -> Effect {
        let step = &plan.steps[seq];
        Effect {
            ledger: Arc::clone(&self.ledger),
            execution_id: plan.id.to_string(),
            seq: journal_seq,
            key: IdempotencyKey::derive(plan.id, journal_seq, name),
            kind: effect,
            policy,
            value,
            before_ms: step.before_ms,
            after_ms: step.after_ms,
            fatal: false,
            flaky: false,
            hang_ms: 0,
            first_attempts: Arc::clone(&self.first_attempts),
            abort: None,
        }
    }

    pub(super) fn policy(&self, policy: PolicyKind) -> Policy {
        match policy {
            PolicyKind::Skip => Policy::Skip,
            PolicyKind::Retry => Policy::Retry,
            PolicyKind::Fail => Policy::Fail,
            PolicyKind::Reconcile => {
                let ledger = self.dir.join(LEDGER_FILE);
                Policy::reconcile(move |key| {
                    let found = ledger_value(&ledger, key);
                    async move {
                        found
                            .map(|value| value.map(serde_json::Value::String))
                            .map_err(|error| StepError::retryable(error.to_string()))
                    }
                })
            }
        }
    }

    /// Plays the operator for an ambiguous `Fail` step: under the operator lock, looks the key up
    /// in the ledger and resolves. `false` when the execution is busy (try later).
    pub(super) async fn operate(
        &self,
        execution_id: Uuid,
        seq: u32,
        key: IdempotencyKey,
    ) -> Result<bool, BoxError> {
        let Some(_operator) = OperatorLock::acquire(&self.dir)? else {
            return Ok(false);
        };
        // Look at the intent before the outside world, and answer only for that intent: the
        // step may be resolved by another operator and run again while this one decides
        // (a race the torture run found, when the answer was applied to the newer intent).
        let seen = match self.journal.operator().seen_intent(execution_id, seq) {
            Ok(Some(seen)) => seen,
            Ok(None) => return Ok(true),
            // A live process holds it and may be running the step: look again later.
            Err(error) if error.is_retryable() => return Ok(false),
            Err(error) => return Err(error.into()),
        };
        let found = ledger_value(&self.dir.join(LEDGER_FILE), key)?;
        let (resolution, word) = match &found {
            Some(value) => (Resolution::Completed(json!(value)), "completed"),
            None => (Resolution::NotDone, "not-done"),
        };
        match self
            .journal
            .operator()
            .resolve_seen(execution_id, seq, seen, resolution)
            .await
        {
            Ok(()) => {
                let id = execution_id.to_string();
                let value = found.as_deref().unwrap_or("-");
                self.ack(&["R", &id, &seq.to_string(), word, value])?;
                Ok(true)
            }
            // Another operator got there first; the next open sees what they decided.
            Err(Error::Refused(_) | Error::StaleSeenIntent { .. }) => Ok(true),
            Err(error) if error.is_retryable() => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    pub(super) fn ack(&self, fields: &[&str]) -> std::io::Result<()> {
        let (pid, now) = (std::process::id().to_string(), monotonic_ns().to_string());
        self.acks.append(&[fields, &[&pid, &now]].concat())
    }

    /// Every non-final torture execution driven by hand (not the runtime's), by its recorded
    /// plan input.
    ///
    /// # Errors
    /// A storage error or an input that is not a plan.
    pub fn unfinished(&self) -> Result<Vec<PlanInput>, BoxError> {
        let inputs = self.journal.read(|conn| {
            let mut statement = conn.prepare(
                "SELECT input FROM executions WHERE kind = ?1
                   AND status NOT IN ('completed', 'failed', 'cancelled') ORDER BY created_at",
            )?;
            let rows = statement.query_map([EXECUTION_KIND], |row| row.get::<_, String>(0))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        let mut unfinished = Vec::new();
        for input in inputs {
            let input: PlanInput = serde_json::from_str(&input)?;
            if !input.shape.is_runtime() {
                unfinished.push(input);
            }
        }
        Ok(unfinished)
    }

    /// Drives every unfinished execution until none is left, a bounded number of rounds.
    ///
    /// # Errors
    /// As [`Workload::drive`], or executions left unfinished after every round.
    pub async fn finish(&self, rounds_max: u32) -> Result<(), BoxError> {
        for _ in 0..rounds_max {
            let pending = self.unfinished()?;
            if pending.is_empty() {
                return Ok(());
            }
            for input in pending {
                self.drive(&ExecutionPlan::from_input(input), Stop::default())
                    .await?;
            }
        }
        let left = self.unfinished()?.len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} executions are still unfinished after {rounds_max} rounds").into())
        }
    }
}

/// One step's closure: appends the effect to the ledger and returns the planned value.
#[derive(Debug, Clone)]
pub(super) struct Effect {
    ledger: Arc<RecordFile>,
    execution_id: String,
    /// The step's journal seq.
    seq: u32,
    key: IdempotencyKey,
    kind: &'static str,
    policy: &'static str,
    value: String,
    before_ms: u64,
    after_ms: u64,
    fatal: bool,
    flaky: bool,
    /// How long the first attempt in this process waits before its effect (a slow step).
    hang_ms: u64,
    first_attempts: Arc<Mutex<HashSet<IdempotencyKey>>>,
    abort: Option<bool>,
}

impl Effect {
    /// The value the effect returns.
    pub(super) fn value(&self) -> &str {
        &self.value
    }

    /// The closure of a pure step, which is handed no key: the step's key is derived here.
    pub(super) async fn run_pure(self) -> Result<String, StepError> {
        let key = self.key;
        self.run(key, None).await
    }

    /// The closure of an idempotent or guarded step: the key and fencing token it is handed.
    pub(super) async fn run_keyed(self, key: StepKey) -> Result<String, StepError> {
        self.run(key.idempotency_key(), Some(key.fencing_token()))
            .await
    }

    /// Appends the effect under `key`, with the fencing token of the run that makes it (none
    /// for a pure step, which is handed none), and returns the planned value.
    async fn run(
        self,
        key: IdempotencyKey,
        token: Option<FencingToken>,
    ) -> Result<String, StepError> {
        if key != self.key {
            return Err(StepError::fatal(format!(
                "the engine handed key {key}, expected {}",
                self.key
            )));
        }
        if self.before_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.before_ms)).await;
        }
        if self.abort == Some(false) {
            std::process::abort();
        }
        if self.fatal {
            return Err(StepError::fatal("the remote side refused the request"));
        }
        let first_attempt = (self.flaky || self.hang_ms > 0)
            && self
                .first_attempts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key);
        if first_attempt && self.flaky {
            return Err(StepError::retryable("the remote side is busy"));
        }
        if first_attempt && self.hang_ms > 0 {
            // Longer than the step's timeout, which drops this future here: no effect.
            tokio::time::sleep(Duration::from_millis(self.hang_ms)).await;
        }
        let (pid, now) = (std::process::id().to_string(), monotonic_ns().to_string());
        let (seq, key) = (self.seq.to_string(), key.to_string());
        let token = token.map_or_else(|| "-".to_owned(), |token| token.to_string());
        self.ledger
            .append(&[
                "E",
                &self.execution_id,
                &seq,
                &key,
                self.kind,
                self.policy,
                &pid,
                &now,
                &self.value,
                &token,
            ])
            .map_err(|error| StepError::fatal(format!("ledger write failed: {error}")))?;
        if self.abort == Some(true) {
            std::process::abort();
        }
        if self.after_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.after_ms)).await;
        }
        Ok(self.value)
    }
}

/// The value the ledger shows for `key`, if its effect happened.
///
/// # Errors
/// The ledger cannot be read.
pub fn ledger_value(ledger: &Path, key: IdempotencyKey) -> std::io::Result<Option<String>> {
    let key = key.to_string();
    Ok(super::ledger::read(ledger)?
        .into_iter()
        .find(|record| {
            record.first().is_some_and(|kind| kind == "E") && record.get(3) == Some(&key)
        })
        .and_then(|record| record.get(8).cloned()))
}

/// The operators' mutual exclusion: an exclusive `flock` on `operator.lock` in the run
/// directory, released when dropped or when the process dies. Every operator action of the run
/// (resolve, resume, cancel) decides and acts under it, so no two of them act on what the other
/// is changing.
pub(super) struct OperatorLock {
    _file: File,
}

impl OperatorLock {
    /// Takes the lock, polling until a deadline; `None` when it stayed taken.
    pub(super) fn acquire(dir: &Path) -> std::io::Result<Option<Self>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("operator.lock"))?;
        let deadline = Instant::now() + Duration::from_millis(OPERATOR_WAIT_MS_MAX);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Some(Self { _file: file })),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TryLockError::WouldBlock) => return Ok(None),
                Err(TryLockError::Error(error)) => return Err(error),
            }
        }
    }
}
