//! Proves the catch-up guarantees: each policy fires the documented slots after downtime, no
//! slot at or before the last handled one is ever returned (even when the clock moves back),
//! work stays bounded after years of downtime, and across a long simulated run with clock
//! jumps every slot is either fired or reported skipped exactly once. The run is checked
//! against a model that lists the interval grid directly.

use std::time::Duration;

use super::*;

const MINUTE_MS: i64 = 60_000;
/// 2026-01-01T00:00:00Z, the anchor of the test grid.
const T0_MS: i64 = 1_767_225_600_000;

fn slot(millis: i64) -> Slot {
    Slot::from_millis(millis).unwrap()
}

/// The `k`th slot of a grid with one slot a minute from `T0_MS`.
fn s(k: i64) -> Slot {
    slot(T0_MS + k * MINUTE_MS)
}

fn every_minute() -> Schedule {
    Schedule::interval(Duration::from_mins(1), s(0)).unwrap()
}

fn all(window: Duration, max: usize) -> CatchUp {
    CatchUp::All { window, max }
}

#[test]
fn down_across_ten_slots_fires_per_policy() {
    // Slot 0 was handled; the scheduler comes back 30 s after slot 10, so slots 1..=10 passed.
    let schedule = every_minute();
    let now = slot(s(10).as_millis() + 30_000);
    let due = |policy| due_slots(&schedule, Some(s(0)), now, &policy).unwrap();

    let skip = due(CatchUp::Skip);
    assert!(skip.fire.is_empty());
    let skipped = Some(SkippedSlots {
        first: s(1),
        last: s(10),
        count: SlotCount::Exact(10),
    });
    assert_eq!(skip.skipped, skipped);
    assert_eq!(skip.handled_through, Some(s(10)));
    assert_eq!(skip.next, Some(s(11)));

    let latest = due(CatchUp::Latest);
    assert_eq!(latest.fire, [s(10)]);
    let skipped = Some(SkippedSlots {
        first: s(1),
        last: s(9),
        count: SlotCount::Exact(9),
    });
    assert_eq!(latest.skipped, skipped);

    let capped = due(all(Duration::from_hours(1), 3));
    assert_eq!(capped.fire, [s(8), s(9), s(10)]);
    let skipped = Some(SkippedSlots {
        first: s(1),
        last: s(7),
        count: SlotCount::Exact(7),
    });
    assert_eq!(capped.skipped, skipped);

    let uncapped = due(all(Duration::from_hours(1), 50));
    assert_eq!(uncapped.fire, (1..=10).map(s).collect::<Vec<_>>());
    assert_eq!(uncapped.skipped, None);

    // A window of 5.5 minutes before now reaches back to slot 5 exactly.
    let windowed = due(all(Duration::from_secs(330), 50));
    assert_eq!(windowed.fire, (5..=10).map(s).collect::<Vec<_>>());
    assert_eq!(
        windowed.skipped.map(|skipped| skipped.count),
        Some(SlotCount::Exact(4))
    );
}

#[test]
fn on_time_slot_fires_under_every_policy() {
    let schedule = every_minute();
    let now = slot(s(10).as_millis() + 2_000);
    for policy in [
        CatchUp::Skip,
        CatchUp::Latest,
        all(Duration::from_mins(5), 10),
    ] {
        let due = due_slots(&schedule, Some(s(9)), now, &policy).unwrap();
        assert_eq!(due.fire, [s(10)], "{policy:?}");
        assert_eq!(due.skipped, None);
        assert_eq!(due.handled_through, Some(s(10)));
    }
}

#[test]
fn skip_refuses_a_slot_later_than_its_grace() {
    let schedule = Schedule::interval(Duration::from_hours(1), s(0)).unwrap();
    let hour_ms = 3_600_000;
    let grace_edge = slot(T0_MS + hour_ms + SKIP_LATENESS_MS_MAX);
    let due = due_slots(&schedule, Some(s(0)), grace_edge, &CatchUp::Skip).unwrap();
    assert_eq!(due.fire, [slot(T0_MS + hour_ms)]);
    let too_late = slot(grace_edge.as_millis() + 1);
    let due = due_slots(&schedule, Some(s(0)), too_late, &CatchUp::Skip).unwrap();
    assert!(due.fire.is_empty());
    assert_eq!(
        due.skipped.map(|skipped| skipped.count),
        Some(SlotCount::Exact(1))
    );
}

#[test]
fn first_registration_fires_at_most_the_latest_slot() {
    let schedule = every_minute();
    let now = slot(s(10).as_millis() + 30_000);
    let due = |policy| due_slots(&schedule, None, now, &policy).unwrap();
    assert!(due(CatchUp::Skip).fire.is_empty());
    assert_eq!(due(CatchUp::Latest).fire, [s(10)]);
    assert!(due(all(Duration::from_secs(10), 5)).fire.is_empty());
    assert_eq!(due(all(Duration::from_secs(30), 5)).fire, [s(10)]);
    for policy in [
        CatchUp::Skip,
        CatchUp::Latest,
        all(Duration::from_mins(1), 5),
    ] {
        let answer = due(policy);
        assert_eq!(
            answer.skipped, None,
            "nothing before registration counts as missed"
        );
        assert_eq!(answer.handled_through, Some(s(10)));
    }
}

