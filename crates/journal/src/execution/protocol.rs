//! The step protocol: how a step call is matched against the journal, run, and recorded.
//!
//! Invariant: a guarded step's intent row is durable (acknowledged after COMMIT) before its
//! closure is called. A step found with an intent and no result is in the ambiguous window,
//! and only the step's [`Policy`] decides what happens to it.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::fence::CancelRequests;
use super::hooks::{Hook, IntentHook, ResultHook, Timing};
use super::reservation::Shared;
use super::step_rows::{self, Awaited, Closing, IntentRow, ResultRow};
use crate::error::{AmbiguityReason, Error, Result};
use crate::events;
use crate::payload::{self, Payload};
use crate::records::event_kind;
use crate::replay::RecordedStep;
use crate::states::{PolicyKind, StepState};
use crate::step::{Effect, Guarded, IdempotencyKey, Policy, Skipped, StepError, StepKey};
use crate::telemetry::{self, Decision, StepEnd};
use crate::writer::Undo;

/// A step being run: its place and identity.
pub(super) struct StepCall<'a> {
    pub(super) seq: u32,
    /// The outcomes pending when the step was called (W1, see [`Shared::confirm_durable`]).
    depends_on: &'a [u32],
    pub(super) name: &'a str,
    pub(super) effect: Effect,
    pub(super) policy: Option<&'a Policy>,
    /// Derived on first use: replaying a completed or failed step never needs it, and the
    /// derivation (a blake3 hash) is most of a replayed step's cost.
    key: std::sync::OnceLock<IdempotencyKey>,
    execution_id: uuid::Uuid,
}

impl<'a> StepCall<'a> {
    pub(super) fn new(
        seq: u32,
        name: &'a str,
        effect: Effect,
        policy: Option<&'a Policy>,
        execution_id: uuid::Uuid,
        depends_on: &'a [u32],
    ) -> Self {
        Self {
            seq,
            depends_on,
            name,
            effect,
            policy,
            key: std::sync::OnceLock::new(),
            execution_id,
        }
    }

    /// The step's idempotency key, the same on every run.
    fn key(&self) -> IdempotencyKey {
        *self
            .key
            .get_or_init(|| IdempotencyKey::derive(self.execution_id, self.seq, self.name))
    }

    fn skipped(&self) -> Skipped {
        Skipped {
            seq: self.seq,
            name: self.name.to_owned(),
            idempotency_key: self.key(),
        }
    }

    fn failed(&self, error: StepError) -> Error {
        Error::StepFailed {
            seq: self.seq,
            name: self.name.to_owned(),
            error,
        }
    }
}

pub(super) type StepOutcome<T> = std::result::Result<T, StepError>;

impl Shared {
    /// Runs a step that is not recorded. A halted handle starts no step: a sibling's error
    /// stopped the execution.
    pub(super) async fn run_fresh<T, F, Fut>(
        &self,
        call: &StepCall<'_>,
        hook: Option<Hook>,
        mut f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let (with_intent, with_result) = match hook {
            None => (None, None),
            Some(Hook::Intent(hook)) => (Some(hook), None),
            Some(Hook::Result(hook, timing)) => (None, Some((hook, timing))),
        };
        self.refuse_if_halted()?;
        if let Some(policy) = call.policy {
            self.write_intent(call, policy, with_intent).await?;
            fail::fail_point!("journal::after-intent-commit", |_| std::process::abort());
        }
        self.run_and_record(call, 1, &mut f, with_result).await
    }

