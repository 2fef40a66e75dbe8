//! Guarantee: a holder killed with SIGKILL is judged dead from evidence (its liveness file is no
//! longer locked), its lock is taken over at a higher epoch, and its old epoch no longer passes
//! the fence, so nothing it might still write would be accepted. While it lives, its lock is
//! refused to everyone, including a second acquire from the holder's own instance.
//!
//! Method: a `lock_holder` child takes the lock and proves a fenced write works, then is
//! SIGKILLed (`Child::kill`) and reaped. This process, registered before the kill so its own
//! start-up cleanup cannot remove the evidence, then acquires: the takeover must report the old
//! holder, its epoch and the reason. The fence predicate for the old holder at the old epoch is
//! then checked to fail, both through `Locker::fence` and `release_dead` and directly on the row.

mod support;

use durably_lock::{Acquire, DeathReason, Error, Judgement, TakeOver, read};
use support::Scratch;
use support::lock::{immediate, spawn_holder};

#[test]
fn a_killed_holder_is_taken_over_at_a_higher_epoch_and_its_epoch_is_fenced_off() {
    let scratch = Scratch::with_lock_tables();
    let contender = scratch.locker();
    let conn = scratch.conn();
    let (mut child, child_instance) = spawn_holder(&scratch.database, "resource", &[]);
    child.send("acquire");
    assert_eq!(child.expect("acquired"), ["1", "none"]);
    child.send("fence 1");
    assert_eq!(child.expect("fenced"), ["1"]);

    // Alive: refused to another instance...
    let refused = immediate(&conn, |conn| contender.try_acquire(conn, "resource")).unwrap();
    let Acquire::Held {
        holder, judgement, ..
    } = refused
    else {
        panic!("a live holder's lock was handed out: {refused:?}");
    };
    assert_eq!(holder.instance_id, child_instance);
    assert_eq!(holder.pid, i64::from(child.pid()));
    assert!(matches!(judgement, Judgement::Alive(_)), "{judgement}");
    // ...and to the holder's own instance.
    child.send("acquire");
    let again = child.line();
    assert!(again.starts_with("held 1 alive"), "{again}");

    let old = read(&conn, "resource").unwrap().unwrap();
    let old_holder = old.holder.clone().unwrap();
    child.kill();

    let acquired = immediate(&conn, |conn| contender.try_acquire(conn, "resource")).unwrap();
    assert_eq!(
        acquired,
        Acquire::Acquired {
            epoch: 2,
            took_over: Some(TakeOver {
                from: old_holder.clone(),
                from_epoch: 1,
                reason: DeathReason::LivenessFileUnlocked,
            }),
        }
    );
    let now = read(&conn, "resource").unwrap().unwrap();
    assert_eq!(now.epoch, 2);
    assert_eq!(
        now.holder.unwrap().instance_id,
        contender.instance_id().to_string()
    );

    // The old epoch fails the fence and cannot release the new holder's lock.
    let lost = contender.fence(&conn, "resource", 1).unwrap_err();
    assert!(matches!(lost, Error::LockLost { epoch: 1, .. }), "{lost}");
    assert!(
        !contender
            .release_dead(&conn, "resource", &old_holder, 1)
            .unwrap()
    );
    // The fence predicate itself, for the dead instance at its epoch, as its fenced writes ran it.
    let old_fence_passes: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM locks WHERE resource = ?1 AND instance_id = ?2
                            AND epoch = ?3)",
            durably_db::params!["resource", child_instance, 1],
            |row| row.get(0),
        )
        .unwrap();
    assert!(!old_fence_passes);
    contender.fence(&conn, "resource", 2).unwrap();
    let writes: i64 = conn
        .query_row("SELECT count(*) FROM fenced_writes", [], |row| row.get(0))
        .unwrap();
    assert_eq!(
        writes, 1,
        "only the write made while the child held the lock"
    );
}

#[test]
fn released_locks_keep_their_epoch_so_epochs_never_decrease() {
    let scratch = Scratch::with_lock_tables();
    let conn = scratch.conn();
    let (mut child, _) = spawn_holder(&scratch.database, "resource", &[]);
    child.send("acquire");
    assert_eq!(child.expect("acquired"), ["1", "none"]);
    child.send("release 1");
    assert_eq!(child.expect("released"), ["1"]);
    let row = read(&conn, "resource").unwrap().unwrap();
    assert_eq!(
        (row.epoch, row.holder),
        (1, None),
        "a released row keeps its epoch"
    );
    // A stale epoch cannot write or release after the release either.
    child.send("fence 1");
    assert!(child.expect("lost").join(" ").contains("epoch 1, free"));
    child.send("release 1");
    child.expect("lost");

    let locker = scratch.locker();
    let acquired = immediate(&conn, |conn| locker.try_acquire(conn, "resource")).unwrap();
    assert_eq!(
        acquired,
        Acquire::Acquired {
            epoch: 2,
            took_over: None
        }
    );
    child.finish();
}
