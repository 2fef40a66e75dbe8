//! The stored form of a timestamp: RFC 3339, UTC, milliseconds, `Z`. SQLite stores this text;
//! the PostgreSQL side converts it at its edge, so both read back the same text.

use chrono::{DateTime, SecondsFormat, Utc};

/// Formats a time as the journal stores it: `2026-11-29T13:48:28.123Z`.
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