    pub(super) async fn replay_step<T, F, Fut>(
        &self,
        call: &StepCall<'_>,
        recorded: RecordedStep,
        mut f: F,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        if recorded.name != call.name || recorded.effect != call.effect {
            return Err(Error::NonDeterminism {
                execution_id: self.id,
                seq: call.seq,
                recorded: format!("{} step {:?}", recorded.effect, recorded.name),
                called: format!("{} step {:?}", call.effect, call.name),
            });
        }
        let cap = self.settings.payload_bytes_max;
        match (recorded.state, call.policy) {
            (StepState::Completed, _) => {
                let text = recorded.result.as_ref().map_or("null", Payload::as_json);
                Ok(Guarded::Done(payload::decode(
                    text,
                    "a recorded step result",
                    cap,
                )?))
            }
            (StepState::Failed, _) => {
                let text = recorded.error.as_ref().map_or("null", Payload::as_json);
                Err(call.failed(payload::decode(text, "a recorded step error", cap)?))
            }
            (StepState::Skipped, Some(_)) => Ok(Guarded::Skipped(call.skipped())),
            (StepState::Intent, Some(policy)) => {
                self.resolve_ambiguity(call, policy, recorded.attempts, &mut f)
                    .await
            }
            // The effects match, so only a guarded call has a policy: a pure or idempotent
            // step never writes these states.
            (state @ (StepState::Skipped | StepState::Intent), None) => {
                Err(Error::Inconsistent(format!(
                    "step {} of execution {} is a {} step in state {state}",
                    call.seq, self.id, recorded.effect
                )))
            }
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
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        tracing::info!(policy = %policy.kind(), "ambiguous step found after a crash");
        let next_attempt = attempts.saturating_add(1);
        match policy {
            Policy::Skip => {
                let seq = call.seq;
                self.fence
                    .write(move |conn, resource, now| {
                        step_rows::close_intent(conn, resource, seq, &Closing::Skipped, now)
                    })
                    .await?;
                telemetry::ambiguity_decided(PolicyKind::Skip, Decision::Skipped);
                Ok(Guarded::Skipped(call.skipped()))
            }
            Policy::Fail => {
                let reason = AmbiguityReason::PolicyFail;
                let (seq, name) = (call.seq, call.name.to_owned());
                self.fence
                    .write(move |conn, resource, now| {
                        let detail = json!({ "policy": "fail" });
                        let kind = event_kind::AMBIGUITY_FAILED;
                        events::record(conn, now, Some(resource), Some(seq), kind, &detail)?;
                        let awaited = Awaited {
                            seq,
                            name: &name,
                            policy: PolicyKind::Fail,
                            reason,
                        };
                        step_rows::await_operator(conn, resource, &awaited, now)
                    })
                    .await?;
                fail::fail_point!("journal::after-awaiting-operator-commit", |_| {
                    std::process::abort()
                });
                telemetry::ambiguity_decided(PolicyKind::Fail, Decision::AwaitingOperator);
                Err(self.ambiguous(call, reason))
            }
            Policy::Retry => {
                let detail = json!({ "policy": "retry", "attempt": next_attempt });
                self.write_rerun(call, attempts, event_kind::AMBIGUITY_RETRIED, detail)
                    .await?;
                self.run_and_record(call, next_attempt, f, None).await
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
                    let reconciled = self.write_reconciled(call, &value).await?;
                    telemetry::ambiguity_decided(PolicyKind::Reconcile, Decision::Reconciled);
                    return Ok(Guarded::Done(reconciled));
                }
                let detail =
                    json!({ "policy": "reconcile", "found": false, "attempt": next_attempt });
                self.write_rerun(call, attempts, event_kind::AMBIGUITY_RECONCILED, detail)
                    .await?;
                self.run_and_record(call, next_attempt, f, None).await
            }
        }
    }

    fn ambiguous(&self, call: &StepCall<'_>, reason: AmbiguityReason) -> Error {
        Error::Ambiguous {
            execution_id: self.id,
            seq: call.seq,
            name: call.name.to_owned(),
            reason,
        }
    }

