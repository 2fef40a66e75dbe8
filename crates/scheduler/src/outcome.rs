//! What registering a job and firing a slot report.

use std::fmt;

use uuid::Uuid;

use crate::catch_up::SkippedSlots;
use crate::job_id::JobId;
use crate::slot::Slot;

/// The state of a fire in the `fires` ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FireState {
    /// Registered by a scheduler from before fires were workflows, and never opened; the
    /// next loop pass starts it.
    Pending,
    /// Its execution was started and has not ended: queued, running, parked, or crashed and
    /// waiting for the runtime's recovery.
    Running,
    /// Its execution completed.
    Completed,
    /// Its execution failed.
    Failed,
    /// Not run: the previous fire still ran (overlap policy Skip), or an operator cancelled
    /// its execution.
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

/// What deciding one fire did ([`Scheduler::fire`](crate::Scheduler::fire), a loop pass, a
/// trigger or a backfill). Only [`FireOutcome::Started`] means this call started an execution.
#[must_use = "a fire may have been started before, or skipped"]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FireOutcome {
    /// This call started the fire's execution (its workflow runs in the runtime), and
    /// recorded the fire, in one transaction.
    Started {
        /// The fire id.
        execution_id: Uuid,
    },
    /// The fire was started or decided before (here or in another process); nothing was
    /// started.
    Existing {
        /// The fire id.
        execution_id: Uuid,
        /// Its state as of now.
        state: FireState,
    },
    /// This call recorded the fire as skipped, and started nothing.
    Skipped {
        /// The fire id.
        execution_id: Uuid,
        /// Why, in words (as stored in `fires.reason`).
        reason: String,
    },
}

impl FireOutcome {
    /// The fire id.
    pub fn execution_id(&self) -> Uuid {
        match self {
            Self::Started { execution_id }
            | Self::Existing { execution_id, .. }
            | Self::Skipped { execution_id, .. } => *execution_id,
        }
    }

    /// Whether this call started the fire's execution.
    pub fn started_here(&self) -> bool {
        matches!(self, Self::Started { .. })
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
    /// are never fired again; fires already started keep their executions; later slots follow
    /// the new schedule and start the new workflow.
    Changed {
        /// The definition it had (JSON).
        previous_definition: String,
        /// The job's high-water mark, kept across the change.
        last_handled: Option<Slot>,
    },
}

/// One fire made by a loop pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireReport {
    /// The job.
    pub job: JobId,
    /// The slot.
    pub slot: Slot,
    /// What happened.
    pub outcome: FireOutcome,
}

/// What one pass of the loop did ([`Scheduler::run_once`](crate::Scheduler::run_once)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Fires this pass decided: started, found started before, or recorded skipped.
    pub fires: Vec<FireReport>,
    /// Runs of missed slots this pass recorded as skipped, by job.
    pub skipped: Vec<(JobId, SkippedSlots)>,
    /// Errors this pass met, by job; the pass went on with the other jobs and slots.
    pub errors: Vec<(JobId, String)>,
}

impl PassReport {
    /// The slots whose execution this pass started (not found started before, or skipped).
    pub fn started(&self) -> Vec<(JobId, Slot)> {
        self.fires
            .iter()
            .filter(|fire| fire.outcome.started_here())
            .map(|fire| (fire.job.clone(), fire.slot))
            .collect()
    }
}
