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

use durably_db::{Connection, OptionalExtension, params};
use durably_lock::{DeathReason, HolderRecord, Judge, Judgement};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::ownership;
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

/// What [`unless_held`] judges, read in one transaction by [`with_holders`].
pub(crate) struct Found {
    /// Which intent step `seq` is now, if it is in the ambiguous window.
    seen: Option<SeenIntent>,
    /// The execution's lock holder.
    holder: Option<HolderRecord>,
    /// The execution's former holders whose locks were taken because their leases expired,
    /// newest first (read only for a step in the ambiguous window).
    lease_expired: Vec<HolderRecord>,
}

/// Which intent step `seq` of execution `id` is now, with the execution's lock holder (none
/// while it awaits an operator, see below) and its former holders whose leases expired, read in
/// one transaction.
pub(crate) fn with_holders(conn: &Connection, id: Uuid, seq: u32) -> Result<Found> {
    let resource = id.to_string();
    let seen = current(conn, &resource, seq)?;
    let lease_expired = match seen {
        Some(_) => ownership::lease_expired_holders(conn, &resource)?,
        None => Vec::new(),
    };
    // The holder of an execution awaiting an operator cannot be running the step: its handle
    // halted at the ambiguous step, in the transaction that parked the execution, before any
    // closure ran, and no open reopens it; only its release is left to write. A former holder
    // whose lease expired may still be, and stays in `lease_expired`.
    let holder = if ownership::status_of(conn, id).ok() == Some(Status::AwaitingOperator) {
        None
    } else {
        durably_lock::read(conn, &resource)?.and_then(|lock| lock.holder)
    };
    Ok(Found {
        seen,
        holder,
        lease_expired,
    })
}

/// `found`'s intent, unless a process may still be running step `seq` of execution `id`: a
/// holder that `judge` does not find dead may be running that very attempt, so the outside
/// world can still change without the step changing. So may a process that lost the execution
/// only because its lease expired, whether it still holds the lock or was taken over since: its
/// lock was forfeited, but it may be inside the step's closure, frozen or slow, and perform the
/// effect when it goes on. A holder for which `is_leak` is true holds a lock under which
/// nothing runs.
///
/// # Errors
/// [`Error::Locked`] while a live holder holds the execution,
/// [`Error::LeaseExpiredHolderAlive`] while one whose lease expired may still run.
pub(crate) fn unless_held(
    found: Found,
    id: Uuid,
    seq: u32,
    judge: &Judge,
    is_leak: impl Fn(&HolderRecord) -> bool,
) -> Result<Option<SeenIntent>> {
    let Found {
        seen,
        holder,
        lease_expired,
    } = found;
    if seen.is_none() {
        return Ok(None);
    }
    let look = Look {
        id,
        seq,
        judge,
        is_leak,
    };
    if let Some(holder) = &holder {
        look.refuse_if_holder_may_act(holder)?;
    }
    for holder in &lease_expired {
        look.refuse_if_lease_expired_may_act(holder)?;
    }
    Ok(seen)
}

/// A look at step `seq` of execution `id`: who judges whether a holder may still run it, and
/// which holders hold a lock under which nothing runs.
struct Look<'judge, L> {
    id: Uuid,
    seq: u32,
    judge: &'judge Judge,
    is_leak: L,
}

impl<L: Fn(&HolderRecord) -> bool> Look<'_, L> {
    /// Refuses the look while the lock's `holder` may be running the step.
    fn refuse_if_holder_may_act(&self, holder: &HolderRecord) -> Result<()> {
        if (self.is_leak)(holder) {
            return Ok(());
        }
        match self.judge.judge(holder) {
            Judgement::Dead(DeathReason::LeaseExpired { .. }) => {
                self.refuse_if_lease_expired_may_act(holder)
            }
            Judgement::Dead(_) => Ok(()),
            Judgement::Alive(_) | Judgement::Unknown(_) => Err(Error::Locked {
                execution_id: self.id,
                pid: holder.pid,
                since: holder.acquired_at.clone(),
                in_this_process: holder.is_process(self.judge.own_identity()),
            }),
        }
    }

    /// Refuses the look while `holder`, whose lease expired, may still be running: the lease
    /// decides who holds the lock, and only the evidence says whether the process has stopped.
    fn refuse_if_lease_expired_may_act(&self, holder: &HolderRecord) -> Result<()> {
        let evidence = self.judge.judge_evidence(holder);
        if evidence.is_dead() || (self.is_leak)(holder) {
            return Ok(());
        }
        Err(Error::LeaseExpiredHolderAlive {
            execution_id: self.id,
            seq: self.seq,
            pid: holder.pid,
            heartbeat_at: holder.heartbeat_at.clone(),
            evidence: evidence.to_string(),
        })
    }
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
