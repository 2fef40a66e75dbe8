use std::fmt::Debug;

use chrono::{DateTime, SecondsFormat, Utc};

/// A source of wall-clock time, injected so tests can freeze and move it.
pub trait Clock: Send + Sync + Debug {
    /// The current time in UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's real-time clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Formats a time as the journal stores it: RFC 3339, UTC, milliseconds, `Z`
/// (`2026-11-29T13:48:28.123Z`). Such strings sort as text in time order.
pub fn format_timestamp(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parses a stored timestamp; `None` when the text is not RFC 3339.
pub fn parse_timestamp(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|time| time.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_in_the_stored_format() {
        let time = parse_timestamp("2026-11-29T13:48:28.123Z").unwrap();
        assert_eq!(format_timestamp(time), "2026-11-29T13:48:28.123Z");
        assert!(parse_timestamp("yesterday").is_none());
    }
}
