//! [`Execution`]: the handle that drives one execution, and the step protocol.
//!
//! Invariant: a guarded step's intent row is durable (acknowledged after COMMIT) before its
//! closure is called. Every step write checks, in its own transaction, that this handle's
//! epoch is still the lock's epoch, so a handle whose lock was taken over writes nothing.

use std::future::Future;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::Instrument;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::events;
use crate::handles::HandleClaim;
use crate::journal::Journal;
use crate::payload;
use crate::records::{Status, event_kind};
use crate::replay::RecordedStep;
pub(crate) use crate::replay::Replay;
use crate::step::{Effect, Guarded, IdempotencyKey, Policy, Skipped, StepError};
use crate::writer::Undo;

/// The handle that drives one open execution. Steps are numbered in call order; on a resumed
/// execution, steps already recorded return their recorded outcome without calling the closure.
///
/// Dropping it without [`Execution::complete`] or [`Execution::fail`] releases the lock and
/// leaves the execution `running`, to be resumed.
#[derive(Debug)]
pub struct Execution {
    journal: Journal,
    id: Uuid,
    resource: Arc<str>,
    epoch: u64,
    is_resume: bool,
    input: String,
    replay: Replay,
    next_seq: u32,
    halted_at: Option<u32>,
    finalized: bool,
    // Keeps a lease alive while the handle lives; aborted on drop.
    heartbeat: Option<tokio::task::JoinHandle<()>>,
    // Declared last so it is released after `Drop::drop` has queued the lock release.
    _claim: HandleClaim,
}

/// A step being run: its place and identity.
struct StepCall<'a> {
    execution_id: Uuid,
    seq: u32,
    name: &'a str,
    effect: Effect,
    policy: Option<&'a Policy>,
    /// Derived on first use: replaying a completed or failed step never needs it, and the
    /// derivation (a blake3 hash) was most of a replayed step's cost.
    key: std::sync::OnceLock<IdempotencyKey>,
}

impl StepCall<'_> {
    /// The step's idempotency key, the same on every run.
    fn key(&self) -> IdempotencyKey {
        *self
            .key
            .get_or_init(|| IdempotencyKey::derive(self.execution_id, self.seq, self.name))
    }
}

type StepOutcome<T> = std::result::Result<T, StepError>;

/// The caller's writes that go into a guarded step's intent transaction.
type IntentHook = Box<dyn FnOnce(&Connection) -> Result<()> + Send>;

/// How many times a step's result write is tried when the database is busy. The effect has
/// already run, so giving up early would leave an ambiguous step for no good reason.
const RESULT_WRITE_TRIES_MAX: u32 = 3;

/// A step's outcome, ready to be written.
#[derive(Debug, Clone)]
struct ResultRow {
    seq: u32,
    name: String,
    effect: Effect,
    key: String,
    state: &'static str,
    result: Option<String>,
    error: Option<String>,
    attempts: u32,
}

impl ResultRow {
    /// A guarded step's intent row gets its result; other steps get their one row. One
    /// statement either way, so it may run without a savepoint ([`Undo::OneStatement`]).
    fn record(&self, conn: &Connection, resource: &str, now: &str) -> Result<()> {
        let Self {
            seq,
            name,
            effect,
            key,
            state,
            result,
            error,
            attempts,
        } = self;
        if *effect == Effect::Guarded {
            let changed = conn
                .prepare_cached(
                    "UPDATE steps SET state = ?3, result = ?4, error = ?5, attempts = ?6,
                                      result_at = ?7
                     WHERE execution_id = ?1 AND seq = ?2 AND state = 'intent'",
                )?
                .execute(params![resource, seq, state, result, error, attempts, now])?;
            return expect_one_row(changed, resource, *seq);
        }
        conn.prepare_cached(
            "INSERT INTO steps (execution_id, seq, name, effect, state, idempotency_key,
                                result, error, attempts, result_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            resource,
            seq,
            name,
            effect.as_str(),
            state,
            key,
            result,
            error,
            attempts,
            now
        ])?;
        Ok(())
    }
}

