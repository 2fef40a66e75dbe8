//! The one error type of this crate.
//!
//! Most variants come from input the caller supplied (a job id, a time, a schedule, a policy),
//! so they are not retryable: the same input fails the same way. [`Error::Journal`] wraps the
//! journal's storage errors, some of which are ([`Error::is_retryable`]). The message of each
//! variant says what happened, with the job, slot and values involved; what to do about it is
//! the caller's to say (the `durably` CLI adds it to the messages it prints).

/// What went wrong in the scheduler.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A job id was empty, too long or held a control character.
    #[error(
        "invalid job id {job_id:?}: {reason} (a job id is 1 to 200 bytes of UTF-8 with no \
         control characters)"
    )]
    InvalidJobId {
        /// The rejected id, truncated for display.
        job_id: String,
        /// Which rule the id broke.
        reason: &'static str,
    },

    /// A time lies outside the range a slot can hold.
    #[error(
        "time {millis} ms since the Unix epoch is outside the slot range \
         1970-01-01T00:00:00.000Z ..= 9999-12-31T23:59:59.999Z"
    )]
    SlotOutOfRange {
        /// The rejected time, in milliseconds since the Unix epoch (UTC).
        millis: i128,
    },

    /// A cron expression did not parse, or can never match.
    #[error(
        "invalid cron expression {expr:?}: {reason} (a cron schedule takes 5 fields, minute \
         hour day-of-month month day-of-week, or a nickname such as @daily)"
    )]
    InvalidCron {
        /// The rejected expression.
        expr: String,
        /// Why it was rejected.
        reason: String,
    },

    /// A time zone name is not in the IANA database that this build carries.
    #[error(
        "unknown time zone {name:?}: not a name of the IANA time zone database this build \
         carries (such as \"Europe/Berlin\" or \"UTC\")"
    )]
    UnknownTimeZone {
        /// The rejected name.
        name: String,
    },

    /// An interval was zero, not a whole number of milliseconds, or too long.
    #[error(
        "invalid interval: {reason} (an interval is a whole number of milliseconds, at least 1)"
    )]
    InvalidInterval {
        /// Which rule the interval broke.
        reason: String,
    },

    /// A catch-up policy had bounds that cannot work.
    #[error("invalid catch-up policy: {reason}")]
    InvalidCatchUp {
        /// Which rule the policy broke, and the allowed range.
        reason: String,
    },

    /// The cron engine failed while computing a slot.
    ///
    /// An expression that parsed should never meet this; it is a bug in the cron engine or in
    /// this crate, reported rather than hidden so that a wrong slot is never fired.
    #[error("cron evaluation of {expr:?} near {near} failed: {reason}")]
    CronEvaluation {
        /// The expression being evaluated.
        expr: String,
        /// The time the search started from, RFC 3339.
        near: String,
        /// What the cron engine reported.
        reason: String,
    },

    /// A job definition was incomplete or out of bounds (no schedule, no body, a retry bound
    /// of zero or above the maximum).
    #[error("invalid job {job:?}: {reason}")]
    InvalidJob {
        /// The job id as given.
        job: String,
        /// What is wrong and the allowed range.
        reason: String,
    },

    /// A fire was asked for a job this scheduler has not registered
    /// ([`Scheduler::register`](crate::Scheduler::register)).
    #[error("job {job:?} is not registered with this scheduler")]
    UnknownJob {
        /// The job id.
        job: String,
    },

    /// A fire was asked for a time that is not a slot of the job's schedule
    /// ([`Schedule::latest_at_or_before`](crate::Schedule::latest_at_or_before) finds the slot
    /// at or before a time).
    #[error("{slot} is not a slot of job {job:?}'s schedule")]
    NotASlot {
        /// The job id.
        job: String,
        /// The rejected time, RFC 3339.
        slot: String,
    },

    /// An explicit fire named a slot after the job's upcoming slot (the first slot after the
    /// scheduler's clock). Firing it early would run the body before its time while the slots
    /// before it are still to come; an explicit fire names a slot already due, or the upcoming
    /// one.
    #[error(
        "{slot} of job {job:?} lies after the job's upcoming slot (the scheduler's clock reads \
         {now}); an explicit fire runs only a slot at or before now, or the first one after it"
    )]
    SlotInFuture {
        /// The job id.
        job: String,
        /// The rejected slot, RFC 3339.
        slot: String,
        /// The scheduler clock's now, RFC 3339.
        now: String,
    },

    /// The scheduler is shutting down, so this fire started no new attempt. Its row stays
    /// unfinished in the ledger and the next pass (here or in another process) resumes it.
    #[error(
        "the scheduler is shutting down, so the fire started no new attempt; it stays \
         unfinished in the ledger for the next scheduler pass"
    )]
    ShuttingDown,

    /// The slot ledger contradicts itself or the journal (an unknown fire state, a finished
    /// execution whose fire is not finished).
    #[error("the scheduler ledger is inconsistent: {0}")]
    Ledger(String),

    /// The journal failed: storage, a lock, an ambiguous fire body under `Policy::Fail`.
    #[error(transparent)]
    Journal(#[from] durably_journal::Error),
}

impl Error {
    /// Whether retrying the same call later can succeed without anyone changing anything (the
    /// database was busy, say). Input errors are never retryable.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Journal(error) => error.is_retryable(),
            _ => false,
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