    /// Calls the closure (with bounded retries of retryable errors) after what must be durable
    /// before it is, and journals its outcome, with `with_result`'s rows in the same
    /// transaction.
    async fn run_and_record<T, F, Fut>(
        &self,
        call: &StepCall<'_>,
        first_attempt: u32,
        f: &mut F,
        with_result: Option<(ResultHook, Timing)>,
    ) -> Result<Guarded<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        self.before_closure(call.effect).await?;
        if call.effect != Effect::Pure {
            self.confirm_durable(call.depends_on).await?;
        }
        let (outcome, attempts) = self.call_with_retries(call, first_attempt, f).await?;
        tracing::Span::current().record("attempt", attempts);
        fail::fail_point!("journal::after-effect", |_| std::process::abort());
        if self
            .write_result(call, &outcome, attempts, with_result)
            .await?
        {
            fail::fail_point!("journal::after-result-commit", |_| std::process::abort());
        }
        outcome
            .map(Guarded::Done)
            .map_err(|error| call.failed(error))
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
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = StepOutcome<T>>,
    {
        let retry = self.settings.retry;
        let step_key = StepKey::new(call.key(), self.fence.token());
        let mut attempt = first_attempt;
        for tries in 1..=retry.attempts_max.max(1) {
            match f(step_key).await {
                Err(error) if error.retryable && tries < retry.attempts_max => {
                    let detail = json!({ "attempt": attempt, "error": error.message.clone() });
                    match self
                        .write_attempt(call, attempt.saturating_add(1), detail)
                        .await
                    {
                        // A cancel request committed: a next attempt would be a new effect, so
                        // a guarded step records this failure as its result (R5 admits it).
                        Err(Error::CancelRequested { .. }) if call.effect == Effect::Guarded => {
                            return Ok((Err(error), attempt));
                        }
                        written => written?,
                    }
                    telemetry::step_retried(call.effect);
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

    /// Records a guarded step's intent, with `with_intent`'s rows when there are any (run
    /// first in the transaction). The intent alone is one statement and needs no savepoint
    /// (unless the write carries pending rows); with the caller's rows it takes one.
    async fn write_intent(
        &self,
        call: &StepCall<'_>,
        policy: &Policy,
        with_intent: Option<IntentHook>,
    ) -> Result<()> {
        let row = IntentRow {
            seq: call.seq,
            name: call.name.to_owned(),
            policy: policy.kind(),
            key: call.key().to_string(),
        };
        let record = move |conn: &durably_db::Connection, resource: &str, now: &str| {
            row.record(conn, resource, now)
        };
        match with_intent {
            // First in the transaction: if it declines, what is pending stays pending.
            Some(with_intent) => {
                self.fence.open_before_hook().await?;
                let requests = CancelRequests::Refuse;
                self.fence.write_first(with_intent, requests, record).await
            }
            None => self.fence.write_with(Undo::OneStatement, record).await,
        }
    }

    /// Records a step's outcome, with `with_result`'s rows in the same transaction when there
    /// is a hook. Returns whether it was written now (else it is pending in the handle).
    async fn write_result<T: Serialize>(
        &self,
        call: &StepCall<'_>,
        outcome: &StepOutcome<T>,
        attempts: u32,
        with_result: Option<(ResultHook, Timing)>,
    ) -> Result<bool> {
        let cap = self.settings.payload_bytes_max;
        let encoded = match outcome {
            Ok(value) => payload::encode(value, "the step result", cap)
                .map(|text| (StepState::Completed, Some(text), None)),
            Err(error) => payload::encode(error, "the step error", cap)
                .map(|text| (StepState::Failed, None, Some(text))),
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
                (StepState::Failed, None, Some(text), Some(step_error))
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
        let (hook, timing) = with_result.map_or((None, Timing::Deferred), |(hook, timing)| {
            (Some(hook), timing)
        });
        let written = self.record_result(row, hook, timing).await?;
        unrecordable.map_or(Ok(written), |error| Err(call.failed(error)))
    }

    /// Records that an ambiguous step is about to run again (`kind` says why), unless it has
    /// already been re-run after a crash `ambiguous_reruns_max` times: a step that keeps
    /// crashing its process (a poison pill) must not be re-run forever, so it is then left in
    /// the ambiguous window for an operator, with an `ambiguity_failed` event saying why and
    /// the execution parked `awaiting_operator` in the same transaction, and the caller gets
    /// [`Error::Ambiguous`].
    async fn write_rerun(
        &self,
        call: &StepCall<'_>,
        attempts: u32,
        kind: &'static str,
        detail: serde_json::Value,
    ) -> Result<()> {
        let (seq, reruns_max) = (call.seq, self.settings.ambiguous_reruns_max);
        let (name, policy) = (call.name.to_owned(), call.policy.map(Policy::kind));
        let exhausted = self
            .fence
            .write(move |conn, resource, now| {
                let reruns = step_rows::count_reruns(conn, resource, seq)?;
                if reruns >= reruns_max {
                    let detail = json!({
                        "reason": "re-run limit reached",
                        "reruns": reruns,
                        "ambiguous_reruns_max": reruns_max,
                    });
                    let kind = event_kind::AMBIGUITY_FAILED;
                    events::record(conn, now, Some(resource), Some(seq), kind, &detail)?;
                    let reason = AmbiguityReason::RerunsExhausted {
                        reruns,
                        max: reruns_max,
                    };
                    let policy = policy.unwrap_or(PolicyKind::Retry);
                    let awaited = Awaited {
                        seq,
                        name: &name,
                        policy,
                        reason,
                    };
                    step_rows::await_operator(conn, resource, &awaited, now)?;
                    return Ok(Some(reason));
                }
                step_rows::set_attempts(conn, resource, seq, attempts.saturating_add(1))?;
                events::record(conn, now, Some(resource), Some(seq), kind, &detail)?;
                Ok(None)
            })
            .await?;
        let policy = policy.unwrap_or(PolicyKind::Retry);
        match exhausted {
            None => {
                telemetry::ambiguity_decided(policy, Decision::Rerun);
                Ok(())
            }
            Some(reason) => {
                fail::fail_point!("journal::after-awaiting-operator-commit", |_| {
                    std::process::abort()
                });
                telemetry::ambiguity_decided(policy, Decision::AwaitingOperator);
                Err(self.ambiguous(call, reason))
            }
        }
    }

    /// Records the result a reconcile probe found, decoded as the step's type first so that a
    /// probe answer of the wrong shape is refused before it is journaled.
    async fn write_reconciled<T>(&self, call: &StepCall<'_>, value: &serde_json::Value) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
    {
        let cap = self.settings.payload_bytes_max;
        let decoded: T = payload::decode(&value.to_string(), "a reconciled result", cap)?;
        let result = payload::encode(&decoded, "the reconciled result", cap)?;
        let seq = call.seq;
        self.fence
            .write(move |conn, resource, now| {
                step_rows::close_intent(conn, resource, seq, &Closing::Reconciled(&result), now)
            })
            .await?;
        Ok(decoded)
    }

    /// Records that attempt `attempts` is about to start, with an audit event. Guarded steps
    /// have a row to update; pure and idempotent steps get their count with their result.
    async fn write_attempt(
        &self,
        call: &StepCall<'_>,
        attempts: u32,
        detail: serde_json::Value,
    ) -> Result<()> {
        let (seq, guarded) = (call.seq, call.effect == Effect::Guarded);
        self.fence
            .write(move |conn, resource, now| {
                if guarded {
                    step_rows::set_attempts(conn, resource, seq, attempts)?;
                }
                let kind = event_kind::ATTEMPT_FAILED;
                events::record(conn, now, Some(resource), Some(seq), kind, &detail)
            })
            .await
    }
}

/// How a step call ended, for its span's `outcome` field and the step metrics.
pub(super) fn step_end<T>(result: &Result<Guarded<T>>) -> StepEnd {
    match result {
        Ok(Guarded::Done(_)) => StepEnd::Done,
        Ok(Guarded::Skipped(_)) => StepEnd::Skipped,
        Err(Error::StepFailed { .. }) => StepEnd::Failed,
        Err(Error::Ambiguous { .. }) => StepEnd::Ambiguous,
        Err(Error::LockLost(_)) => StepEnd::LockLost,
        Err(Error::NonDeterminism { .. }) => StepEnd::NonDeterminism,
        Err(Error::CancelRequested { .. }) => StepEnd::CancelRequested,
        Err(_) => StepEnd::Error,
    }
}
