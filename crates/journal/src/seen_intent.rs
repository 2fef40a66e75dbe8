//! Which intent of a step an operator looked at, so that an answer about one intent is never
//! applied to a later one.
//!
//! A step can be in the ambiguous window more than once: after an operator answers "not done"
//! the next run writes a new intent, and under `Retry` a run re-starts the same intent. Each
//! such change bumps one of two counters, so the pair names one intent of the step:
//! - `steps.attempts`, raised by every (re-)start of the step's closure;
//! - the step's `operator_resolved` events, one per operator answer.

use std::fmt;
use std::str::FromStr;

use durably_lock::{HolderRecord, Judge};
use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::ownership::status_of;
use crate::states::Status;

/// What an operator saw of a step in the ambiguous window ([`crate::Operator::seen_intent`],
/// [`crate::Inspector::seen_intent`]).
///
/// Its text form, like `a2-r0` (the step's attempts, then the operator answers it has had), is
/// what `durably show` prints and `durably resolve --seen` takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenIntent {
    attempts: u64,
    resolutions: u64,
}

impl fmt::Display for SeenIntent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a{}-r{}", self.attempts, self.resolutions)
    }
}

/// A text that is not a [`SeenIntent`] in its text form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a seen-intent token; `durably show ID` prints one, like a1-r0, for each step \
     in the ambiguous window"
)]
pub struct SeenIntentParseError(String);

impl FromStr for SeenIntent {
    type Err = SeenIntentParseError;

    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        let invalid = || SeenIntentParseError(text.to_owned());
        let (attempts, resolutions) = text
            .strip_prefix('a')
            .and_then(|rest| rest.split_once("-r"))
            .ok_or_else(invalid)?;
        let number = |digits: &str| {
            // `u64::from_str` also takes a leading `+`; a token never has one.
            if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
                return Err(invalid());
            }
            digits.parse::<u64>().map_err(|_| invalid())
        };
        Ok(Self {
            attempts: number(attempts)?,
            resolutions: number(resolutions)?,
        })
    }
}

/// Which intent step `seq` of `resource` is now; `None` when the step is not in the ambiguous
/// window (it has a result, or no row).
pub(crate) fn current(conn: &Connection, resource: &str, seq: u32) -> Result<Option<SeenIntent>> {
    let attempts: Option<i64> = conn
        .prepare_cached(
            "SELECT attempts FROM steps
             WHERE execution_id = ?1 AND seq = ?2 AND state = 'intent'",
        )?
        .query_row(params![resource, seq], |row| row.get(0))
        .optional()?;
    let Some(attempts) = attempts else {
        return Ok(None);
    };
    let resolutions: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM events
             WHERE execution_id = ?1 AND seq = ?2 AND kind = 'operator_resolved'",
        )?
        .query_row(params![resource, seq], |row| row.get(0))?;
    // Both are counts, never negative (a CHECK guards `attempts`).
    Ok(Some(SeenIntent {
        attempts: attempts.max(0) as u64,
        resolutions: resolutions.max(0) as u64,
    }))
}

/// Which intent step `seq` of execution `id` is now, with the execution's lock holder, read in
/// one transaction. An execution awaiting an operator counts as held by nobody (see below).
pub(crate) fn with_holder(
    conn: &Connection,
    id: Uuid,
    seq: u32,
) -> Result<(Option<SeenIntent>, Option<HolderRecord>)> {
    let resource = id.to_string();
    let seen = current(conn, &resource, seq)?;
    // A holder of an execution awaiting an operator cannot be running the step: its handle
    // halted at the ambiguous step, in the transaction that parked the execution, before any
    // closure ran, and no open reopens it. Only its release is left to write.
    if status_of(conn, id).ok() == Some(Status::AwaitingOperator) {
        return Ok((seen, None));
    }
    let lock = durably_lock::read(conn, &resource)?;
    Ok((seen, lock.and_then(|lock| lock.holder)))
}

/// `seen`, unless a holder that `judge` does not find dead holds the execution: it may be
/// running that very attempt, so the outside world can still change without the step changing.
/// A holder for which `is_leak` is true holds a lock under which nothing runs.
///
/// # Errors
/// [`Error::Locked`] while such a holder holds the execution.
pub(crate) fn unless_held(
    (seen, holder): (Option<SeenIntent>, Option<HolderRecord>),
    id: Uuid,
    judge: &Judge,
    is_leak: impl FnOnce(&HolderRecord) -> bool,
) -> Result<Option<SeenIntent>> {
    if let (Some(_), Some(holder)) = (seen, holder)
        && !is_leak(&holder)
        && !judge.judge(&holder).is_dead()
    {
        return Err(Error::Locked {
            execution_id: id,
            pid: holder.pid,
            since: holder.acquired_at,
        });
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::SeenIntent;

    #[test]
    fn the_text_form_reads_back_as_the_same_intent() {
        let seen = SeenIntent {
            attempts: 2,
            resolutions: 11,
        };
        assert_eq!(seen.to_string(), "a2-r11");
        assert_eq!("a2-r11".parse::<SeenIntent>(), Ok(seen));
    }

    #[test]
    fn anything_else_is_refused() {
        for text in [
            "",
            "a",
            "a1",
            "a1-r",
            "a-r1",
            "1-1",
            "a1-r1 ",
            "a+1-r0",
            "a1-r-1",
            "b1-r0",
            "a1-x0",
            "a99999999999999999999-r0",
        ] {
            let error = text.parse::<SeenIntent>().unwrap_err();
            assert!(
                error.to_string().contains("durably show"),
                "{text:?}: {error}"
            );
        }
    }
}
