//! Proves what a schedule's slots are: cron parsing rules, the exact slots around the 2026
//! daylight-saving transitions in Berlin and New York (written out by hand from the zones'
//! published rules), agreement between the forward and backward searches (checked against a
//! model built by walking forward), and the stability of definitions.

use std::time::Duration;

use chrono::DateTime;

use super::*;
use crate::error::Error;

fn at(rfc3339: &str) -> Slot {
    let time = DateTime::parse_from_rfc3339(rfc3339).unwrap();
    Slot::from_datetime(time.to_utc()).unwrap()
}

fn texts(slots: &[Slot]) -> Vec<String> {
    slots.iter().map(|slot| slot.to_rfc3339()).collect()
}

fn slots(expr: &str, tz: &str, from: &str, until: &str) -> Vec<String> {
    let schedule = Schedule::cron(expr, tz).unwrap();
    texts(&schedule.slots_between(at(from), at(until), 100).unwrap())
}

#[test]
fn berlin_spring_forward_moves_a_fixed_time_past_the_gap() {
    // 2026-03-29 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day.
    let got = slots(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-27T12:00:00Z",
        "2026-03-30T12:00:00Z",
    );
    let want = [
        "2026-03-28T01:30:00.000Z", // 02:30 CET
        "2026-03-29T01:00:00.000Z", // 03:00 CEST, the first instant after the gap
        "2026-03-30T00:30:00.000Z", // 02:30 CEST
    ];
    assert_eq!(got, want);
}

#[test]
fn berlin_spring_forward_skips_interval_times_in_the_gap() {
    let got = slots(
        "30 * * * *",
        "Europe/Berlin",
        "2026-03-28T23:00:00Z",
        "2026-03-29T02:00:00Z",
    );
    // 00:30 CET, 01:30 CET, then 03:30 CEST: 02:30 is skipped.
    let want = [
        "2026-03-28T23:30:00.000Z",
        "2026-03-29T00:30:00.000Z",
        "2026-03-29T01:30:00.000Z",
    ];
    assert_eq!(got, want);
    // A list in the gap hour is an interval expression: it does not fire at all that day.
    let got = slots(
        "0,30 2 * * *",
        "Europe/Berlin",
        "2026-03-28T12:00:00Z",
        "2026-03-30T12:00:00Z",
    );
    assert_eq!(
        got,
        [
            "2026-03-30T00:00:00.000Z", // 02:00 CEST on the 30th
            "2026-03-30T00:30:00.000Z", // 02:30 CEST on the 30th
        ]
    );
}

#[test]
fn berlin_fall_back_fires_a_fixed_time_once_at_the_first_occurrence() {
    // 2026-10-25 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    let got = slots(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T12:00:00Z",
        "2026-10-26T12:00:00Z",
    );
    let want = [
        "2026-10-25T00:30:00.000Z", // 02:30 CEST; the 02:30 CET repeat does not fire
        "2026-10-26T01:30:00.000Z", // 02:30 CET
    ];
    assert_eq!(got, want);
}

#[test]
fn berlin_fall_back_fires_interval_times_on_both_occurrences() {
    let got = slots(
        "30 * * * *",
        "Europe/Berlin",
        "2026-10-24T23:00:00Z",
        "2026-10-25T03:00:00Z",
    );
    let want = [
        "2026-10-24T23:30:00.000Z", // 01:30 CEST
        "2026-10-25T00:30:00.000Z", // 02:30 CEST
        "2026-10-25T01:30:00.000Z", // 02:30 CET, the repeat
        "2026-10-25T02:30:00.000Z", // 03:30 CET
    ];
    assert_eq!(got, want);
}

#[test]
fn new_york_transitions_follow_the_same_rules() {
    // 2026-03-08 02:00 EST jumps to 03:00 EDT.
    let got = slots(
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T00:00:00Z",
        "2026-03-09T12:00:00Z",
    );
    assert_eq!(
        got,
        [
            "2026-03-07T07:30:00.000Z",
            "2026-03-08T07:00:00.000Z",
            "2026-03-09T06:30:00.000Z"
        ]
    );
    // 2026-11-01 02:00 EDT falls back to 01:00 EST; 01:30 happens twice and fires once.
    let got = slots(
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00:00Z",
        "2026-11-02T12:00:00Z",
    );
    assert_eq!(
        got,
        ["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"]
    );
}

