//! Guarantee: when several contenders take over the same dead holder at once, exactly one wins
//! and every other one is told the lock is held. The takeover is a compare-and-swap on the
//! epoch, so it holds even when both contenders judged the holder dead before either wrote.
//!
//! Method: lock rows are crafted with a holder that is certainly dead (this process's pid with
//! another start time, as after pid reuse). Two threads, each with its own connection and its
//! own `Locker` (so its own liveness file), are released together by a barrier, for many
//! rounds: first both judge the holder dead and then both call `take_over` with the epoch they
//! saw; then both call `try_acquire` outside any explicit transaction, so their reads, judgements
//! and swaps interleave freely. Finally two `lock_holder` processes are told to acquire at once.

// Helpers outside the #[test] functions fail the test by panicking, as the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Barrier};

use durably_lock::{Acquire, DeathReason, Judgement, Locker, read};
use support::lock::{immediate, insert_holder, reused_pid_holder, spawn_holder};
use support::{Driven, Scratch};
use uuid::Uuid;

const ROUNDS: usize = 100;
const DEAD_EPOCH: i64 = 7;

fn crafted_dead_rows(scratch: &Scratch, prefix: &str, count: usize) {
    let conn = scratch.conn();
    let holder = reused_pid_holder();
    for round in 0..count {
        let instance = Uuid::new_v4().to_string();
        insert_holder(
            &conn,
            &format!("{prefix}{round}"),
            DEAD_EPOCH,
            &holder,
            &instance,
        );
    }
}

/// Runs `contend` on two threads at once per round and returns each thread's results.
fn two_contenders<T: Send + 'static>(
    scratch: &Scratch,
    contend: fn(&Locker, &durably_db::Connection, &Barrier, usize) -> T,
) -> [Vec<T>; 2] {
    let barrier = Arc::new(Barrier::new(2));
    let threads = [0, 1].map(|_| {
        let (locker, conn) = (scratch.locker(), scratch.conn());
        let barrier = Arc::clone(&barrier);
        std::thread::spawn(move || {
            (0..ROUNDS)
                .map(|round| contend(&locker, &conn, &barrier, round))
                .collect::<Vec<T>>()
        })
    });
    threads.map(|thread| thread.join().unwrap())
}

#[test]
fn two_compare_and_swaps_on_one_dead_holder_have_one_winner() {
    let scratch = Scratch::with_lock_tables();
    crafted_dead_rows(&scratch, "cas-", ROUNDS);
    let [first, second] = two_contenders(&scratch, |locker, conn, barrier, round| {
        let resource = format!("cas-{round}");
        let row = read(conn, &resource).unwrap().unwrap();
        let verdict = locker.judge().judge(row.holder.as_ref().unwrap());
        assert!(verdict.is_dead(), "{verdict}");
        barrier.wait();
        immediate(conn, |conn| locker.take_over(conn, &resource, row.epoch)).unwrap()
    });
    for (round, outcomes) in first.into_iter().zip(second).enumerate() {
        let winners: Vec<u64> = [outcomes.0, outcomes.1].into_iter().flatten().collect();
        assert_eq!(
            winners,
            [DEAD_EPOCH as u64 + 1],
            "round {round}: {outcomes:?}"
        );
    }
}

#[test]
fn two_acquires_on_one_dead_holder_have_one_winner() {
    let scratch = Scratch::with_lock_tables();
    crafted_dead_rows(&scratch, "acquire-", ROUNDS);
    let [first, second] = two_contenders(&scratch, |locker, conn, barrier, round| {
        barrier.wait();
        // No explicit transaction: each statement commits on its own, so the two contenders'
        // reads and swaps interleave and the compare-and-swap alone must settle it.
        locker
            .try_acquire(conn, &format!("acquire-{round}"))
            .unwrap()
    });
    for (round, outcomes) in first.into_iter().zip(second).enumerate() {
        let (won, lost) = match outcomes {
            (won @ Acquire::Acquired { .. }, lost) | (lost, won @ Acquire::Acquired { .. }) => {
                (won, lost)
            }
            other => panic!("round {round}: nobody won: {other:?}"),
        };
        let Acquire::Acquired {
            epoch,
            took_over: Some(takeover),
        } = won
        else {
            panic!("round {round}: the winner took no dead holder over: {won:?}");
        };
        assert_eq!(epoch, DEAD_EPOCH as u64 + 1, "round {round}");
        assert!(matches!(takeover.reason, DeathReason::PidReused { .. }));
        assert!(
            matches!(
                &lost,
                Acquire::Held {
                    judgement: Judgement::Alive(_),
                    ..
                }
            ),
            "round {round}: the loser must see the winner's live hold: {lost:?}"
        );
    }
}

#[test]
fn two_processes_acquiring_one_dead_holder_have_one_winner() {
    let scratch = Scratch::with_lock_tables();
    crafted_dead_rows(&scratch, "process-", 5);
    for round in 0..5 {
        let resource = format!("process-{round}");
        let mut children = [0, 1].map(|_| spawn_holder(&scratch.database, &resource, &[]).0);
        for child in &mut children {
            child.send("acquire");
        }
        let answers = children.each_mut().map(Driven::line);
        let won = answers
            .iter()
            .filter(|answer| answer.starts_with("acquired 8 PidReused"));
        let lost = answers
            .iter()
            .filter(|answer| answer.starts_with("held 8 alive"));
        assert_eq!(
            (won.count(), lost.count()),
            (1, 1),
            "round {round}: {answers:?}"
        );
        for child in children {
            child.finish();
        }
    }
}
