//! The vocabulary of steps: effects, ambiguity policies, idempotency keys, step errors and the
//! outcome of a guarded step.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::states::PolicyKind;
use uuid::Uuid;

crate::states::stored_words! {
    /// What running a step does to the outside world, which decides how it is journaled
    /// (`steps.effect`).
    Effect, "step effect" {
        /// A computation or a read: result only (1 commit); re-run after a crash inside it.
        Pure => "pure",
        /// Safe to repeat with the same idempotency key: result only (1 commit); re-run after a
        /// crash with the same key.
        Idempotent => "idempotent",
        /// A side effect that must not silently repeat: intent before, result after (2
        /// commits); a crash between them is resolved by the step's [`Policy`].
        Guarded => "guarded",
    }
}

/// A future returned by a reconcile probe.
pub type ReconcileFuture =
    Pin<Box<dyn Future<Output = Result<Option<serde_json::Value>, StepError>> + Send>>;

/// A reconcile probe: asked, with the step's idempotency key, whether the effect happened.
/// `Some(value)` is recorded as the step's result; `None` means it did not happen.
pub type ReconcileProbe = Arc<dyn Fn(IdempotencyKey) -> ReconcileFuture + Send + Sync>;

/// What to do with a guarded step found in the ambiguous window (intent recorded, no result).
#[derive(Clone)]
pub enum Policy {
    /// Record the step as skipped, write an audit event, and return [`Guarded::Skipped`]. The
    /// closure is not called again.
    Skip,
    /// Call the closure again with the same idempotency key; attempts go up by one.
    Retry,
    /// Return [`crate::Error::Ambiguous`] and leave the step for an operator
    /// (`durably resolve`).
    Fail,
    /// Ask the outside world through the probe: `Some(value)` completes the step without
    /// calling the closure; `None` calls it.
    Reconcile(ReconcileProbe),
}

impl Policy {
    /// A reconcile policy from an async probe.
    pub fn reconcile<F, Fut>(probe: F) -> Self
    where
        F: Fn(IdempotencyKey) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<serde_json::Value>, StepError>> + Send + 'static,
    {
        Self::Reconcile(Arc::new(move |key| Box::pin(probe(key))))
    }

    /// Which policy this is, as stored in `steps.policy`.
    pub fn kind(&self) -> PolicyKind {
        match self {
            Self::Skip => PolicyKind::Skip,
            Self::Retry => PolicyKind::Retry,
            Self::Fail => PolicyKind::Fail,
            Self::Reconcile(_) => PolicyKind::Reconcile,
        }
    }
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind().as_str())
    }
}

/// A step's idempotency key: a UUID derived from (execution id, seq, step name), the same on
/// every retry and restart. Hand it to the remote side so it can deduplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct IdempotencyKey(pub Uuid);

impl IdempotencyKey {
    /// Derives the key: blake3 `derive_key("durably step idempotency key v1", msg)` with
    /// `msg = execution_id (16 bytes) ‖ u32_le(seq) ‖ u64_le(len(name)) ‖ name`, made a UUID
    /// version 8 the same way as scheduler fire ids.
    pub fn derive(execution_id: Uuid, seq: u32, name: &str) -> Self {
        // The context's own hash is the same for every key; hashing it once instead of per key
        // saves one of the two hash computations a derivation would make (the same bytes as `Hasher::new_derive_key`).
        static CONTEXT_KEY: std::sync::LazyLock<blake3::hazmat::ContextKey> =
            std::sync::LazyLock::new(|| {
                blake3::hazmat::hash_derive_key_context("durably step idempotency key v1")
            });
        let mut hasher =
            <blake3::Hasher as blake3::hazmat::HasherExt>::new_from_context_key(&CONTEXT_KEY);
        hasher.update(execution_id.as_bytes());
        hasher.update(&seq.to_le_bytes());
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        let hash = hasher.finalize();
        let mut bytes = [0_u8; 16];
        bytes.copy_from_slice(&hash.as_bytes()[..16]);
        Self(uuid::Builder::from_custom_bytes(bytes).into_uuid())
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A fencing token: the epoch of the lock under which a step's closure runs. It only grows
/// for an execution: a process that takes the execution over gets a higher one.
///
/// The journal fences its own writes with it. Outside systems have no such fence: a holder
/// judged dead (its lease expired, say) can still wake up and perform its effect late. An
/// outside system that records the highest token it has seen for a key, and refuses a write
/// with a lower one, closes that window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What an idempotent or guarded step's closure is handed: its idempotency key, the same on
/// every attempt and every run, and the fencing token of the run that calls it. It displays
/// as the idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepKey {
    idempotency_key: IdempotencyKey,
    fencing_token: FencingToken,
}

impl StepKey {
    /// A key as the journal hands it to a closure; for calling step closures in tests.
    pub fn new(idempotency_key: IdempotencyKey, fencing_token: FencingToken) -> Self {
        Self {
            idempotency_key,
            fencing_token,
        }
    }