impl Execution {
    pub(crate) fn new(
        journal: Journal,
        id: Uuid,
        epoch: u64,
        is_resume: bool,
        input: String,
        replay: Replay,
        claim: HandleClaim,
    ) -> Self {
        let resource: Arc<str> = Arc::from(id.to_string());
        let heartbeat = spawn_heartbeat(&journal, &resource, epoch);
        Self {
            journal,
            id,
            resource,
            epoch,
            is_resume,
            input,
            replay,
            next_seq: 0,
            halted_at: None,
            finalized: false,
            heartbeat,
            _claim: claim,
        }
    }

    /// The execution id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// Whether this open resumed an execution that had been opened before.
    pub fn is_resume(&self) -> bool {
        self.is_resume
    }

    /// The fencing epoch of this handle's lock.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The sequence number the next step will get.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// The execution's input, as recorded when it was first opened.
    ///
    /// # Errors
    /// [`Error::Json`] when it does not decode as `T`.
    pub fn input<T: DeserializeOwned>(&self) -> Result<T> {
        payload::decode(
            &self.input,
            "the execution input",
            self.journal.payload_bytes_max(),
        )
    }

    /// Runs a pure step (a computation or a read). Its result is journaled in one commit; a
    /// crash inside it runs it again.
    ///
    /// # Errors
    /// [`Error::StepFailed`] when the closure failed (now or on an earlier run),
    /// [`Error::NonDeterminism`], [`Error::LockLost`], [`Error::PayloadTooLarge`], or a storage
    /// error.
    pub async fn pure<T, F, Fut>(&mut self, name: &str, mut f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut() -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let outcome = self.step(name, Effect::Pure, None, None, |_| f()).await?;
        self.never_skipped(outcome)
    }

    /// Runs an idempotent step, handing the closure its idempotency key. Its result is journaled
    /// in one commit; a crash inside it runs it again with the same key.
    ///
    /// # Errors
    /// As [`Execution::pure`].
    pub async fn idempotent<T, F, Fut>(&mut self, name: &str, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let outcome = self.step(name, Effect::Idempotent, None, None, f).await?;
        self.never_skipped(outcome)
    }

    /// Runs a guarded step: its intent is committed before the closure runs and its result after.
    /// If a crash left the intent without a result, `policy` decides (see [`Policy`]).
    ///
    /// # Errors
    /// As [`Execution::pure`], plus [`Error::Ambiguous`] under [`Policy::Fail`] and
    /// [`Error::ProbeFailed`] under [`Policy::Reconcile`].
    pub async fn guarded<T, F, Fut>(
        &mut self,
        name: &str,
        policy: Policy,
        f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        self.step(name, Effect::Guarded, Some(&policy), None, f)
            .await
    }

    /// As [`Execution::guarded`], and runs `with_intent` in the transaction that records the
    /// step's intent: the program's own rows (a scheduler marking its fire running) commit
    /// together with the intent, or not at all, and cost no commit of their own.
    ///
    /// `with_intent` runs only if this call records an intent. A step replayed from an earlier
    /// run (completed, failed, or found ambiguous) records none, and `with_intent` is dropped
    /// without running: what it wrote committed with that step's intent, on the earlier run.
    ///
    /// # Errors
    /// As [`Execution::guarded`], or `with_intent`'s own error, in which case neither the
    /// intent nor anything of `with_intent` was written and the closure did not run; the
    /// handle is then halted at this step, as after any failed intent write.
    pub async fn guarded_with<T, F, Fut, W>(
        &mut self,
        name: &str,
        policy: Policy,
        with_intent: W,
        f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
        W: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let with_intent: IntentHook = Box::new(with_intent);
        self.step(name, Effect::Guarded, Some(&policy), Some(with_intent), f)
            .await
    }

    fn never_skipped<T>(&self, outcome: Guarded<T>) -> Result<T> {
        match outcome {
            Guarded::Done(value) => Ok(value),
            Guarded::Skipped(skipped) => Err(Error::Inconsistent(format!(
                "step {} of execution {} is recorded as skipped but is not guarded",
                skipped.seq, self.id
            ))),
        }
    }

