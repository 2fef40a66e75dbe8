//! Time in the runtime comes from the journal's clock (plan §4.1, §4.2): an execution started
//! with a `not_before` in the future stays queued, even while later work runs, until that
//! clock reaches it, and then runs without anything else happening. The clock is a
//! `TestClock` the test moves, so nothing sleeps; a runtime given another clock than its
//! journal's is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use durably_journal::Status;
use durably_lock::Clock as _;
use durably_runtime::testing::TestClock;
use durably_runtime::{Error, Runtime, StartOptions, WorkflowContext, WorkflowError};
use durably_testkit::TestDb;

async fn echo(_context: WorkflowContext, tag: u32) -> Result<u32, WorkflowError> {
    Ok(tag)
}

/// A delayed execution waits for the clock, not for other work.
#[tokio::test]
async fn a_delayed_start_runs_when_the_clock_reaches_it() {
    let db = TestDb::new();
    let clock = Arc::new(TestClock::default());
    let journal = db.builder().clock(clock.clone()).open().unwrap();
    let runtime = Runtime::builder(journal)
        .register("echo", 1, echo)
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    let later = clock.now() + Duration::from_hours(1);
    let delayed = runtime
        .start::<_, u32>(
            "echo",
            durably_journal::new_execution_id(),
            &1_u32,
            StartOptions::default().not_before(later),
        )
        .await
        .unwrap();
    // Started after the delayed one, and run: the dispatcher has passed over the delayed one.
    let now = runtime
        .start::<_, u32>(
            "echo",
            durably_journal::new_execution_id(),
            &2_u32,
            StartOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(now.result().await.unwrap(), 2);
    assert_eq!(delayed.status().unwrap(), Status::Queued);

    clock.advance(Duration::from_secs(3599));
    assert_eq!(delayed.status().unwrap(), Status::Queued);
    clock.advance(Duration::from_secs(1));
    assert_eq!(delayed.result().await.unwrap(), 1);
}

/// A runtime whose clock is not its journal's is refused.
#[tokio::test]
async fn a_clock_other_than_the_journals_is_refused() {
    let db = TestDb::new();
    let journal = db
        .builder()
        .clock(Arc::new(TestClock::default()))
        .open()
        .unwrap();
    let error = Runtime::builder(journal)
        .clock(Arc::new(TestClock::default()))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::InvalidConfig(_)), "{error:?}");
}