#[test]
fn clock_moving_backward_fires_nothing_at_or_before_last_handled() {
    let schedule = every_minute();
    for now in [s(10), s(5), slot(s(10).as_millis() + 59_999), Slot::MIN] {
        for policy in [
            CatchUp::Skip,
            CatchUp::Latest,
            all(Duration::from_hours(24), 100),
        ] {
            let due = due_slots(&schedule, Some(s(10)), now, &policy).unwrap();
            assert!(due.fire.is_empty(), "{now} {policy:?}");
            assert_eq!(due.skipped, None);
            assert_eq!(due.handled_through, Some(s(10)));
        }
    }
}

#[test]
fn huge_downtime_stays_bounded() {
    // One slot a millisecond, down from 1970 to the end of 9999: about 2.5e14 missed slots.
    let schedule = Schedule::interval(Duration::from_millis(1), Slot::MIN).unwrap();
    let policy = all(Duration::from_hours(365 * 24), CATCH_UP_SLOTS_MAX);
    let due = due_slots(&schedule, Some(Slot::MIN), Slot::MAX, &policy).unwrap();
    assert_eq!(due.fire.len(), CATCH_UP_SLOTS_MAX);
    assert_eq!(due.fire.last(), Some(&Slot::MAX));
    let last_skipped = (Slot::MAX.as_millis() - CATCH_UP_SLOTS_MAX as i64) as u64;
    assert_eq!(
        due.skipped.map(|skipped| skipped.count),
        Some(SlotCount::Exact(last_skipped))
    );

    // A cron job every minute, down for 50 years: counting stops at the named limit.
    let schedule = Schedule::cron("* * * * *", "UTC").unwrap();
    let since = Some(slot(0));
    let due = due_slots(&schedule, since, slot(T0_MS), &CatchUp::Latest).unwrap();
    assert_eq!(due.fire, [slot(T0_MS)]);
    let skipped = due.skipped.unwrap();
    assert_eq!(
        (skipped.first, skipped.last),
        (slot(MINUTE_MS), slot(T0_MS - MINUTE_MS))
    );
    assert_eq!(skipped.count, SlotCount::AtLeast(SKIPPED_SLOTS_COUNTED_MAX));
}

#[test]
fn invalid_policies_are_refused() {
    let schedule = every_minute();
    for policy in [
        all(Duration::ZERO, 5),
        all(Duration::from_mins(1), 0),
        all(Duration::from_mins(1), CATCH_UP_SLOTS_MAX + 1),
    ] {
        let error = due_slots(&schedule, None, s(3), &policy).unwrap_err();
        assert!(matches!(error, Error::InvalidCatchUp { .. }), "{policy:?}");
    }
}

#[test]
fn overlap_policy() {
    assert!(Overlap::Skip.permits(false));
    assert!(!Overlap::Skip.permits(true));
    assert!(Overlap::Allow.permits(true));
    assert!(Overlap::Allow.permits(false));
}

#[test]
fn long_run_with_clock_jumps_accounts_for_every_slot_once() {
    // A simulated scheduler calls `due_slots` at pseudo-random times, sometimes jumping the
    // clock back. Each slot of the grid from the first handled one up to the last must be
    // fired or skipped exactly once, and fired slots must strictly increase.
    let schedule = Schedule::interval(Duration::from_secs(7), s(0)).unwrap();
    for policy in [
        CatchUp::Skip,
        CatchUp::Latest,
        all(Duration::from_mins(1), 4),
    ] {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut now_ms = T0_MS;
        let mut handled = None;
        let mut accounted: Vec<i64> = Vec::new();
        let mut first_handled = None;
        let mut fired_count = 0;
        for _ in 0..2_000 {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let step_ms = (seed >> 33) as i64 % 90_000;
            now_ms += if seed.is_multiple_of(10) {
                -step_ms
            } else {
                step_ms
            };
            let due = due_slots(&schedule, handled, slot(now_ms), &policy).unwrap();
            if handled.is_none() {
                first_handled = due.handled_through;
                accounted.extend(due.fire.iter().map(|slot| slot.as_millis()));
            } else if let Some(skipped) = due.skipped {
                let SlotCount::Exact(count) = skipped.count else {
                    panic!("interval is exact")
                };
                let grid = schedule
                    .slots_between(slot(skipped.first.as_millis() - 1), skipped.last, 100_000)
                    .unwrap();
                assert_eq!(grid.len() as u64, count);
                accounted.extend(grid.iter().map(|slot| slot.as_millis()));
                accounted.extend(due.fire.iter().map(|slot| slot.as_millis()));
            } else {
                accounted.extend(due.fire.iter().map(|slot| slot.as_millis()));
            }
            fired_count += due.fire.len();
            handled = due.handled_through;
        }
        let (first, last) = (first_handled.unwrap(), handled.unwrap());
        let model: Vec<i64> = schedule
            .slots_between(first, last, 100_000)
            .unwrap()
            .iter()
            .map(|slot| slot.as_millis())
            .collect();
        let after_first: Vec<i64> = accounted
            .iter()
            .copied()
            .filter(|&m| m > first.as_millis())
            .collect();
        assert!(
            accounted.windows(2).all(|pair| pair[0] < pair[1]),
            "{policy:?}: order or repeat"
        );
        assert_eq!(after_first, model, "{policy:?}: every slot once");
        // The run must exercise both paths: slots fired and slots skipped.
        assert!(model.len() > 1_000, "{policy:?}: {} slots", model.len());
        assert!(
            fired_count > 50 && fired_count < model.len(),
            "{policy:?}: {fired_count} fired"
        );
    }
}
