//! When a job fires: a grid of slots, either a fixed interval or a cron expression.

mod cron;
mod interval;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use cron::{CRON_EXPR_BYTES_MAX, CronSchedule};
pub use interval::{INTERVAL_MILLIS_MAX, IntervalSchedule};

use crate::catch_up::SlotCount;
use crate::error::Result;
use crate::slot::Slot;

/// The version written into every [`Schedule::definition`]. It changes only if the definition
/// format changes, which would make every job look redefined.
const DEFINITION_VERSION: u32 = 1;

/// The grid of slots a job fires on.
///
/// Build one with [`Schedule::interval`] or [`Schedule::cron`]; the variants hold validated
/// schedules whose fields are private, so a `Schedule` is always well-formed.
///
/// Every query takes and returns [`Slot`]s, so the answer depends only on the schedule and the
/// instant asked about, never on the host's time zone or on when the question is asked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Schedule {
    /// Slots every fixed number of milliseconds, on a grid through an anchor slot.
    Interval(IntervalSchedule),
    /// Slots where a 5-field cron expression matches the wall clock of a time zone.
    Cron(CronSchedule),
}

impl Schedule {
    /// Slots at `anchor + k * every` for every integer `k` (negative ones included) that lands
    /// in the slot range. Time zones and DST do not apply; see [`IntervalSchedule`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInterval`](crate::Error::InvalidInterval) if `every` is zero, is not a
    /// whole number of milliseconds, or is longer than [`INTERVAL_MILLIS_MAX`].
    pub fn interval(every: Duration, anchor: Slot) -> Result<Self> {
        IntervalSchedule::new(every, anchor).map(Self::Interval)
    }

    /// Slots where the 5-field cron expression `expr` matches the wall clock of the IANA time
    /// zone `tz` (for example `"Europe/Berlin"` or `"UTC"`). See [`CronSchedule`] for the
    /// syntax and the exact behaviour at daylight-saving transitions.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidCron`](crate::Error::InvalidCron) if `expr` is empty, longer than
    ///   [`CRON_EXPR_BYTES_MAX`], has other than 5 fields, does not parse, or never matches.
    /// - [`Error::UnknownTimeZone`](crate::Error::UnknownTimeZone) if `tz` is not an IANA zone
    ///   name known to this build.
    pub fn cron(expr: &str, tz: &str) -> Result<Self> {
        CronSchedule::new(expr, tz).map(Self::Cron)
    }

    /// The first slot strictly after `time`, or `None` if the schedule has no later slot in
    /// the slot range.
    ///
    /// # Errors
    ///
    /// [`Error::CronEvaluation`](crate::Error::CronEvaluation) if the cron engine fails, which
    /// would be a bug in it; the interval variant never fails.
    pub fn next_after(&self, time: Slot) -> Result<Option<Slot>> {
        match self {
            Self::Interval(interval) => Ok(interval.next_after(time)),
            Self::Cron(cron) => cron.next_after(time),
        }
    }

    /// The last slot at or before `time`, or `None` if the schedule has no slot that early in
    /// the slot range.
    ///
    /// # Errors
    ///
    /// As for [`Schedule::next_after`].
    pub fn latest_at_or_before(&self, time: Slot) -> Result<Option<Slot>> {
        match self {
            Self::Interval(interval) => Ok(interval.latest_at_or_before(time)),
            Self::Cron(cron) => cron.latest_at_or_before(time),
        }
    }

    /// The slots in `(after_exclusive, until_inclusive]`, ascending, at most `slots_max` of
    /// them: the earliest ones if there are more. Work and memory are bounded by `slots_max`.
    ///
    /// # Errors
    ///
    /// As for [`Schedule::next_after`].
    pub fn slots_between(
        &self,
        after_exclusive: Slot,
        until_inclusive: Slot,
        slots_max: usize,
    ) -> Result<Vec<Slot>> {
        let mut slots = Vec::new();
        let mut cursor = after_exclusive;
        while slots.len() < slots_max {
            match self.next_after(cursor)? {
                Some(slot) if slot <= until_inclusive => {
                    debug_assert!(slot > cursor, "slots must strictly increase");
                    slots.push(slot);
                    cursor = slot;
                }
                _ => break,
            }
        }
        Ok(slots)
    }

    /// How many slots lie in `(after_exclusive, until_inclusive]`. An interval is counted
    /// exactly by arithmetic; a cron schedule is walked, at most `counted_max` steps.
    pub(crate) fn count_between(
        &self,
        after_exclusive: Slot,
        until_inclusive: Slot,
        counted_max: u64,
    ) -> Result<SlotCount> {
        if let Self::Interval(interval) = self {
            return Ok(SlotCount::Exact(
                interval.count_between(after_exclusive, until_inclusive),
            ));
        }
        let mut count = 0_u64;
        let mut cursor = after_exclusive;
        while let Some(slot) = self.next_after(cursor)? {
            if slot > until_inclusive {
                return Ok(SlotCount::Exact(count));
            }
            if count == counted_max {
                return Ok(SlotCount::AtLeast(count));
            }
            count += 1;
            cursor = slot;
        }
        Ok(SlotCount::Exact(count))
    }

    /// A canonical, versioned JSON text of the schedule, stable across releases. Two schedules
    /// have the same definition exactly when they were built from the same interval and anchor,
    /// or from the same expression (up to whitespace) and zone name.
    ///
    /// ```text
    /// {"version":1,"kind":"interval","every_ms":3600000,"anchor":"2026-01-01T00:00:00.000Z"}
    /// {"version":1,"kind":"cron","expr":"30 2 * * *","tz":"Europe/Berlin"}
    /// ```
    pub fn definition(&self) -> String {
        // No escaping is needed: expressions are checked to hold only cron syntax characters,
        // zone names come from the IANA table, and slots format as plain RFC 3339.
        match self {
            Self::Interval(interval) => format!(
                r#"{{"version":{DEFINITION_VERSION},"kind":"interval","every_ms":{},"anchor":"{}"}}"#,
                interval.every_ms(),
                interval.anchor().to_rfc3339(),
            ),
            Self::Cron(cron) => format!(
                r#"{{"version":{DEFINITION_VERSION},"kind":"cron","expr":"{}","tz":"{}"}}"#,
                cron.expr(),
                cron.tz().name(),
            ),
        }
    }

    /// The blake3 hash of [`Schedule::definition`], as 64 lowercase hex digits. Store it with a
    /// job to notice when the job's schedule has been changed.
    pub fn definition_hash(&self) -> String {
        blake3::hash(self.definition().as_bytes())
            .to_hex()
            .to_string()
    }
}