    async fn step<T, F, Fut>(
        &mut self,
        name: &str,
        effect: Effect,
        policy: Option<&Policy>,
        with_intent: Option<IntentHook>,
        f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        if let Some(seq) = self.halted_at {
            return Err(Error::Halted {
                execution_id: self.resource.to_string(),
                seq,
            });
        }
        let seq = self.next_seq;
        let call = StepCall {
            execution_id: self.id,
            seq,
            name,
            effect,
            policy,
            key: std::sync::OnceLock::new(),
        };
        let span = tracing::info_span!(
            "durably.step",
            execution_id = %self.id,
            seq,
            name,
            effect = effect.as_str(),
            outcome = tracing::field::Empty,
        );
        // Halted until the step finishes: if the caller drops this future half way (a timeout,
        // a select), the step's state is unknown and the handle must not go on.
        self.halted_at = Some(seq);
        let result = match self.replay.take(seq) {
            Some(recorded) => {
                self.replay_step(&call, recorded, f)
                    .instrument(span.clone())
                    .await
            }
            None => {
                self.run_fresh(&call, with_intent, f)
                    .instrument(span.clone())
                    .await
            }
        };
        span.record("outcome", outcome_word(&result));
        if matches!(&result, Ok(_) | Err(Error::StepFailed { .. })) {
            self.next_seq += 1;
            self.halted_at = None;
        }
        result
    }

    async fn run_fresh<T, F, Fut>(
        &self,
        call: &StepCall<'_>,
        with_intent: Option<IntentHook>,
        mut f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        if let Some(policy) = call.policy {
            self.write_intent(call, policy, with_intent).await?;
            fail::fail_point!("journal::after-intent-commit", |_| std::process::abort());
        }
        self.run_and_record(call, 1, &mut f).await
    }

    async fn replay_step<T, F, Fut>(
        &self,
        call: &StepCall<'_>,
        recorded: RecordedStep,
        mut f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        if recorded.name != call.name || recorded.effect != call.effect.as_str() {
            return Err(Error::NonDeterminism {
                execution_id: self.resource.to_string(),
                seq: call.seq,
                recorded: format!("{} step {:?}", recorded.effect, recorded.name),
                called: format!("{} step {:?}", call.effect.as_str(), call.name),
            });
        }
        let cap = self.journal.payload_bytes_max();
        match (recorded.state, call.policy) {
            ("completed", _) => {
                let text = recorded.result.as_deref().unwrap_or("null");
                Ok(Guarded::Done(payload::decode(
                    text,
                    "a recorded step result",
                    cap,
                )?))
            }
            ("failed", _) => {
                let text = recorded.error.as_deref().unwrap_or("null");
                Err(Error::StepFailed {
                    seq: call.seq,
                    name: call.name.to_owned(),
                    error: payload::decode(text, "a recorded step error", cap)?,
                })
            }
            ("skipped", Some(_)) => Ok(Guarded::Skipped(skipped(call))),
            ("intent", Some(policy)) => {
                self.resolve_ambiguity(call, policy, recorded.attempts, &mut f)
                    .await
            }
            (state, _) => Err(Error::Inconsistent(format!(
                "step {} of execution {} is a {} step in state {state:?}",
                call.seq, self.resource, recorded.effect
            ))),
        }
    }