/// Every slot of `schedule` in `(from, until]`, found by walking forward: the model the
/// backward search must agree with.
fn forward_model(schedule: &Schedule, from: Slot, until: Slot) -> Vec<Slot> {
    schedule.slots_between(from, until, 10_000).unwrap()
}

#[test]
fn backward_search_agrees_with_forward_walk_across_transitions() {
    let cases = [
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-20T00:00:00Z",
            "2026-04-05T00:00:00Z",
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-18T00:00:00Z",
            "2026-11-01T00:00:00Z",
        ),
        (
            "*/20 * * * *",
            "Europe/Berlin",
            "2026-03-28T20:00:00Z",
            "2026-03-29T06:00:00Z",
        ),
        (
            "*/20 * * * *",
            "Europe/Berlin",
            "2026-10-24T20:00:00Z",
            "2026-10-25T06:00:00Z",
        ),
        (
            "0,30 1,2 * * *",
            "America/New_York",
            "2026-10-30T00:00:00Z",
            "2026-11-03T00:00:00Z",
        ),
        (
            "0 9 * * MON-FRI",
            "Asia/Kolkata",
            "2026-01-01T00:00:00Z",
            "2026-02-01T00:00:00Z",
        ),
    ];
    for (expr, tz, from, until) in cases {
        let schedule = Schedule::cron(expr, tz).unwrap();
        let model = forward_model(&schedule, at(from), at(until));
        assert!(model.len() > 5, "{expr} {tz}");
        for pair in model.windows(2) {
            let (earlier, later) = (pair[0], pair[1]);
            assert_eq!(
                schedule.latest_at_or_before(later).unwrap(),
                Some(later),
                "{expr} {tz}"
            );
            let just_before = Slot::from_millis(later.as_millis() - 1).unwrap();
            assert_eq!(
                schedule.latest_at_or_before(just_before).unwrap(),
                Some(earlier),
                "{expr} {tz} before {later}"
            );
            assert_eq!(schedule.next_after(earlier).unwrap(), Some(later));
            let midway =
                Slot::from_millis(earlier.as_millis().midpoint(later.as_millis())).unwrap();
            assert_eq!(schedule.next_after(midway).unwrap(), Some(later));
            assert_eq!(schedule.latest_at_or_before(midway).unwrap(), Some(earlier));
        }
    }
}

#[test]
fn sub_second_times_round_the_right_way() {
    let schedule = Schedule::cron("* * * * *", "UTC").unwrap();
    let minute = at("2026-01-01T10:00:00Z");
    let half_past = Slot::from_millis(minute.as_millis() + 500).unwrap();
    let before = Slot::from_millis(minute.as_millis() - 500).unwrap();
    assert_eq!(schedule.next_after(before).unwrap(), Some(minute));
    assert_eq!(
        schedule.next_after(minute).unwrap(),
        Some(at("2026-01-01T10:01:00Z"))
    );
    assert_eq!(
        schedule.latest_at_or_before(half_past).unwrap(),
        Some(minute)
    );
    assert_eq!(
        schedule.latest_at_or_before(before).unwrap(),
        Some(at("2026-01-01T09:59:00Z"))
    );
}

#[test]
fn cron_syntax_rules() {
    assert!(Schedule::cron("@daily", "UTC").is_ok());
    assert!(Schedule::cron("0 9 * * mon-fri", "UTC").is_ok());
    assert!(Schedule::cron("  0  9 * * 1 ", "UTC").is_ok());
    // Day-of-month and day-of-week combine with OR, as in Vixie cron: the 13th, or a Friday.
    let got = slots(
        "0 0 13 * FRI",
        "UTC",
        "2026-02-01T00:00:00Z",
        "2026-02-28T00:00:00Z",
    );
    assert_eq!(
        got[..3],
        [
            "2026-02-06T00:00:00.000Z",
            "2026-02-13T00:00:00.000Z",
            "2026-02-20T00:00:00.000Z"
        ]
    );
    // 29 February exists only in leap years.
    let got = slots(
        "0 0 29 2 *",
        "UTC",
        "2026-01-01T00:00:00Z",
        "2033-01-01T00:00:00Z",
    );
    assert_eq!(
        got,
        ["2028-02-29T00:00:00.000Z", "2032-02-29T00:00:00.000Z"]
    );
}

