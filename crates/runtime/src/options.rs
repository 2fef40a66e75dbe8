//! [`StartOptions`]: how a start places its execution: queue, priority, delayed start,
//! deadline, deduplication, name; and [`ResumeOptions`].

use std::time::Duration;

use chrono::{DateTime, Datelike, Utc};

use crate::error::{Error, Result};
use crate::names::{self, NameKind};

/// When an execution is cancelled with reason `timeout` if it has not ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// This long after the start.
    In(Duration),
    /// At this instant, which must be in the future when the execution starts.
    At(DateTime<Utc>),
}

/// What a start does when its deduplication key names an unfinished execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDuplicate {
    /// Refuse with [`Error::Duplicate`], naming the execution that holds the key.
    Reject,
    /// Return a handle on the execution that holds the key.
    ReturnExisting,
}

/// Options of a start. The default: no queue, priority 0, runnable at once, no deadline, no
/// deduplication, named after its kind.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    pub(crate) queue: Option<String>,
    pub(crate) priority: i32,
    pub(crate) not_before: Option<DateTime<Utc>>,
    pub(crate) deadline: Option<Deadline>,
    pub(crate) dedup: Option<(String, OnDuplicate)>,
    pub(crate) name: Option<String>,
    pub(crate) allow_unregistered_kind: bool,
}

impl StartOptions {
    /// Runs the execution in `queue`, under the queue's concurrency limit. The queue must be
    /// configured by a runtime on this journal.
    #[must_use]
    pub fn queue(mut self, queue: &str) -> Self {
        self.queue = Some(queue.to_owned());
        self
    }

    /// Its priority within the queue: larger runs first; equal priorities run in start order.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Does not run it before `at`.
    #[must_use]
    pub fn not_before(mut self, at: DateTime<Utc>) -> Self {
        self.not_before = Some(at);
        self
    }

    /// Cancels it with reason `timeout` if it has not ended by `deadline`.
    #[must_use]
    pub fn deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Deduplicates on `key` within the queue: while an unfinished execution holds the key,
    /// another start with it does what `on_duplicate` says.
    #[must_use]
    pub fn dedup(mut self, key: &str, on_duplicate: OnDuplicate) -> Self {
        self.dedup = Some((key.to_owned(), on_duplicate));
        self
    }

    /// Names the execution for people (`durably ls`); the default is its kind.
    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Starts a kind no process has registered yet, instead of refusing it with
    /// [`Error::UnknownKind`]: for a producer deployed before its workers.
    #[must_use]
    pub fn allow_unregistered_kind(mut self) -> Self {
        self.allow_unregistered_kind = true;
        self
    }

    /// Checks every name and turns the deadline into an instant, as of `now`.
    pub(crate) fn checked(&self, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>> {
        if let Some(queue) = &self.queue {
            names::check(NameKind::Queue, queue)?;
        }
        if let Some((key, _)) = &self.dedup {
            names::check(NameKind::DedupKey, key)?;
        }
        if let Some(name) = &self.name {
            names::check(NameKind::ExecutionName, name)?;
        }
        self.deadline
            .map(|deadline| deadline_at(deadline, now))
            .transpose()
    }
}

/// Options of a resume ([`crate::Client::resume`]). The default: no deadline (the old one is
/// cleared, since it has passed or is why the execution was cancelled).
#[derive(Debug, Clone, Copy, Default)]
pub struct ResumeOptions {
    pub(crate) deadline: Option<Deadline>,
}

impl ResumeOptions {
    /// Cancels the resumed execution with reason `timeout` if it has not ended by `deadline`.
    #[must_use]
    pub fn deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The deadline as an instant, as of `now`.
    pub(crate) fn checked(self, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>> {
        self.deadline
            .map(|deadline| deadline_at(deadline, now))
            .transpose()
    }
}

/// The instant of `deadline` as of `now`; refused when it is not in the future or not
/// representable.
fn deadline_at(deadline: Deadline, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    let at = match deadline {
        Deadline::In(after) => chrono::TimeDelta::from_std(after)
            .ok()
            .and_then(|after| now.checked_add_signed(after))
            .ok_or_else(|| {
                Error::InvalidOption(format!("a deadline {after:?} from now is out of range"))
            })?,
        Deadline::At(at) => at,
    };
    if at.year() > 9999 {
        return Err(Error::InvalidOption(format!(
            "a deadline {deadline:?} is past the year 9999, the last the journal stores"
        )));
    }
    if at <= now {
        return Err(Error::InvalidOption(format!(
            "the deadline {} is not after now ({})",
            durably_lock::format_timestamp(at),
            durably_lock::format_timestamp(now)
        )));
    }
    Ok(at)
}