    /// Applies the step's policy to an intent without a result: the effect may or may not have
    /// happened, and only the caller's chosen policy may decide which.
    async fn resolve_ambiguity<T, F, Fut>(
        &self,
        call: &StepCall<'_>,
        policy: &Policy,
        attempts: u32,
        f: &mut F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        tracing::info!(
            policy = policy.as_str(),
            "ambiguous step found after a crash"
        );
        match policy {
            Policy::Skip => {
                self.write_skipped(call).await?;
                Ok(Guarded::Skipped(skipped(call)))
            }
            Policy::Fail => {
                let detail = json!({ "policy": "fail" });
                self.write_event(call, event_kind::AMBIGUITY_FAILED, detail)
                    .await?;
                Err(Error::Ambiguous {
                    execution_id: self.resource.to_string(),
                    seq: call.seq,
                    name: call.name.to_owned(),
                })
            }
            Policy::Retry => {
                let detail = json!({ "policy": "retry", "attempt": attempts.saturating_add(1) });
                self.write_rerun(call, attempts, event_kind::AMBIGUITY_RETRIED, detail)
                    .await?;
                self.run_and_record(call, attempts.saturating_add(1), f)
                    .await
            }
            Policy::Reconcile(probe) => {
                let answer = probe(call.key())
                    .await
                    .map_err(|error| Error::ProbeFailed {
                        seq: call.seq,
                        name: call.name.to_owned(),
                        error,
                    })?;
                if let Some(value) = answer {
                    let cap = self.journal.payload_bytes_max();
                    let decoded: T =
                        payload::decode(&value.to_string(), "a reconciled result", cap)?;
                    self.write_reconciled(call, &decoded).await?;
                    return Ok(Guarded::Done(decoded));
                }
                let detail = json!({ "policy": "reconcile", "found": false, "attempt": attempts.saturating_add(1) });
                self.write_rerun(call, attempts, event_kind::AMBIGUITY_RECONCILED, detail)
                    .await?;
                self.run_and_record(call, attempts.saturating_add(1), f)
                    .await
            }
        }
    }

    /// Calls the closure (with bounded retries of retryable errors) and journals its outcome.
    async fn run_and_record<T, F, Fut>(
        &self,
        call: &StepCall<'_>,
        first_attempt: u32,
        f: &mut F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let (outcome, attempts) = self.call_with_retries(call, first_attempt, f).await?;
        fail::fail_point!("journal::after-effect", |_| std::process::abort());
        self.write_result(call, &outcome, attempts).await?;
        fail::fail_point!("journal::after-result-commit", |_| std::process::abort());
        Self::guarded_outcome(call, outcome)
    }

    /// Calls the closure, retrying errors marked retryable with backoff, at most
    /// `retry.attempts_max` times in this run. Every failed attempt is recorded before the next.
    async fn call_with_retries<T, F, Fut>(
        &self,
        call: &StepCall<'_>,
        first_attempt: u32,
        f: &mut F,
    ) -> Result<(StepOutcome<T>, u32)>
    where
        F: FnMut(IdempotencyKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let retry = self.journal.inner.retry;
        let mut attempt = first_attempt;
        for tries in 1..=retry.attempts_max.max(1) {
            match f(call.key()).await {
                Err(error) if error.retryable && tries < retry.attempts_max => {
                    let detail = json!({ "attempt": attempt, "error": error.message });
                    self.write_attempt(
                        call,
                        attempt.saturating_add(1),
                        event_kind::ATTEMPT_FAILED,
                        detail,
                    )
                    .await?;
                    tokio::time::sleep(retry.backoff_before(tries + 1)).await;
                    attempt += 1;
                }
                outcome => return Ok((outcome, attempt)),
            }
        }
        Err(Error::Inconsistent(
            "the retry loop ended without an outcome".to_owned(),
        ))
    }

    fn guarded_outcome<T>(call: &StepCall<'_>, outcome: StepOutcome<T>) -> Result<Guarded<T>> {
        outcome
            .map(Guarded::Done)
            .map_err(|error| Error::StepFailed {
                seq: call.seq,
                name: call.name.to_owned(),
                error,
            })
    }

