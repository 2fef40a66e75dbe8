//! Fencing: after another journal takes an execution over, the old handle's next step fails
//! with `LockLost` and writes nothing; a guarded step does not even run its effect, and the old
//! handle cannot finalize the execution.
//!
//! Method: journal A opens an execution with an opt-in lease; journal B on the same file, with
//! an injected clock an hour ahead, judges A's lease expired (A's process is alive, so only the
//! lease can forfeit the lock) and opens the same execution, taking it over with the next
//! epoch. A then tries to write, and the steps table is compared before and after.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use chrono::{TimeDelta, Utc};
use durably_journal::{Error, Execution, Journal, Opened, Policy, StepError};
use support::{ManualClock, Scratch, start};
use uuid::Uuid;

/// How long journal A's lease lasts: an hour of B's clock is far past it.
const LEASE_MS: u64 = 60_000;

/// Journal A on the scratch file, with an opt-in lease, holding a new execution: returns the
/// journal, the execution's id and A's handle to it.
async fn leased_holder(scratch: &Scratch) -> (Journal, Uuid, Execution) {
    let a = scratch.builder().lease_ms(LEASE_MS).open().unwrap();
    let id = Uuid::new_v4();
    let old = start(&a, id).await;
    (a, id, old)
}

#[tokio::test]
async fn after_a_takeover_the_old_handle_fails_with_lock_lost_and_writes_nothing() {
    let scratch = Scratch::new();
    let (a, id, old) = leased_holder(&scratch).await;
    let _: u32 = old
        .pure("before takeover", || async { Ok(1) })
        .await
        .unwrap();

    let later = ManualClock::at(Utc::now() + TimeDelta::hours(1));
    let b = scratch
        .builder()
        .clock(later)
        .sweep_on_open(false)
        .open()
        .unwrap();
    let Opened::Running(new) = b.open_execution(id, "test", "", &"").await.unwrap() else {
        panic!("a running execution is not finished");
    };
    assert!(new.is_resume());
    assert_eq!(
        new.fencing_token().0,
        old.fencing_token().0 + 1,
        "a takeover bumps the epoch"
    );
    let takeovers = b
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FROM events WHERE kind = 'takeover'
                   AND detail ->> 'resource' = ?1",
                [id.to_string()],
                |row| row.get::<_, i64>(0),
            )?)
        })
        .unwrap();
    assert_eq!(takeovers, 1, "the takeover is audited");
    let steps_before = b.steps(id).unwrap();

    let effects = AtomicU32::new(0);
    let error = old
        .guarded("charge", Policy::Retry, |_key| {
            effects.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, StepError>(2_u32) }
        })
        .await
        .unwrap_err();
    assert!(matches!(error, Error::LockLost(_)), "{error:?}");
    assert_eq!(
        effects.load(Ordering::SeqCst),
        0,
        "a fenced-out guarded step ran its effect"
    );
    let error = old.complete(&"stale").await.unwrap_err();
    assert!(matches!(error, Error::LockLost(_)), "{error:?}");
    assert_eq!(
        b.steps(id).unwrap(),
        steps_before,
        "the old handle wrote a step"
    );
    assert_eq!(
        b.get(id).unwrap().unwrap().status,
        durably_journal::Status::Running
    );

    // The new holder carries on: it replays step 0 and writes step 1.
    let replayed: u32 = new
        .pure("before takeover", || async { Ok(99) })
        .await
        .unwrap();
    assert_eq!(replayed, 1);
    let charged = new
        .guarded("charge", Policy::Retry, |_key| async {
            Ok::<_, StepError>(3_u32)
        })
        .await
        .unwrap();
    assert_eq!(charged.into_result().unwrap(), 3);
    new.complete(&"fresh").await.unwrap();
    let record = b.get(id).unwrap().unwrap();
    assert_eq!(
        (
            record.status.as_str(),
            record
                .output
                .as_ref()
                .map(durably_journal::Payload::as_json)
        ),
        ("completed", Some("\"fresh\""))
    );
    drop((a, b));
    scratch.assert_sqlite_integrity();
}

#[tokio::test]
async fn a_pure_step_after_a_takeover_is_not_recorded() {
    let scratch = Scratch::new();
    let (_a, id, old) = leased_holder(&scratch).await;

    let later: Arc<ManualClock> = ManualClock::at(Utc::now() + TimeDelta::hours(1));
    let b = scratch.builder().clock(later).open().unwrap();
    // B's orphan sweep at open already reclaims the expired lease; opening then re-acquires.
    let Opened::Running(new) = b.open_execution(id, "test", "", &"").await.unwrap() else {
        panic!("a running execution is not finished");
    };
    assert!(new.fencing_token().0 > old.fencing_token().0);

    let error = old.pure("late", || async { Ok(7_u32) }).await.unwrap_err();
    assert!(matches!(error, Error::LockLost(_)), "{error:?}");
    assert!(
        b.steps(id).unwrap().is_empty(),
        "the old handle wrote a step"
    );
}
