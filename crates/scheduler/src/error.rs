//! The one error type of this crate.
//!
//! Most variants come from input the caller supplied (a job id, a time, a schedule, a policy),
//! so they are not retryable: the same input fails the same way. [`Error::Journal`] wraps the
//! journal's storage errors, some of which are ([`Error::is_retryable`]). The message of each
//! variant says what was wrong and what to change.

/// What went wrong in the scheduler.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A job id was empty, too long or held a control character.
    #[error("invalid job id {job_id:?}: {reason}; use 1 to 200 bytes of printable UTF-8")]
    InvalidJobId {
        /// The rejected id, truncated for display.
        job_id: String,
        /// Which rule the id broke.
        reason: &'static str,
    },

    /// A time lies outside the range a slot can hold.
    #[error(
        "time {millis} ms since the Unix epoch is outside the slot range \
         1970-01-01T00:00:00.000Z ..= 9999-12-31T23:59:59.999Z; pass a time inside it"
    )]
    SlotOutOfRange {
        /// The rejected time, in milliseconds since the Unix epoch (UTC).
        millis: i128,
    },

    /// A cron expression did not parse, or can never match.
    #[error(
        "invalid cron expression {expr:?}: {reason}; use 5 fields \
         (minute hour day-of-month month day-of-week) or a nickname such as @daily"
    )]
    InvalidCron {
        /// The rejected expression.
        expr: String,
        /// Why it was rejected.
        reason: String,
    },

    /// A time zone name is not in the IANA database that this build carries.
    #[error("unknown time zone {name:?}; use an IANA name such as \"Europe/Berlin\" or \"UTC\"")]
    UnknownTimeZone {
        /// The rejected name.
        name: String,
    },

    /// An interval was zero, not a whole number of milliseconds, or too long.
    #[error("invalid interval: {reason}; use a whole number of milliseconds from 1 ms up")]
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
    /// This should not happen for an expression that parsed; it is reported rather than
    /// hidden so that a wrong slot is never fired.
    #[error("cron evaluation of {expr:?} near {near} failed: {reason}; please report this bug")]
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

    /// A fire was asked for a job this scheduler has not registered.
    #[error("job {job:?} is not registered with this scheduler; call `register` first")]
    UnknownJob {
        /// The job id.
        job: String,
    },

    /// A fire was asked for a time that is not a slot of the job's schedule.
    #[error(
        "{slot} is not a slot of job {job:?}'s schedule; fire only nominal grid times \
         (`Schedule::latest_at_or_before` finds the slot at or before a time)"
    )]
    NotASlot {
        /// The job id.
        job: String,
        /// The rejected time, RFC 3339.
        slot: String,
    },

    /// An explicit fire named a slot later than the scheduler's clock. Firing it early would
    /// run the body before its time, and the loop would still have to handle the slots before
    /// it; explicit fires only ever name slots that are already due.
    #[error(
        "{slot} of job {job:?} is later than now ({now}); an explicit fire may name only a slot          at or before now, so wait for it or let the loop fire it"
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
        "the scheduler is shutting down; the fire was left unfinished and will be resumed by          the next scheduler pass"
    )]
    ShuttingDown,

    /// The slot ledger holds something this build cannot read (an unknown fire state).
    #[error(
        "the scheduler ledger is inconsistent: {0}; inspect the `fires` table and report a bug"
    )]
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