    /// Records a guarded step's intent, with `with_intent`'s rows when there are any. The
    /// intent alone is one statement and needs no savepoint; with the caller's rows it takes
    /// one.
    async fn write_intent(
        &self,
        call: &StepCall<'_>,
        policy: &Policy,
        with_intent: Option<IntentHook>,
    ) -> Result<()> {
        let (seq, name, policy, key) = (
            call.seq,
            call.name.to_owned(),
            policy.as_str(),
            call.key().to_string(),
        );
        let undo = if with_intent.is_some() {
            Undo::Savepoint
        } else {
            Undo::OneStatement
        };
        self.write_fenced_with(undo, move |conn, resource, now| {
            conn.prepare_cached(
                "INSERT INTO steps (execution_id, seq, name, effect, policy, state,
                                    idempotency_key, attempts, intent_at)
                 VALUES (?1, ?2, ?3, 'guarded', ?4, 'intent', ?5, 1, ?6)",
            )?
            .execute(params![resource, seq, name, policy, key, now])?;
            with_intent.map_or(Ok(()), |write| write(conn))
        })
        .await
    }

    async fn write_result<T: Serialize>(
        &self,
        call: &StepCall<'_>,
        outcome: &StepOutcome<T>,
        attempts: u32,
    ) -> Result<()> {
        let cap = self.journal.payload_bytes_max();
        let encoded = match outcome {
            Ok(value) => payload::encode(value, "the step result", cap)
                .map(|text| ("completed", Some(text), None)),
            Err(error) => payload::encode(error, "the step error", cap)
                .map(|text| ("failed", None, Some(text))),
        };
        let (state, result, error, unrecordable) = match encoded {
            Ok((state, result, error)) => (state, result, error, None),
            // A pure or idempotent step writes nothing and may simply run again.
            Err(problem) if call.effect != Effect::Guarded => return Err(problem),
            // The effect has run, but its outcome cannot be journaled. Leaving the intent would
            // make every later run find the step ambiguous (and Retry would run the effect again
            // with no crash at all), so a small fixed failure is recorded instead, and the caller
            // gets the same error now as every replay will.
            Err(problem) => {
                let step_error = StepError::fatal(format!(
                    "the step's outcome could not be journaled: {problem}"
                ));
                let text = payload::encode(&step_error, "the step error", cap)?;
                ("failed", None, Some(text), Some(step_error))
            }
        };
        let row = ResultRow {
            seq: call.seq,
            name: call.name.to_owned(),
            effect: call.effect,
            key: call.key().to_string(),
            state,
            result,
            error,
            attempts,
        };
        // A busy database means the batch never began, so trying again cannot write twice.
        for try_number in 1..=RESULT_WRITE_TRIES_MAX {
            let row = row.clone();
            match self
                .write_fenced_with(Undo::OneStatement, move |conn, resource, now| {
                    row.record(conn, resource, now)
                })
                .await
            {
                Err(Error::Busy { .. }) if try_number < RESULT_WRITE_TRIES_MAX => {}
                Err(error) => return Err(error),
                Ok(()) => break,
            }
        }
        match unrecordable {
            Some(error) => Err(Error::StepFailed {
                seq: call.seq,
                name: call.name.to_owned(),
                error,
            }),
            None => Ok(()),
        }
    }

    /// Records that an ambiguous step is about to run again (`kind` says why), unless it has
    /// already been re-run after a crash `ambiguous_reruns_max` times: a step that keeps
    /// crashing its process (a poison pill) must not be re-run forever, so it is then left in
    /// the ambiguous window for an operator, with an `ambiguity_failed` event saying why, and
    /// the caller gets [`Error::Ambiguous`].
    async fn write_rerun(
        &self,
        call: &StepCall<'_>,
        attempts: u32,
        kind: &'static str,
        detail: serde_json::Value,
    ) -> Result<()> {
        let (seq, reruns_max) = (call.seq, self.journal.inner.ambiguous_reruns_max);
        let rerun = self
            .write_fenced(move |conn, resource, now| {
                let reruns: u32 = conn
                    .prepare_cached(
                        "SELECT count(*) FROM events WHERE execution_id = ?1 AND seq = ?2
                           AND (kind = 'ambiguity_retried'
                                OR (kind = 'ambiguity_reconciled'
                                    AND json_extract(detail, '$.found') = 0))",
                    )?
                    .query_row(params![resource, seq], |row| row.get(0))?;
                if reruns >= reruns_max {
                    let detail = json!({
                        "reason": "re-run limit reached",
                        "reruns": reruns,
                        "ambiguous_reruns_max": reruns_max,
                    });
                    events::record(
                        conn,
                        now,
                        Some(resource),
                        Some(seq),
                        event_kind::AMBIGUITY_FAILED,
                        &detail,
                    )?;
                    return Ok(false);
                }
                conn.prepare_cached(
                    "UPDATE steps SET attempts = ?3 WHERE execution_id = ?1 AND seq = ?2",
                )?
                .execute(params![resource, seq, attempts.saturating_add(1)])?;
                events::record(conn, now, Some(resource), Some(seq), kind, &detail)?;
                Ok(true)
            })
            .await?;
        if rerun {
            Ok(())
        } else {
            Err(Error::Ambiguous {
                execution_id: self.resource.to_string(),
                seq: call.seq,
                name: call.name.to_owned(),
            })
        }
    }

    /// Writes an audit event about this step, fenced.
    async fn write_event(
        &self,
        call: &StepCall<'_>,
        kind: &'static str,
        detail: serde_json::Value,
    ) -> Result<()> {
        let seq = call.seq;
        self.write_fenced(move |conn, resource, now| {
            events::record(conn, now, Some(resource), Some(seq), kind, &detail)
        })
        .await
    }

    async fn write_skipped(&self, call: &StepCall<'_>) -> Result<()> {
        let seq = call.seq;
        self.write_fenced(move |conn, resource, now| {
            let changed = conn
                .prepare_cached(
                    "UPDATE steps SET state = 'skipped', result_at = ?3
                     WHERE execution_id = ?1 AND seq = ?2 AND state = 'intent'",
                )?
                .execute(params![resource, seq, now])?;
            expect_one_row(changed, resource, seq)?;
            events::record(
                conn,
                now,
                Some(resource),
                Some(seq),
                event_kind::AMBIGUITY_SKIPPED,
                &json!({ "policy": "skip" }),
            )
        })
        .await
    }

    async fn write_reconciled<T: Serialize>(&self, call: &StepCall<'_>, value: &T) -> Result<()> {
        let result = payload::encode(
            value,
            "the reconciled result",
            self.journal.payload_bytes_max(),
        )?;
        let seq = call.seq;
        self.write_fenced(move |conn, resource, now| {
            let changed = conn
                .prepare_cached(
                    "UPDATE steps SET state = 'completed', result = ?3, result_at = ?4
                     WHERE execution_id = ?1 AND seq = ?2 AND state = 'intent'",
                )?
                .execute(params![resource, seq, result, now])?;
            expect_one_row(changed, resource, seq)?;
            events::record(
                conn,
                now,
                Some(resource),
                Some(seq),
                event_kind::AMBIGUITY_RECONCILED,
                &json!({ "policy": "reconcile", "found": true }),
            )
        })
        .await
    }

    /// Records that attempt `attempts` is about to start, with an audit event. Guarded steps
    /// have a row to update; pure and idempotent steps get their count with their result.
    async fn write_attempt(
        &self,
        call: &StepCall<'_>,
        attempts: u32,
        kind: &'static str,
        detail: serde_json::Value,
    ) -> Result<()> {
        let (seq, guarded) = (call.seq, call.effect == Effect::Guarded);
        self.write_fenced(move |conn, resource, now| {
            if guarded {
                conn.prepare_cached(
                    "UPDATE steps SET attempts = ?3 WHERE execution_id = ?1 AND seq = ?2",
                )?
                .execute(params![resource, seq, attempts])?;
            }
            events::record(conn, now, Some(resource), Some(seq), kind, &detail)
        })
        .await
    }

    /// Runs `work` in the writer after the fence check, in the same transaction, inside its own
    /// savepoint.
    async fn write_fenced<T, W>(&self, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, &str) -> Result<T> + Send + 'static,
    {
        self.write_fenced_with(Undo::Savepoint, work).await
    }

    /// [`Execution::write_fenced`], with the way a failure of `work` is taken back chosen by the
    /// caller. Every step's result, and a guarded step's intent when no caller rows go with it,
    /// change rows with one statement after the fence check, which only reads: they take
    /// [`Undo::OneStatement`].
    async fn write_fenced_with<T, W>(&self, undo: Undo, work: W) -> Result<T>
    where
        T: Send + 'static,
        W: FnOnce(&Connection, &str, &str) -> Result<T> + Send + 'static,
    {
        let locker = Arc::clone(&self.journal.inner.locker);
        let (resource, epoch, now) = (Arc::clone(&self.resource), self.epoch, self.journal.now());
        self.journal
            .inner
            .writer
            .write_with(undo, move |conn| {
                locker.fence(conn, &resource, epoch)?;
                work(conn, &resource, &now)
            })
            .await
    }

    /// Refreshes this handle's lease heartbeat (for journals opened with a lease).
    ///
    /// # Errors
    /// [`Error::LockLost`] when the lock was taken over.
    pub async fn heartbeat(&self) -> Result<()> {
        let locker = Arc::clone(&self.journal.inner.locker);
        let (resource, epoch) = (Arc::clone(&self.resource), self.epoch);
        self.journal
            .write(move |conn| Ok(locker.heartbeat(conn, &resource, epoch)?))
            .await
    }

    /// Finalizes the execution as completed with `output`, and releases its lock, in one
    /// transaction.
    ///
    /// # Errors
    /// [`Error::LockLost`], [`Error::PayloadTooLarge`], or a storage error.
    pub async fn complete(self, output: &impl Serialize) -> Result<()> {
        self.complete_with(output, |_| Ok(())).await
    }

    /// As [`Execution::complete`], and runs `also` in the same transaction: the program's own
    /// rows in the journal's database (a scheduler's ledger, an outbox) commit together with
    /// the execution's end, or not at all.
    ///
    /// # Errors
    /// As [`Execution::complete`], or `also`'s own error, in which case nothing was written and
    /// the execution is still running (reopen it to finish it).
    pub async fn complete_with<F>(self, output: &impl Serialize, also: F) -> Result<()>
    where
        F: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let output = payload::encode(
            output,
            "the execution output",
            self.journal.payload_bytes_max(),
        )?;
        // After an ambiguous step, a lost lock or non-determinism the journal is in doubt:
        // completing would bury the doubt under a final status. `fail` stays allowed. A lost
        // lock is the more useful answer when it is the reason, so the fence is asked first.
        if let Some(seq) = self.halted_at {
            self.write_fenced(|_, _, _| Ok(())).await?;
            return Err(Error::Halted {
                execution_id: self.resource.to_string(),
                seq,
            });
        }
        self.finalize(Status::Completed, output, also).await
    }

    /// Finalizes the execution as failed with `error`, and releases its lock, in one transaction.
    ///
    /// # Errors
    /// As [`Execution::complete`].
    pub async fn fail(self, error: &impl Serialize) -> Result<()> {
        self.fail_with(error, |_| Ok(())).await
    }

    /// As [`Execution::fail`], and runs `also` in the same transaction (see
    /// [`Execution::complete_with`]).
    ///
    /// # Errors
    /// As [`Execution::complete_with`].
    pub async fn fail_with<F>(self, error: &impl Serialize, also: F) -> Result<()>
    where
        F: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let error = payload::encode(
            error,
            "the execution error",
            self.journal.payload_bytes_max(),
        )?;
        self.finalize(Status::Failed, error, also).await
    }

    async fn finalize<F>(mut self, status: Status, payload: String, also: F) -> Result<()>
    where
        F: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let locker = Arc::clone(&self.journal.inner.locker);
        let (epoch, next_seq) = (self.epoch, self.next_seq);
        self.write_fenced(move |conn, resource, now| {
            let column = if status == Status::Completed {
                "output"
            } else {
                "error"
            };
            if status == Status::Completed {
                refuse_open_intent(conn, resource, next_seq)?;
            }
            conn.prepare_cached(&format!(
                "UPDATE executions SET status = ?2, {column} = ?3, updated_at = ?4,
                                       finalized_at = ?4
                 WHERE execution_id = ?1"
            ))?
            .execute(params![resource, status.as_str(), payload, now])?;
            also(conn)?;
            locker.release(conn, resource, epoch)?;
            Ok(())
        })
        .await?;
        self.finalized = true;
        tracing::info!(execution_id = %self.id, status = status.as_str(), "finalized");
        Ok(())
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        if let Some(heartbeat) = &self.heartbeat {
            heartbeat.abort();
        }
        if !self.finalized {
            self.journal.release_detached(self.id, self.epoch);
        }
    }
}

