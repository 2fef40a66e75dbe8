//! What registering a job and firing a slot report.

use std::fmt;

use durably_journal::StepError;
use uuid::Uuid;

use crate::catch_up::SkippedSlots;
use crate::job_id::JobId;
use crate::slot::Slot;

/// The state of a fire in the `fires` ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FireState {
    /// Registered, not yet opened.
    Pending,
    /// Opened and being driven, or abandoned by a crashed process until it is resumed.
    Running,
    /// The body ran and its result is recorded.
    Completed,
    /// Every attempt failed.
    Failed,
    /// Not run: the previous fire still ran, the body was left ambiguous by a crash and its
    /// policy is Skip, or an operator cancelled the execution.
    Skipped,
}

impl FireState {
    /// The word stored in `fires.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }

    /// Parses a stored word.
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "pending" => Self::Pending,
            "running" => Self::Running,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "skipped" => Self::Skipped,
            _ => return None,
        })
    }

    /// Whether the fire has ended for good.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Skipped)
    }
}

impl fmt::Display for FireState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one call to [`Scheduler::fire`](crate::Scheduler::fire) did. Only [`FireOutcome::Ran`]
/// and [`FireOutcome::Failed`] mean this call ran the body; the others ran nothing.
#[must_use = "a fire may have been replayed, skipped or held by another process"]
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FireOutcome {
    /// This call ran the body (or resumed it after a crash) and it succeeded.
    Ran {
        /// The fire id.
        execution_id: Uuid,
        /// The body's value.
        output: serde_json::Value,
        /// Attempts the fire took, from 1.
        attempts: u32,
        /// Whether this call resumed a fire that an earlier run had started.
        resumed: bool,
    },
    /// The fire had already finished (here or in another process); nothing ran.
    Replayed {
        /// The fire id.
        execution_id: Uuid,
        /// How it had finished.
        state: FireState,
    },
    /// Another live process (or another scheduler in this one) is running the fire now.
    LockedBy {
        /// The fire id.
        execution_id: Uuid,
        /// The holder's pid.
        pid: i64,
    },
    /// This call decided not to run the fire, and recorded why.
    Skipped {
        /// The fire id.
        execution_id: Uuid,
        /// Why, in words (as stored in `fires.reason`).
        reason: String,
    },
    /// This call ran the body and every attempt failed; the fire is recorded as failed.
    Failed {
        /// The fire id.
        execution_id: Uuid,
        /// The last attempt's error.
        error: StepError,
        /// Attempts made, from 1.
        attempts: u32,
    },
}

impl FireOutcome {
    /// The fire id.
    pub fn execution_id(&self) -> Uuid {
        match self {
            Self::Ran { execution_id, .. }
            | Self::Replayed { execution_id, .. }
            | Self::LockedBy { execution_id, .. }
            | Self::Skipped { execution_id, .. }
            | Self::Failed { execution_id, .. } => *execution_id,
        }
    }

    /// Whether this call ran the body (successfully or not).
    pub fn ran_here(&self) -> bool {
        matches!(self, Self::Ran { .. } | Self::Failed { .. })
    }
}

/// What [`Scheduler::register`](crate::Scheduler::register) found in the `jobs` table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Registration {
    /// The job was not known to this database.
    New,
    /// The job was known with the same definition.
    Unchanged {
        /// The job's high-water mark: the newest slot already handled.
        last_handled: Option<Slot>,
    },
    /// The job was known with another definition, now replaced. Slots up to `last_handled`
    /// are never fired again; fires already registered keep their execution ids and finish
    /// under the new body; later slots follow the new schedule.
    Changed {
        /// The definition it had (JSON).
        previous_definition: String,
        /// The job's high-water mark, kept across the change.
        last_handled: Option<Slot>,
    },
}

/// One fire made by a loop pass.
#[derive(Debug, Clone, PartialEq)]
pub struct FireReport {
    /// The job.
    pub job: JobId,
    /// The slot.
    pub slot: Slot,
    /// What happened.
    pub outcome: FireOutcome,
}

/// What one pass of the loop did ([`Scheduler::run_once`](crate::Scheduler::run_once)).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassReport {
    /// Fires this pass made, resumed ones included, in the order they finished.
    pub fires: Vec<FireReport>,
    /// Runs of missed slots this pass recorded as skipped, by job.
    pub skipped: Vec<(JobId, SkippedSlots)>,
    /// Errors this pass met, by job; the pass went on with the other jobs and slots.
    pub errors: Vec<(JobId, String)>,
}

impl PassReport {
    /// The slots whose body ran in this pass (not replayed, locked or skipped).
    pub fn ran(&self) -> Vec<(JobId, Slot)> {
        self.fires
            .iter()
            .filter(|fire| fire.outcome.ran_here())
            .map(|fire| (fire.job.clone(), fire.slot))
            .collect()
    }
}
