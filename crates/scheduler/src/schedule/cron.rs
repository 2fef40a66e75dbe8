//! Wall-clock schedules: a cron expression read in an IANA time zone.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};

use crate::error::{Error, Result};
use crate::slot::Slot;

/// The longest cron expression accepted, in bytes.
pub const CRON_EXPR_BYTES_MAX: usize = 256;

/// A standard 5-field cron expression (`minute hour day-of-month month day-of-week`) read on the
/// wall clock of an IANA time zone, evaluated by the [`croner`] crate.
///
/// # Syntax
///
/// - Exactly 5 fields, or a nickname: `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`,
///   `@midnight`, `@hourly`. A seconds field (6 fields) and a year field (7 fields) are
///   **refused**, so `0 0 * * * *` is an error rather than a silently different schedule.
///   Slots therefore always fall on a whole minute of the zone's wall clock.
/// - Ranges, lists and steps (`1-5`, `1,15`, `*/10`, `9-17/2`), names (`MON`, `JAN`, any case),
///   `?`, and croner's extensions `L` (last), `W` (nearest weekday) and `#` (nth weekday).
/// - When both day-of-month and day-of-week are restricted, a day matches if **either**
///   matches, as in Vixie cron: `0 0 13 * FRI` fires on every 13th and on every Friday.
/// - An expression that can never match (such as `0 0 31 2 *`) is refused at construction.
/// - croner searches up to the year 4999; past that, [`next_after`] gives `None`.
///
/// # Daylight saving time
///
/// croner classifies an expression as *fixed-time* when its minute and hour fields are each
/// one plain value (`30 2 * * *`, `0 9 * * MON-FRI`), and as *interval* otherwise (`*/15 * * *
/// *`, `30 * * * *`, `0,30 2 * * *`). The two kinds behave differently at a transition. With
/// `Europe/Berlin` on 2026-03-29 (02:00 CET jumps to 03:00 CEST) and 2026-10-25 (03:00 CEST
/// falls back to 02:00 CET), as the tests check:
///
/// - **Spring forward, fixed-time:** a wall time inside the gap fires once, at the first
///   instant after the gap. `30 2 * * *` fires at 03:00 CEST (`2026-03-29T01:00:00.000Z`).
/// - **Spring forward, interval:** wall times inside the gap are skipped. `30 * * * *` fires
///   at 01:30 CET and then 03:30 CEST; `0,30 2 * * *` does not fire at all that day.
/// - **Fall back, fixed-time:** a repeated wall time fires once, at its first (summer-time)
///   occurrence. `30 2 * * *` fires at 02:30 CEST (`2026-10-25T00:30:00.000Z`) only.
/// - **Fall back, interval:** a repeated wall time fires on both occurrences. `30 * * * *`
///   fires at 02:30 CEST and again at 02:30 CET, one hour later.
///
/// Every slot is a real UTC instant, so fire ids never depend on the host's zone.
///
/// [`next_after`]: crate::Schedule::next_after
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CronSchedule {
    /// The expression as given, with runs of whitespace collapsed to one space.
    expr: String,
    tz: Tz,
    /// Boxed because a parsed pattern is large and a `Schedule` is passed around by value.
    cron: Box<croner::Cron>,
}

impl CronSchedule {
    pub(crate) fn new(expr: &str, tz_name: &str) -> Result<Self> {
        let expr = expr.split_whitespace().collect::<Vec<_>>().join(" ");
        check_characters(&expr)?;
        let tz: Tz = tz_name.parse().map_err(|_| Error::UnknownTimeZone {
            name: tz_name.chars().take(CRON_EXPR_BYTES_MAX).collect(),
        })?;
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        let cron = parser.parse(&expr).map_err(|error| Error::InvalidCron {
            expr: expr.clone(),
            reason: error.to_string(),
        })?;
        let schedule = Self {
            expr,
            tz,
            cron: Box::new(cron),
        };
        // An expression with no slot at all (31 February) would make every later call search
        // thousands of years; refuse it once, here.
        if schedule.next_after(Slot::MIN)?.is_none() {
            return Err(Error::InvalidCron {
                expr: schedule.expr,
                reason: "it never matches any date".to_owned(),
            });
        }
        Ok(schedule)
    }

    /// The expression, with runs of whitespace collapsed to one space.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The time zone whose wall clock the expression is read on.
    pub fn tz(&self) -> Tz {
        self.tz
    }

    pub(crate) fn next_after(&self, time: Slot) -> Result<Option<Slot>> {
        // Slots fall on whole seconds, so the first slot after `time` is the first one after
        // `time` rounded down to its second.
        let start = whole_second(time).with_timezone(&self.tz);
        self.found(time, self.cron.find_next_occurrence(&start, false))
    }

    pub(crate) fn latest_at_or_before(&self, time: Slot) -> Result<Option<Slot>> {
        let start = whole_second(time).with_timezone(&self.tz);
        self.found(time, self.cron.find_previous_occurrence(&start, true))
    }

    /// Turns croner's answer into a slot. Running off either end of the searchable or the slot
    /// range means there is no such slot; any other failure is reported, never guessed at.
    fn found(
        &self,
        near: Slot,
        answer: std::result::Result<DateTime<Tz>, CronError>,
    ) -> Result<Option<Slot>> {
        match answer {
            Ok(time) => Ok(Slot::from_datetime(time.with_timezone(&Utc)).ok()),
            Err(CronError::TimeSearchLimitExceeded) => Ok(None),
            Err(error) => Err(Error::CronEvaluation {
                expr: self.expr.clone(),
                near: near.to_rfc3339(),
                reason: error.to_string(),
            }),
        }
    }
}

fn whole_second(time: Slot) -> DateTime<Utc> {
    let millis = time.as_millis();
    let floored = millis - millis.rem_euclid(1000);
    // Flooring a slot stays inside the slot range, so this is a valid slot.
    Slot::from_millis(floored).unwrap_or(time).to_datetime()
}

/// Refuses over-long expressions and characters no cron syntax uses. This keeps quotes and
/// control characters out of the stored definition before croner sees the text.
fn check_characters(expr: &str) -> Result<()> {
    let reason = if expr.is_empty() {
        Some("it is empty".to_owned())
    } else if expr.len() > CRON_EXPR_BYTES_MAX {
        Some(format!("it is longer than {CRON_EXPR_BYTES_MAX} bytes"))
    } else {
        expr.chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || " *,-/?#@".contains(c)))
            .map(|c| format!("character {c:?} is not cron syntax"))
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidCron {
            expr: expr.chars().take(CRON_EXPR_BYTES_MAX).collect(),
            reason,
        }),
    }
}