#[test]
fn invalid_cron_and_zone_give_typed_errors() {
    for expr in [
        "",
        "   ",
        "* * * *",
        "0 0 * * * *",
        "0 0 0 * * * 2026",
        "60 * * * *",
        "* 24 * * *",
        "0 0 31 2 *",
        "0 0 30 2 *",
        "x * * * *",
        "0 0 * * \"",
        "0\n0 * * \u{1b}",
        "@sometimes",
    ] {
        let error = Schedule::cron(expr, "UTC").unwrap_err();
        assert!(
            matches!(error, Error::InvalidCron { .. }),
            "{expr:?} gave {error:?}"
        );
    }
    let long = format!("0 0 * * {}", "1,".repeat(200));
    assert!(matches!(
        Schedule::cron(&long, "UTC"),
        Err(Error::InvalidCron { .. })
    ));
    for tz in [
        "",
        "Mars/Olympus",
        "europe/berlin",
        "UTC+1",
        "Europe/Berlin\n",
    ] {
        let error = Schedule::cron("0 0 * * *", tz).unwrap_err();
        assert!(
            matches!(error, Error::UnknownTimeZone { .. }),
            "{tz:?} gave {error:?}"
        );
    }
}

#[test]
fn searches_stop_at_the_ends_of_the_range() {
    let schedule = Schedule::cron("0 0 1 1 *", "America/New_York").unwrap();
    // The first New Year after the epoch in New York; none lies before it in the slot range.
    assert_eq!(schedule.latest_at_or_before(Slot::MIN).unwrap(), None);
    assert_eq!(
        schedule.next_after(Slot::MIN).unwrap(),
        Some(at("1970-01-01T05:00:00Z"))
    );
    // croner searches up to the year 4999.
    assert_eq!(schedule.next_after(Slot::MAX).unwrap(), None);
    assert_eq!(
        schedule.next_after(at("5000-06-01T00:00:00Z")).unwrap(),
        None
    );
    assert!(schedule.latest_at_or_before(Slot::MAX).unwrap().is_some());
}

#[test]
fn slots_between_is_bounded_by_its_max() {
    let schedule = Schedule::interval(Duration::from_millis(1), Slot::MIN).unwrap();
    let got = schedule.slots_between(Slot::MIN, Slot::MAX, 3).unwrap();
    assert_eq!(
        got.iter().map(|slot| slot.as_millis()).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(
        schedule
            .slots_between(Slot::MIN, Slot::MAX, 0)
            .unwrap()
            .is_empty()
    );
    assert!(
        schedule
            .slots_between(Slot::MAX, Slot::MIN, 10)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn definitions_are_canonical_and_hashed() {
    let interval = Schedule::interval(Duration::from_hours(1), at("2026-01-01T00:00:00Z")).unwrap();
    assert_eq!(
        interval.definition(),
        r#"{"version":1,"kind":"interval","every_ms":3600000,"anchor":"2026-01-01T00:00:00.000Z"}"#
    );
    let cron = Schedule::cron(" 30  2 * * * ", "Europe/Berlin").unwrap();
    assert_eq!(
        cron.definition(),
        r#"{"version":1,"kind":"cron","expr":"30 2 * * *","tz":"Europe/Berlin"}"#
    );
    // Pinned with `printf %s "$definition" | b3sum`.
    assert_eq!(
        cron.definition_hash(),
        "ad1ae36b6f2b8c83ece2864497ad5cd94eb34c77c3f07259df61585c3a7d2485"
    );
    assert_eq!(
        interval.definition_hash(),
        "20fa364bc3901e0bbec2fe27be4c6a7b8cfc248b564f4fbe740365640845fd20"
    );
    // Any change to the schedule changes the hash.
    let other_zone = Schedule::cron("30 2 * * *", "Europe/Paris").unwrap();
    let other_time = Schedule::cron("31 2 * * *", "Europe/Berlin").unwrap();
    let other_anchor =
        Schedule::interval(Duration::from_hours(1), at("2026-01-01T00:00:01Z")).unwrap();
    assert_ne!(cron.definition_hash(), other_zone.definition_hash());
    assert_ne!(cron.definition_hash(), other_time.definition_hash());
    assert_ne!(interval.definition_hash(), other_anchor.definition_hash());
}
