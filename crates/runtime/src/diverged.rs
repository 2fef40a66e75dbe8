//! Non-determinism: a run whose replay meets a recorded step other than the one its code calls
//! (a step added, removed, renamed or of another kind before the execution's recorded end)
//! parks its execution `stuck` at once, in the transaction that releases its lock, with the
//! diff as its status detail:
//! `{"reason": "non_determinism", "seq": N, "recorded": "pure step \"a\"", "called": ...}`.
//!
//! Retrying never helps (the same code meets the same journal), so the run is not counted as
//! a failed run to be retried: an operator deploys code that matches (a `patched` branch, or
//! the old code for this version) and `durably resume`s it, or forks it from before the
//! diff.

use durably_journal::{Execution, Release};
use serde_json::json;

use crate::error::Result;
use crate::task::Ran;

/// The `status_detail.reason` of an execution parked for non-determinism.
pub const NON_DETERMINISM_REASON: &str = "non_determinism";

/// The status detail of the execution `error` (a journal `NonDeterminism`) stopped: the seq,
/// and the recorded and called steps' kinds and names. Names, never payloads.
pub(crate) fn detail(error: &durably_journal::Error) -> serde_json::Value {
    match error {
        durably_journal::Error::NonDeterminism {
            seq,
            recorded,
            called,
            ..
        } => json!({
            "reason": NON_DETERMINISM_REASON,
            "seq": seq,
            "recorded": recorded,
            "called": called,
        }),
        other => json!({ "reason": NON_DETERMINISM_REASON, "error": other.to_string() }),
    }
}

/// Parks `execution`, whose replay diverged from its code, `stuck` with `detail`: its lock is
/// released in the same transaction, with the rows the run kept pending.
pub(crate) async fn park(execution: Execution, detail: serde_json::Value) -> Result<Ran> {
    execution
        .release_to(Release::Stuck, detail, |_| Ok(()))
        .await?;
    Ok(Ran::Diverged)
}
