//! The real side: a journal in a temporary directory, driven through the public API.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use durably_journal::{
    CancelOutcome, Durability, Error, Execution, FencingToken, GcOptions, Guarded, IdempotencyKey,
    Journal, Opened, Policy, Resolution, StepError, StepKey,
};
use durably_lock::Clock;
use serde_json::Value;
use uuid::Uuid;

use super::state::{
    CANCEL_REASON, Calls, probe_value, resolved_value, step_error, step_name, step_value,
};
use super::{EXECUTIONS, Op, Outcome, PolicySpec, StepSpec};

/// A clock the runner moves by one second before every operation.
#[derive(Debug)]
pub(super) struct ManualClock {
    start: DateTime<Utc>,
    seconds: Mutex<i64>,
}

impl ManualClock {
    pub(super) fn advance(&self) {
        *self.seconds.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        let seconds = *self.seconds.lock().unwrap_or_else(PoisonError::into_inner);
        self.start + chrono::Duration::seconds(seconds)
    }
}

pub(super) struct Real {
    pub(super) _dir: tempfile::TempDir,
    pub(super) path: std::path::PathBuf,
    pub(super) clock: Arc<ManualClock>,
    pub(super) journal: Option<Journal>,
    pub(super) handles: [Option<Execution>; EXECUTIONS],
    pub(super) closure_calls: Arc<Mutex<Calls>>,
    pub(super) probe_calls: Arc<Mutex<Calls>>,
}

pub(super) fn execution_id(e: usize) -> Uuid {
    Uuid::from_u128(0xD0_0000 + e as u128)
}

fn count(calls: &Mutex<Calls>, e: usize, seq: usize) {
    *calls
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry((e, seq))
        .or_default() += 1;
}

fn error_name(error: &Error) -> &'static str {
    match error {
        Error::Locked { .. } => "Locked",
        Error::LockLost(_) => "LockLost",
        Error::Ambiguous { .. } => "Ambiguous",
        Error::AwaitingOperator { .. } => "AwaitingOperator",
        Error::NonDeterminism { .. } => "NonDeterminism",
        Error::StepFailed { .. } => "StepFailed",
        Error::Cancelled(_) => "Cancelled",
        Error::CancelRequested { .. } => "CancelRequested",
        Error::NotFound(_) => "NotFound",
        Error::Refused(_) => "Refused",
        Error::Halted { .. } => "Halted",
        Error::Inconsistent(_) => "Inconsistent",
        _ => "Other",
    }
}

type RealResult = Result<Outcome, String>;

fn typed<T>(result: Result<T, Error>, ok: impl FnOnce(T) -> Outcome) -> RealResult {
    match result {
        Ok(value) => Ok(ok(value)),
        Err(error) => match error_name(&error) {
            "Other" => Err(format!("unexpected error: {error}")),
            name => Ok(Outcome::Error(name)),
        },
    }
}

