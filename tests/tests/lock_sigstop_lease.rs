//! Guarantee: a stopped (SIGSTOP) holder is alive and keeps its lock for however long it is
//! stopped: staleness alone never proves death. Only a holder that opted into a lease forfeits
//! its lock once the lease expires, and then fencing makes its return harmless: after SIGCONT
//! its own fenced write fails with `LockLost` and writes nothing.
//!
//! Method: a `lock_holder` child takes the lock and is stopped with `kill(pid, SIGSTOP)`; the
//! test waits until `/proc/<pid>/stat` shows state `T`. A contender whose injected clock is far
//! in the future must still be refused while the child has no lease. With a lease
//! (`--lease-ms`), the contender is refused while the lease runs on the real clock, and takes
//! the lock over (`LeaseExpired`) once its test clock is moved past the lease. The child is
//! then continued, asked over its stdin to make a fenced write at its old epoch, and reports
//! the `LockLost` on stdout; the `fenced_writes` table shows nothing got through.

// Helpers outside the #[test] functions fail the test by panicking, as the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use chrono::Utc;
use durably_lock::{Acquire, DeathReason, Judgement, Locker, LockerConfig, read};
use support::Scratch;
use support::lock::{TestClock, immediate, resume, spawn_holder, stop};

const LEASE_MS: i64 = 60_000;

fn fenced_write_count(scratch: &Scratch, epoch: i64) -> i64 {
    scratch
        .conn()
        .query_row(
            "SELECT count(*) FROM fenced_writes WHERE epoch = ?1",
            [epoch],
            |row| row.get(0),
        )
        .unwrap()
}

#[test]
fn a_stopped_holder_without_a_lease_is_never_taken_over() {
    let scratch = Scratch::with_lock_tables();
    let (mut child, _) = spawn_holder(&scratch.database, "resource", &[]);
    child.send("acquire");
    assert_eq!(child.expect("acquired"), ["1", "none"]);
    stop(child.pid());

    let clock = TestClock::at(Utc::now() + chrono::Duration::days(365));
    let mut config = LockerConfig::new(scratch.liveness());
    config.clock = clock;
    let contender = Locker::new(config).unwrap();
    let conn = scratch.conn();
    let refused = immediate(&conn, |conn| contender.try_acquire(conn, "resource")).unwrap();
    assert!(
        matches!(
            &refused,
            Acquire::Held {
                epoch: 1,
                judgement: Judgement::Alive(_),
                ..
            }
        ),
        "a stopped holder lost its lock: {refused:?}"
    );
    assert!(contender.dead_holders(&conn).unwrap().is_empty());

    resume(child.pid());
    child.send("fence 1");
    assert_eq!(child.expect("fenced"), ["1"]);
    child.finish();
}

#[test]
fn an_expired_lease_is_taken_over_and_the_returning_holder_is_fenced_off() {
    let scratch = Scratch::with_lock_tables();
    let lease = LEASE_MS.to_string();
    let (mut child, child_instance) =
        spawn_holder(&scratch.database, "resource", &["--lease-ms", &lease]);
    child.send("acquire");
    assert_eq!(child.expect("acquired"), ["1", "none"]);
    let heartbeat = read(&scratch.conn(), "resource")
        .unwrap()
        .unwrap()
        .holder
        .unwrap()
        .heartbeat_at;
    stop(child.pid());

    let clock = TestClock::at(Utc::now());
    let mut config = LockerConfig::new(scratch.liveness());
    config.clock = Arc::clone(&clock) as _;
    let contender = Locker::new(config).unwrap();
    let conn = scratch.conn();
    let refused = immediate(&conn, |conn| contender.try_acquire(conn, "resource")).unwrap();
    assert!(
        matches!(&refused, Acquire::Held { epoch: 1, .. }),
        "the lease has not expired yet: {refused:?}"
    );

    clock.advance(chrono::Duration::milliseconds(LEASE_MS + 1_000));
    let acquired = immediate(&conn, |conn| contender.try_acquire(conn, "resource")).unwrap();
    let Acquire::Acquired {
        epoch: 2,
        took_over: Some(takeover),
    } = acquired
    else {
        panic!("an expired lease was not taken over: {acquired:?}");
    };
    assert_eq!(takeover.from.instance_id, child_instance);
    assert_eq!(takeover.from_epoch, 1);
    assert_eq!(
        takeover.reason,
        DeathReason::LeaseExpired {
            heartbeat_at: heartbeat,
            lease_ms: LEASE_MS
        }
    );

    resume(child.pid());
    child.send("fence 1");
    let lost = child.expect("lost").join(" ");
    assert!(
        lost.contains("epoch 1 but the lock is now epoch 2"),
        "{lost}"
    );
    assert_eq!(
        fenced_write_count(&scratch, 1),
        0,
        "nothing written under the old epoch"
    );
    child.send("release 1");
    child.expect("lost");
    // The returning holder cannot get the lock back while the new holder lives.
    child.send("acquire");
    let again = child.line();
    assert!(again.starts_with("held 2 alive"), "{again}");
    contender.fence(&conn, "resource", 2).unwrap();
    child.finish();
}