/// The first step at or after `?2` that is still in the ambiguous window.
const FIRST_OPEN_INTENT_FROM: &str =
    "SELECT seq FROM steps WHERE execution_id = ?1 AND seq >= ?2 AND state = 'intent' LIMIT 1";

/// Refuses to complete an execution while one of its steps is still in the ambiguous window.
///
/// Only steps from `next_seq` on are read. Every step before it was run or replayed by this
/// handle to an outcome: a step that stopped in the ambiguous window halts the handle, and
/// completing a halted handle is refused before this. Nobody else wrote an intent since the
/// open, because every step write is fenced by this handle's lock. Reading from `next_seq`
/// finds what this run never reached, such as a recorded intent past a shorter path through
/// the program, and costs a seek instead of a read of every step (16 ms for a
/// 100,000-step execution, on the writer thread, before).
fn refuse_open_intent(conn: &Connection, resource: &str, next_seq: u32) -> Result<()> {
    let open: Option<u32> = conn
        .prepare_cached(FIRST_OPEN_INTENT_FROM)?
        .query_row(params![resource, next_seq], |row| row.get(0))
        .optional()?;
    match open {
        Some(seq) => Err(Error::Refused(format!(
            "execution {resource} cannot complete while step {seq} is ambiguous; resolve it \
             first (`durably show {resource}` says how), or finalize the execution as failed"
        ))),
        None => Ok(()),
    }
}

