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

    /// A job definition was incomplete or out of bounds (no schedule, no workflow, a workflow
    /// kind or queue name that is empty, too long or holds a control character).
    #[error("invalid job {job:?}: {reason}")]
    InvalidJob {
        /// The job id as given.
        job: String,
        /// What is wrong and the allowed range.
        reason: String,
    },

    /// A fire was asked for a job this scheduler has not registered
    /// ([`Scheduler::register`](crate::Scheduler::register)), or a management call named a
    /// job no scheduler has registered in this journal.
    #[error("job {job:?} is not registered (here, or in the journal's jobs table)")]
    UnknownJob {
        /// The job id.
        job: String,
    },

    /// The job's schedule has no slot after now (an interval or a cron expression that never
    /// fires again before the end of year 9999), so registering it would fire nothing.
    #[error("job {job:?} has no slot left after {after}: its schedule never fires again")]
    NoSlotsLeft {
        /// The job id.
        job: String,
        /// The instant after which no slot lies, RFC 3339.
        after: String,
    },

    /// The job is paused ([`Scheduler::pause`](crate::Scheduler::pause)): it fires nothing,
    /// explicitly or on schedule, until it is resumed.
    #[error("job {job:?} is paused, so it fires nothing until it is resumed")]
    JobPaused {
        /// The job id.
        job: String,
    },

    /// The job was stored by a scheduler whose job bodies were closures run in its own
    /// process; it names no registered workflow, so no other process can fire it.
    #[error(
        "job {job:?} was registered with a closure body, before jobs ran registered workflows; \
         it names no workflow to start"
    )]
    JobNeedsWorkflow {
        /// The job id.
        job: String,
    },

    /// A backfill range whose start lies after its end.
    #[error("backfill range of job {job:?} starts at {from}, after its end {to}")]
    RangeReversed {
        /// The job id.
        job: String,
        /// The range's start, RFC 3339.
        from: String,
        /// The range's end, RFC 3339.
        to: String,
    },

    /// A backfill range that holds no slot of the job's schedule.
    #[error("backfill range {from} ..= {to} holds no slot of job {job:?}'s schedule")]
    EmptyRange {
        /// The job id.
        job: String,
        /// The range's start, RFC 3339.
        from: String,
        /// The range's end, RFC 3339.
        to: String,
    },

    /// A backfill range that ends after now: a backfill fires slots whose time has come.
    #[error(
        "backfill range of job {job:?} ends at {to}, after now ({now}); a backfill fires only \
         slots at or before now"
    )]
    RangeInFuture {
        /// The job id.
        job: String,
        /// The range's end, RFC 3339.
        to: String,
        /// The scheduler clock's now, RFC 3339.
        now: String,
    },

    /// A backfill range holding more slots than one backfill starts.
    #[error("backfill range {from} ..= {to} of job {job:?} holds more than {max} slots; split it")]
    TooManySlots {
        /// The job id.
        job: String,
        /// The range's start, RFC 3339.
        from: String,
        /// The range's end, RFC 3339.
        to: String,
        /// [`BACKFILL_SLOTS_MAX`](crate::BACKFILL_SLOTS_MAX).
        max: usize,
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
    /// scheduler's clock). Firing it early would start its workflow before its time while the slots
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

    /// The slot ledger contradicts itself or the journal (an unknown fire state, a finished
    /// execution whose fire is not finished).
    #[error("the scheduler ledger is inconsistent: {0}")]
    Ledger(String),

    /// The runtime refused a fire's start (an unknown workflow kind or queue, an input type
    /// other than [`Fire`](crate::Fire) registered for the kind); nothing was written.
    #[error("the runtime refused to start the fire: {0}")]
    Start(#[from] durably_runtime::Error),

    /// The journal failed: storage, a busy file.
    #[error(transparent)]
    Journal(#[from] durably_journal::Error),
}

impl Error {
    /// Whether retrying the same call later can succeed without anyone changing anything (the
    /// database was busy, say). Input errors are never retryable.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Journal(error) => error.is_retryable(),
            Self::Start(error) => error.is_retryable(),
            _ => false,
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