impl Real {
    pub(super) fn new() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|error| error.to_string())?;
        let path = dir.path().join("model.db");
        let clock = Arc::new(ManualClock {
            start: Utc
                .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
                .single()
                .unwrap_or_default(),
            seconds: Mutex::new(0),
        });
        let mut real = Self {
            _dir: dir,
            path,
            clock,
            journal: None,
            handles: Default::default(),
            closure_calls: Arc::default(),
            probe_calls: Arc::default(),
        };
        real.reopen()?;
        Ok(real)
    }

    fn reopen(&mut self) -> Result<(), String> {
        let clock: Arc<dyn Clock> = self.clock.clone();
        let journal = Journal::builder(&self.path)
            .durability(Durability::ProcessCrash)
            .clock(clock)
            .open()
            .map_err(|error| format!("reopening the journal: {error}"))?;
        self.journal = Some(journal);
        Ok(())
    }

    pub(super) fn journal(&self) -> Result<&Journal, String> {
        self.journal
            .as_ref()
            .ok_or_else(|| "the journal is closed".to_owned())
    }

    /// Waits until every write queued so far (the lock releases of dropped handles) committed.
    async fn barrier(&self) -> Result<(), String> {
        self.journal()?
            .write(|_| Ok(()))
            .await
            .map_err(|error| format!("barrier write: {error}"))
    }

    fn policy(&self, e: usize, seq: usize, policy: PolicySpec) -> Policy {
        match policy {
            PolicySpec::Skip => Policy::Skip,
            PolicySpec::Retry => Policy::Retry,
            PolicySpec::Fail => Policy::Fail,
            PolicySpec::Reconcile { found } => {
                let calls = Arc::clone(&self.probe_calls);
                Policy::reconcile(move |_key| {
                    count(&calls, e, seq);
                    async move { Ok(found.then(|| probe_value(e, seq))) }
                })
            }
        }
    }

    pub(super) async fn apply(
        &mut self,
        programs: &[Vec<StepSpec>; EXECUTIONS],
        op: Op,
    ) -> RealResult {
        match op {
            Op::Open(e) => self.open(e).await,
            Op::Step(e) => self.step(e, &programs[e]).await,
            Op::CrashInStep(e) => self.crash_in_step(e, &programs[e]).await,
            Op::StepMismatch(e) => self.mismatch(e).await,
            Op::Drop(e) => match self.handles[e].take() {
                Some(handle) => {
                    drop(handle);
                    self.barrier().await?;
                    Ok(Outcome::Done)
                }
                None => Ok(Outcome::NoOp),
            },
            Op::Complete(e) => self.finalize(e, true).await,
            Op::Fail(e) => self.finalize(e, false).await,
            Op::Crash => self.crash().await,
            Op::ResolveCompleted(e) | Op::ResolveNotDone(e) => {
                self.resolve(e, matches!(op, Op::ResolveCompleted(_))).await
            }
            Op::Cancel(e) => {
                let result = self
                    .journal()?
                    .operator()
                    .cancel(execution_id(e), CANCEL_REASON)
                    .await;
                typed(result, |outcome| match outcome {
                    CancelOutcome::Requested { .. } => Outcome::Requested,
                    _ => Outcome::Done,
                })
            }
            Op::Sweep => typed(self.journal()?.operator().sweep(false).await, |_| {
                Outcome::Done
            }),
            Op::Gc {
                completed_age_s,
                failed_age_s,
            } => self.collect(completed_age_s, failed_age_s).await,
        }
    }

    async fn open(&mut self, e: usize) -> RealResult {
        let journal = self.journal()?.clone();
        let opened = journal
            .open_execution(execution_id(e), "model", &format!("model {e}"), &e)
            .await;
        typed(opened, |opened| match opened {
            Opened::Running(execution) => {
                let resumed = execution.is_resume();
                self.handles[e] = Some(execution);
                Outcome::Opened { resumed }
            }
            Opened::Finished(finished) => Outcome::Finished(finished.status.as_str().to_owned()),
        })
    }

    /// Runs the handle's next step. Called only when the model says the step applies, so the
    /// handle exists and its next seq is inside the program.
    async fn step(&mut self, e: usize, program: &[StepSpec]) -> RealResult {
        let seq = self.next_seq(e)?;
        let spec = *program
            .get(seq)
            .ok_or_else(|| format!("execution {e} has no step {seq} in its program"))?;
        let policy = spec.policy().map(|policy| self.policy(e, seq, policy));
        let calls = Arc::clone(&self.closure_calls);
        let closure = move |_key: StepKey| {
            count(&calls, e, seq);
            let fails = spec.fails();
            async move {
                if fails {
                    Err(step_error(e, seq))
                } else {
                    Ok(step_value(e, seq))
                }
            }
        };
        let execution = self.handle(e)?;
        let name = step_name(seq);
        match (spec, policy) {
            (StepSpec::Pure { .. }, _) => {
                let result = execution
                    .pure(&name, || {
                        closure(StepKey::new(IdempotencyKey(Uuid::nil()), FencingToken(0)))
                    })
                    .await;
                typed(result, Outcome::Value)
            }
            (StepSpec::Idempotent { .. }, _) => {
                typed(execution.idempotent(&name, closure).await, Outcome::Value)
            }
            (StepSpec::Guarded { .. }, Some(policy)) => {
                let result = execution.guarded(&name, policy, closure).await;
                typed(result, |guarded| match guarded {
                    Guarded::Done(value) => Outcome::Value(value),
                    Guarded::Skipped(_) => Outcome::Skipped,
                })
            }
            (StepSpec::Guarded { .. }, None) => Err("a guarded step without a policy".to_owned()),
        }
    }

    fn handle(&mut self, e: usize) -> Result<&mut Execution, String> {
        self.handles[e]
            .as_mut()
            .ok_or_else(|| format!("the model holds execution {e} but the journal does not"))
    }

    fn next_seq(&mut self, e: usize) -> Result<usize, String> {
        Ok(self.handle(e)?.next_seq() as usize)
    }

    /// Enters the next (fresh, guarded) step's closure, then drops the step and the handle:
    /// the intent is durable and no result will ever be written by this handle.
    async fn crash_in_step(&mut self, e: usize, program: &[StepSpec]) -> RealResult {
        let seq = self.next_seq(e)?;
        let Some(StepSpec::Guarded { policy, .. }) = program.get(seq).copied() else {
            return Err(format!("step {seq} of execution {e} is not guarded"));
        };
        let policy = self.policy(e, seq, policy);
        let calls = Arc::clone(&self.closure_calls);
        let entered = Arc::new(tokio::sync::Notify::new());
        let signal = Arc::clone(&entered);
        let execution = self.handles[e].take().ok_or("no handle")?;
        let name = step_name(seq);
        {
            let step = execution.guarded(&name, policy, move |_key| {
                count(&calls, e, seq);
                signal.notify_one();
                std::future::pending::<Result<Value, StepError>>()
            });
            tokio::select! {
                result = step => {
                    // Refused before its closure: the intent was not written (a pending cancel
                    // request). The handle is dropped all the same.
                    let Err(error @ Error::CancelRequested { .. }) = result else {
                        return Err(format!(
                            "a step whose closure never returns returned {result:?}"
                        ));
                    };
                    drop(execution);
                    self.barrier().await?;
                    return typed(Err::<(), _>(error), |()| Outcome::Done);
                }
                () = entered.notified() => {}
            }
        }
        drop(execution);
        self.barrier().await?;
        Ok(Outcome::Done)
    }

    async fn mismatch(&mut self, e: usize) -> RealResult {
        let result = self
            .handle(e)?
            .pure("renamed", || async { Ok::<_, StepError>(Value::Null) })
            .await;
        typed(result, Outcome::Value)
    }

    async fn finalize(&mut self, e: usize, completed: bool) -> RealResult {
        let Some(execution) = self.handles[e].take() else {
            return Ok(Outcome::NoOp);
        };
        let result = if completed {
            execution.complete(&format!("output {e}")).await
        } else {
            execution.fail(&format!("failure {e}")).await
        };
        // A refused finalize dropped the handle, whose lock release is queued, not awaited.
        self.barrier().await?;
        typed(result, |()| Outcome::Done)
    }

    async fn crash(&mut self) -> RealResult {
        self.handles = Default::default();
        self.barrier().await?;
        self.journal = None;
        self.reopen()?;
        Ok(Outcome::Done)
    }

    async fn resolve(&mut self, e: usize, completed: bool) -> RealResult {
        let journal = self.journal()?;
        let steps = journal
            .steps(execution_id(e))
            .map_err(|error| error.to_string())?;
        let seq = steps
            .iter()
            .position(|step| step.state == durably_journal::StepState::Intent)
            .or_else(|| steps.len().checked_sub(1))
            .unwrap_or(0) as u32;
        let resolution = if completed {
            Resolution::Completed(resolved_value(e))
        } else {
            Resolution::NotDone
        };
        typed(
            journal
                .operator()
                .resolve(execution_id(e), seq, resolution)
                .await,
            |()| Outcome::Done,
        )
    }

    async fn collect(&mut self, completed_age_s: u8, failed_age_s: u8) -> RealResult {
        let options = GcOptions {
            completed_older_than: Duration::from_secs(completed_age_s.into()),
            failed_older_than: Duration::from_secs(failed_age_s.into()),
            dry_run: false,
            batch_executions_max: 2,
        };
        let report = self
            .journal()?
            .operator()
            .collect_garbage(options, |_| {})
            .await;
        typed(report, |report| {
            Outcome::Collected(report.completed, report.failed)
        })
    }
}
