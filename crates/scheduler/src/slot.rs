//! A nominal time on a schedule's grid.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::error::{Error, Result};

/// The earliest slot: 1970-01-01T00:00:00.000Z, in milliseconds since the Unix epoch.
pub const SLOT_MILLIS_MIN: i64 = 0;

/// The latest slot: 9999-12-31T23:59:59.999Z, in milliseconds since the Unix epoch.
pub const SLOT_MILLIS_MAX: i64 = 253_402_300_799_999;

/// A scheduled time: the nominal instant on a schedule's grid, never the time a fire happened
/// to start.
///
/// Stored as milliseconds since the Unix epoch in UTC, so a slot names the same instant in
/// every time zone and the fire id derived from it does not depend on the host's zone.
///
/// Invariant: [`SLOT_MILLIS_MIN`] ≤ millis ≤ [`SLOT_MILLIS_MAX`] (years 1970 to 9999), checked
/// by every constructor. Inside that range every slot converts to a `DateTime<Utc>` and formats
/// as a four-digit-year RFC 3339 string, so slot strings sort as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Slot(i64);

impl Slot {
    /// The earliest representable slot, 1970-01-01T00:00:00.000Z.
    pub const MIN: Slot = Slot(SLOT_MILLIS_MIN);

    /// The latest representable slot, 9999-12-31T23:59:59.999Z.
    pub const MAX: Slot = Slot(SLOT_MILLIS_MAX);

    /// A slot from milliseconds since the Unix epoch, UTC.
    ///
    /// # Errors
    ///
    /// [`Error::SlotOutOfRange`] if `millis` is before 1970 or after the end of 9999.
    pub fn from_millis(millis: i64) -> Result<Self> {
        if (SLOT_MILLIS_MIN..=SLOT_MILLIS_MAX).contains(&millis) {
            Ok(Self(millis))
        } else {
            Err(Error::SlotOutOfRange {
                millis: i128::from(millis),
            })
        }
    }

    /// A slot from a UTC time. Precision below a millisecond is truncated.
    ///
    /// # Errors
    ///
    /// [`Error::SlotOutOfRange`] if `time` is before 1970 or after the end of 9999.
    pub fn from_datetime(time: DateTime<Utc>) -> Result<Self> {
        Self::from_millis(time.timestamp_millis())
    }

    /// A slot `millis` milliseconds since the Unix epoch, given as a wide integer so callers can
    /// do grid arithmetic without overflow and check the result once.
    pub(crate) fn from_wide_millis(millis: i128) -> Result<Self> {
        match i64::try_from(millis) {
            Ok(narrow) => Self::from_millis(narrow),
            Err(_) => Err(Error::SlotOutOfRange { millis }),
        }
    }

    /// Milliseconds since the Unix epoch, UTC.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// The slot as a UTC time.
    pub fn to_datetime(self) -> DateTime<Utc> {
        // The invariant keeps every slot inside chrono's range, so the fallback never runs; it
        // exists so that this function cannot panic.
        DateTime::from_timestamp_millis(self.0).unwrap_or(DateTime::UNIX_EPOCH)
    }

    /// The slot in the journal's timestamp format: RFC 3339, milliseconds, `Z`, for example
    /// `2026-01-01T00:00:00.000Z`.
    pub fn to_rfc3339(self) -> String {
        self.to_datetime()
            .to_rfc3339_opts(SecondsFormat::Millis, true)
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl TryFrom<DateTime<Utc>> for Slot {
    type Error = Error;

    fn try_from(time: DateTime<Utc>) -> Result<Self> {
        Self::from_datetime(time)
    }
}

impl<'de> serde::Deserialize<'de> for Slot {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let millis = i64::deserialize(deserializer)?;
        Self::from_millis(millis).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    //! Proves the slot range invariant at both edges and the exact text format the journal
    //! stores, by converting edge values both ways.

    use super::*;

    #[test]
    fn range_edges_are_the_documented_instants() {
        assert_eq!(Slot::MIN.to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Slot::MAX.to_rfc3339(), "9999-12-31T23:59:59.999Z");
        assert!(Slot::from_millis(-1).is_err());
        assert!(Slot::from_millis(SLOT_MILLIS_MAX + 1).is_err());
        assert!(Slot::from_millis(i64::MIN).is_err());
        assert!(Slot::from_millis(i64::MAX).is_err());
        assert!(Slot::from_wide_millis(i128::MAX).is_err());
    }

    #[test]
    fn formats_with_milliseconds_and_z() {
        let slot = Slot::from_millis(1_767_225_600_000).unwrap();
        assert_eq!(slot.to_rfc3339(), "2026-01-01T00:00:00.000Z");
        assert_eq!(slot.to_string(), "2026-01-01T00:00:00.000Z");
        let slot = Slot::from_millis(1_795_960_108_123).unwrap();
        assert_eq!(slot.to_rfc3339(), "2026-11-29T13:48:28.123Z");
    }

    #[test]
    fn datetime_round_trip_truncates_below_a_millisecond() {
        let time = DateTime::parse_from_rfc3339("2026-03-29T01:00:00.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let slot = Slot::from_datetime(time).unwrap();
        assert_eq!(slot.as_millis(), 1_774_746_000_123);
        assert_eq!(slot.to_datetime().timestamp_subsec_micros(), 123_000);
        let before_1970 = DateTime::parse_from_rfc3339("1969-12-31T23:59:59.999Z").unwrap();
        assert!(Slot::from_datetime(before_1970.with_timezone(&Utc)).is_err());
    }
}