    /// The key the remote side deduplicates on.
    pub fn idempotency_key(&self) -> IdempotencyKey {
        self.idempotency_key
    }

    /// The fencing token of this run; see [`FencingToken`].
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing_token
    }
}

impl fmt::Display for StepKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.idempotency_key.fmt(f)
    }
}

/// An error returned by a step's closure. It is journaled as the step's failed result and
/// returned again on replay, unless it is marked retryable, in which case the step is retried
/// under the journal's bounded retry policy first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepError {
    /// What went wrong, for people.
    pub message: String,
    /// Whether trying again may succeed.
    #[serde(default)]
    pub retryable: bool,
}

impl StepError {
    /// A permanent failure: journaled and replayed as is.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }

    /// A transient failure: retried with backoff, a bounded number of times.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StepError {}

/// The outcome of a guarded step. A skipped step has no value, and this type offers no way to
/// pretend it does: match on it, or turn it into a `Result` with [`Guarded::into_result`].
#[must_use = "a guarded step may have been skipped; match on the outcome"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guarded<T> {
    /// The effect ran (now or on an earlier run) and this is its result.
    Done(T),
    /// The step was found ambiguous after a crash and skipped under [`Policy::Skip`]; its
    /// effect may or may not have happened.
    Skipped(Skipped),
}

impl<T> Guarded<T> {
    /// `Ok(value)` when done, `Err(Skipped)` when skipped, for use with `?`.
    ///
    /// # Errors
    /// [`Skipped`] when the step was skipped.
    pub fn into_result(self) -> Result<T, Skipped> {
        match self {
            Self::Done(value) => Ok(value),
            Self::Skipped(skipped) => Err(skipped),
        }
    }

    /// Whether the step was skipped.
    pub fn is_skipped(&self) -> bool {
        matches!(self, Self::Skipped(_))
    }
}

/// A guarded step that was skipped under [`Policy::Skip`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The step's sequence number.
    pub seq: u32,
    /// The step's name.
    pub name: String,
    /// The step's idempotency key, to look the effect up by hand.
    pub idempotency_key: IdempotencyKey,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {} ({:?}) was skipped after a crash left it ambiguous (key {})",
            self.seq, self.name, self.idempotency_key
        )
    }
}

impl std::error::Error for Skipped {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_stable_and_distinct_per_step() {
        let execution = Uuid::from_u128(7);
        let key = IdempotencyKey::derive(execution, 1, "charge");
        assert_eq!(key, IdempotencyKey::derive(execution, 1, "charge"));
        assert_ne!(key, IdempotencyKey::derive(execution, 2, "charge"));
        assert_ne!(key, IdempotencyKey::derive(execution, 1, "charge2"));
        assert_eq!(key.0.get_version_num(), 8);
    }

    /// Proves that the cached context key derives the same bytes as the documented
    /// `blake3::derive_key` construction: keys already journaled (and handed to remote sides)
    /// must never change. Compares against the one-shot reference for several inputs.
    #[test]
    fn idempotency_keys_match_the_documented_derivation() {
        for (execution, seq, name) in [
            (Uuid::from_u128(7), 1, "charge"),
            (Uuid::from_u128(u128::MAX), u32::MAX, ""),
            (
                Uuid::from_u128(42),
                0,
                "a step with a longer name, spaces and ünïcödé",
            ),
        ] {
            let mut message = Vec::new();
            message.extend_from_slice(execution.as_bytes());
            message.extend_from_slice(&seq.to_le_bytes());
            message.extend_from_slice(&(name.len() as u64).to_le_bytes());
            message.extend_from_slice(name.as_bytes());
            let hash = blake3::derive_key("durably step idempotency key v1", &message);
            let mut bytes = [0_u8; 16];
            bytes.copy_from_slice(&hash[..16]);
            let expected = uuid::Builder::from_custom_bytes(bytes).into_uuid();
            assert_eq!(IdempotencyKey::derive(execution, seq, name).0, expected);
        }
    }
}
