//! The one error type of this crate.
//!
//! Every variant here comes from input the caller supplied (a job id, a time, a schedule, a
//! policy), so none of them is retryable: the same input fails the same way. The message of each
//! variant says what was wrong and what to change.

/// What went wrong in the scheduler's pure computations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
