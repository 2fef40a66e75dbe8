//! Waiting in memory: every wait of the runtime that keeps its task (a short timer, a `recv`
//! with a short timeout, an observer's `get_event`) goes through [`wait_for`], which returns
//! when its condition holds, or when its instant is reached on the runtime's clock. Between
//! two looks at the condition it sleeps until the first of: the instant, a commit seen by the
//! client's watcher (another process's or this one's), or a change this process announced
//! itself ([`Client::announce_change`]). A workflow's wait also ends at once when its run is
//! asked to stop (its [`CancelSignal`]).
//!
//! Longer waits do not come here: they park (`crate::parking`), and the execution leaves
//! memory.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Datelike, Utc};

use crate::cancel::CancelSignal;
use crate::client::Client;
use crate::clock::Clock;
use crate::error::{Error, Result};

/// The default of [`crate::RuntimeBuilder::park_after`].
pub const PARK_AFTER_DEFAULT: Duration = Duration::from_secs(1);

/// The last year the journal stores: its timestamps are text with four-digit years, compared
/// as text, so a later instant would sort before earlier ones.
const YEAR_MAX: i32 = 9999;

/// What a workflow task needs to wait: the client it reads and is notified through, the clock
/// instants are measured on, and how long a wait may stay in memory before it parks.
#[derive(Debug)]
pub(crate) struct Waits {
    pub(crate) client: Client,
    pub(crate) clock: Arc<dyn Clock>,
    /// A wait whose remaining time is longer than this parks the execution.
    pub(crate) park_after: Duration,
}

impl Waits {
    /// Whether a wait of `remaining` parks instead of staying in memory.
    pub(crate) fn parks(&self, remaining: chrono::TimeDelta) -> bool {
        remaining
            .to_std()
            .is_ok_and(|remaining| remaining > self.park_after)
    }
}

/// The instant `after` past `now`, for `what` (named in the error).
///
/// # Errors
/// [`Error::InvalidOption`] when the instant cannot be represented or is past the last year
/// the journal stores; nothing is written.
pub(crate) fn instant_after(
    now: DateTime<Utc>,
    after: Duration,
    what: &str,
) -> Result<DateTime<Utc>> {
    let at = chrono::TimeDelta::from_std(after)
        .ok()
        .and_then(|after| now.checked_add_signed(after))
        .ok_or_else(|| Error::InvalidOption(format!("{what} of {after:?} is out of range")))?;
    storable(at, what)
}

/// `at`, if the journal can store it.
///
/// # Errors
/// [`Error::InvalidOption`] when `at` is past the last year the journal stores.
pub(crate) fn storable(at: DateTime<Utc>, what: &str) -> Result<DateTime<Utc>> {
    if at.year() > YEAR_MAX {
        return Err(Error::InvalidOption(format!(
            "{what} ends past the year {YEAR_MAX}, the last the journal stores"
        )));
    }
    Ok(at)
}

/// Waits until `check` returns a value, and returns it; or until `until` (if any) is reached
/// on `clock`, and returns `None`; or until `cancel` (a workflow run's signal) trips, and
/// returns [`Error::Cancelled`]. `check` runs first at once, then again after every change
/// the client hears of, so it must be cheap: one indexed read.
///
/// A change announced or committed while `check` runs is not lost: the change count is marked
/// seen before each look, so such a change ends the next sleep at once.
///
/// # Errors
/// `check`'s own error; [`Error::Cancelled`]; [`Error::Watcher`] when the watcher cannot run.
pub(crate) async fn wait_for<T>(
    client: &Client,
    clock: &dyn Clock,
    until: Option<DateTime<Utc>>,
    cancel: Option<&CancelSignal>,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    let mut changes = client.changes()?;
    loop {
        changes.borrow_and_update();
        if let Some(found) = check()? {
            return Ok(Some(found));
        }
        if until.is_some_and(|until| durably_lock::Clock::now(clock) >= until) {
            return Ok(None);
        }
        let due = async {
            match until {
                Some(until) => clock.sleep_until(until).await,
                None => std::future::pending().await,
            }
        };
        let cancelled = async {
            match cancel {
                Some(signal) => signal.stopped().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = due => {}
            changed = changes.changed() => changed.map_err(|_| crate::watcher::ended())?,
            error = cancelled => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Instants past the last storable year, or past what a timestamp holds, are refused.
    #[test]
    fn unrepresentable_instants_are_refused() {
        let now = Utc::now();
        assert!(instant_after(now, Duration::from_mins(1), "a wait").is_ok());
        for after in [Duration::MAX, Duration::from_hours(10_000 * 366 * 24)] {
            let error = instant_after(now, after, "a wait").unwrap_err();
            assert!(matches!(error, Error::InvalidOption(_)), "{error:?}");
        }
    }
}
