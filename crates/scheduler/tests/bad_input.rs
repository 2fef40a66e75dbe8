//! Guarantee: bad job definitions fail with a typed, explained error when the job is built for
//! registration, never with a panic: an invalid cron expression, an unknown time zone, an empty
//! job id, a slot (interval anchor) out of range, a missing or invalid workflow kind, a missing
//! schedule; and a fire of an unknown job or of a time off the schedule's grid is refused.
//!
//! Method: each bad input is built and the error variant and message checked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_scheduler::{CatchUp, Error, Job, JobId, SLOT_MILLIS_MAX};
use support::{Calls, ManualClock, Scratch, T0_MS, counting_job, slot};

fn noop(builder: durably_scheduler::JobBuilder) -> Result<Job, Error> {
    builder.workflow("report").build()
}

#[test]
fn bad_definitions_are_typed_errors() {
    let cron = |expr: &str, tz: &str| noop(Job::builder("job").cron(expr, tz));
    let error = cron("61 * * * *", "UTC").unwrap_err();
    assert!(matches!(error, Error::InvalidCron { .. }), "{error}");
    assert!(error.to_string().contains("5 fields"), "{error}");
    assert!(matches!(
        cron("0 0 31 2 *", "UTC"),
        Err(Error::InvalidCron { .. })
    ));
    assert!(matches!(
        cron("not cron", "UTC"),
        Err(Error::InvalidCron { .. })
    ));
    let error = cron("0 2 * * *", "Mars/Olympus").unwrap_err();
    assert!(matches!(error, Error::UnknownTimeZone { .. }), "{error}");
    assert!(error.to_string().contains("IANA"), "{error}");

    let error = noop(Job::builder("").cron("0 2 * * *", "UTC")).unwrap_err();
    assert!(matches!(error, Error::InvalidJobId { .. }), "{error}");
    assert!(error.to_string().contains("empty"), "{error}");

    let every = Duration::from_mins(1);
    for anchor in [-1, SLOT_MILLIS_MAX + 1, i64::MIN] {
        let error = noop(Job::builder("job").interval(every, anchor)).unwrap_err();
        assert!(matches!(error, Error::SlotOutOfRange { .. }), "{error}");
    }
    let error = noop(Job::builder("job").interval(Duration::ZERO, 0)).unwrap_err();
    assert!(matches!(error, Error::InvalidInterval { .. }), "{error}");

    let zero_window = CatchUp::All {
        window: Duration::ZERO,
        max: 3,
    };
    let error = noop(Job::builder("job").interval(every, 0).catch_up(zero_window)).unwrap_err();
    assert!(matches!(error, Error::InvalidCatchUp { .. }), "{error}");
    let error = Job::builder("job").interval(every, 0).build().unwrap_err();
    assert!(matches!(error, Error::InvalidJob { .. }), "{error}");
    assert!(error.to_string().contains("no workflow"), "{error}");
    for kind in ["", "a\nb", &"k".repeat(129)] {
        let error = Job::builder("job")
            .interval(every, 0)
            .workflow(kind)
            .build()
            .unwrap_err();
        assert!(error.to_string().contains("workflow kind"), "{error}");
    }
    let error = noop(Job::builder("job").interval(every, 0).queue("")).unwrap_err();
    assert!(error.to_string().contains("queue"), "{error}");
    let error = noop(Job::builder("job")).unwrap_err();
    assert!(error.to_string().contains("no schedule"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fires_of_unknown_jobs_and_off_grid_times_are_refused() {
    let scratch = Scratch::new();
    let clock = ManualClock::at_millis(T0_MS);
    let calls = Calls::default();
    let scheduler = scratch.scheduler(&clock, &calls).await;
    let unknown = scheduler
        .fire(&JobId::new("nope").unwrap(), slot(T0_MS))
        .await;
    assert!(
        matches!(unknown, Err(Error::UnknownJob { .. })),
        "{unknown:?}"
    );
    let _ = scheduler
        .register(counting_job("job").build().unwrap())
        .await
        .unwrap();
    let off_grid = scheduler
        .fire(&JobId::new("job").unwrap(), slot(T0_MS + 1))
        .await;
    assert!(
        matches!(off_grid, Err(Error::NotASlot { .. })),
        "{off_grid:?}"
    );
    assert_eq!(calls.total(), 0);
    assert_eq!(scratch.count("SELECT count(*) FROM fires"), 0);
}