/// Keeps the lease of a journal opened with one alive while the handle lives, at a third of
/// the lease. A process that is frozen (SIGSTOP) or hung stops heartbeating and loses the lease,
/// which is the point of one. Ends when the lock is lost; aborted when the handle drops.
fn spawn_heartbeat(
    journal: &Journal,
    resource: &Arc<str>,
    epoch: u64,
) -> Option<tokio::task::JoinHandle<()>> {
    let lease_ms = journal.inner.lease_ms?;
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let (journal, resource) = (journal.clone(), Arc::clone(resource));
    let period = std::time::Duration::from_millis((lease_ms / 3).max(1));
    Some(runtime.spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            let locker = Arc::clone(&journal.inner.locker);
            let resource = Arc::clone(&resource);
            let beat = journal
                .write(move |conn| Ok(locker.heartbeat(conn, &resource, epoch)?))
                .await;
            if let Err(Error::LockLost(_)) = beat {
                break;
            }
        }
    }))
}

fn skipped(call: &StepCall<'_>) -> Skipped {
    Skipped {
        seq: call.seq,
        name: call.name.to_owned(),
        idempotency_key: call.key(),
    }
}

fn expect_one_row(changed: usize, resource: &str, seq: u32) -> Result<()> {
    if changed == 1 {
        Ok(())
    } else {
        Err(Error::Inconsistent(format!(
            "step {seq} of execution {resource} was expected in the intent state"
        )))
    }
}

fn outcome_word<T>(result: &Result<Guarded<T>>) -> &'static str {
    match result {
        Ok(Guarded::Done(_)) => "done",
        Ok(Guarded::Skipped(_)) => "skipped",
        Err(Error::StepFailed { .. }) => "failed",
        Err(Error::Ambiguous { .. }) => "ambiguous",
        Err(Error::LockLost(_)) => "lock_lost",
        Err(Error::NonDeterminism { .. }) => "non_determinism",
        Err(_) => "error",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::FIRST_OPEN_INTENT_FROM;
    use crate::config::Durability;
    use crate::storage;

    #[test]
    fn the_completion_check_seeks_past_the_steps_this_run_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        let conn = storage::open_writer(&path, Durability::Full, 1_000).unwrap();
        storage::migrate(&conn, &path).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {FIRST_OPEN_INTENT_FROM}"))
            .unwrap()
            .query_map(rusqlite::params!["an execution", 7], |row| row.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            plan,
            ["SEARCH steps USING INDEX steps_by_execution (execution_id=? AND seq>?)"]
        );
    }
}
