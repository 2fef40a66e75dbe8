//! A fixed interval on a grid anchored at one slot.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::slot::{SLOT_MILLIS_MAX, Slot};

/// The longest interval accepted, in milliseconds: the whole slot range. A longer interval
/// could never give a second slot.
pub const INTERVAL_MILLIS_MAX: i64 = SLOT_MILLIS_MAX;

/// Slots at `anchor + k * every` for every integer `k`, negative ones included, that lands in
/// the slot range.
///
/// The grid lives on UTC milliseconds, so an interval ignores time zones and daylight saving
/// time: `every` 24 h is always 86 400 000 ms, and a daily slot drifts by an hour in local
/// time across a DST change. Use [`Schedule::cron`](crate::Schedule::cron) for wall-clock
/// schedules.
///
/// Invariant: 1 ≤ `every_ms` ≤ [`INTERVAL_MILLIS_MAX`], checked by the only constructor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IntervalSchedule {
    every_ms: i64,
    anchor: Slot,
}

impl IntervalSchedule {
    pub(crate) fn new(every: Duration, anchor: Slot) -> Result<Self> {
        let reason = if every.is_zero() {
            Some("it is zero".to_owned())
        } else if !every.subsec_nanos().is_multiple_of(1_000_000) {
            Some(format!("{every:?} is not a whole number of milliseconds"))
        } else if every.as_millis() > INTERVAL_MILLIS_MAX as u128 {
            Some(format!(
                "{every:?} is longer than the slot range (years 1970 to 9999)"
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::InvalidInterval { reason });
        }
        // In range by the check just above.
        let every_ms = every.as_millis() as i64;
        debug_assert!((1..=INTERVAL_MILLIS_MAX).contains(&every_ms));
        Ok(Self { every_ms, anchor })
    }

    /// The distance between two slots.
    pub fn every(&self) -> Duration {
        Duration::from_millis(self.every_ms as u64)
    }

    /// The distance between two slots, in milliseconds.
    pub fn every_ms(&self) -> i64 {
        self.every_ms
    }

    /// The slot the grid is anchored at.
    pub fn anchor(&self) -> Slot {
        self.anchor
    }

    /// The grid index `k` of the latest grid point at or before `time`.
    fn index_at_or_before(&self, time: Slot) -> i128 {
        let offset = i128::from(time.as_millis()) - i128::from(self.anchor.as_millis());
        offset.div_euclid(i128::from(self.every_ms))
    }

    fn point(&self, index: i128) -> i128 {
        i128::from(self.anchor.as_millis()) + index * i128::from(self.every_ms)
    }

    pub(crate) fn next_after(&self, time: Slot) -> Option<Slot> {
        let next = self.point(self.index_at_or_before(time) + 1);
        debug_assert!(next > i128::from(time.as_millis()));
        Slot::from_wide_millis(next).ok()
    }

    pub(crate) fn latest_at_or_before(&self, time: Slot) -> Option<Slot> {
        let latest = self.point(self.index_at_or_before(time));
        debug_assert!(latest <= i128::from(time.as_millis()));
        Slot::from_wide_millis(latest).ok()
    }

    /// How many slots lie in `(after_exclusive, until_inclusive]`, computed without iterating.
    pub(crate) fn count_between(&self, after_exclusive: Slot, until_inclusive: Slot) -> u64 {
        if until_inclusive <= after_exclusive {
            return 0;
        }
        let count =
            self.index_at_or_before(until_inclusive) - self.index_at_or_before(after_exclusive);
        // Both slots are in range, so the count is at most the range length in milliseconds.
        u64::try_from(count).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    //! Proves the interval grid arithmetic against a plain model: slots are exactly the
    //! integers `anchor + k * every`, checked by brute force over a small range.

    use super::*;

    fn slot(millis: i64) -> Slot {
        Slot::from_millis(millis).unwrap()
    }

    #[test]
    fn rejects_zero_fractional_and_huge_intervals() {
        for every in [
            Duration::ZERO,
            Duration::from_micros(1),
            Duration::from_micros(1_500),
            Duration::from_millis(INTERVAL_MILLIS_MAX as u64 + 1),
            Duration::MAX,
        ] {
            let error = IntervalSchedule::new(every, slot(0)).unwrap_err();
            assert!(matches!(error, Error::InvalidInterval { .. }), "{every:?}");
        }
        assert!(IntervalSchedule::new(Duration::from_millis(1), slot(0)).is_ok());
        assert!(
            IntervalSchedule::new(Duration::from_millis(INTERVAL_MILLIS_MAX as u64), slot(0))
                .is_ok()
        );
    }

    #[test]
    fn matches_brute_force_model_on_both_sides_of_the_anchor() {
        let schedule = IntervalSchedule::new(Duration::from_millis(7), slot(50)).unwrap();
        let grid: Vec<i64> = (0..200)
            .filter(|m| (m - 50_i64).rem_euclid(7) == 0)
            .collect();
        for t in 0..190 {
            let next = grid.iter().copied().find(|&g| g > t);
            let latest = grid.iter().copied().rev().find(|&g| g <= t);
            assert_eq!(
                schedule.next_after(slot(t)).map(Slot::as_millis),
                next,
                "t={t}"
            );
            assert_eq!(
                schedule.latest_at_or_before(slot(t)).map(Slot::as_millis),
                latest
            );
            for u in t..190 {
                let model = grid.iter().filter(|&&g| g > t && g <= u).count() as u64;
                assert_eq!(
                    schedule.count_between(slot(t), slot(u)),
                    model,
                    "t={t} u={u}"
                );
            }
        }
    }

    #[test]
    fn range_edges_give_none_instead_of_overflow() {
        let schedule = IntervalSchedule::new(Duration::from_millis(10), slot(5)).unwrap();
        assert_eq!(schedule.latest_at_or_before(slot(3)), None);
        let huge =
            IntervalSchedule::new(Duration::from_millis(INTERVAL_MILLIS_MAX as u64), Slot::MAX)
                .unwrap();
        assert_eq!(huge.next_after(Slot::MAX), None);
        assert_eq!(huge.next_after(Slot::MIN), Some(Slot::MAX));
        // The grid point one step before the anchor is the epoch itself.
        assert_eq!(huge.latest_at_or_before(Slot::MIN), Some(Slot::MIN));
        assert_eq!(huge.count_between(Slot::MIN, Slot::MAX), 1);
    }
}
