//! Guarantee: at most one process holds a lock at a time, however hard processes race for it.
//!
//! Method: several `lock_racer` processes, started together through a ready/go handshake over
//! their pipes, race for one resource on one shared SQLite file (WAL, busy timeout) until each
//! has held it a fixed number of times (over 1,000 holds in all). Every acquire and release is
//! its own `BEGIN IMMEDIATE` transaction. Inside each hold a racer appends `enter <pid> <epoch>`
//! and `exit <pid> <epoch>` to a log file opened with `O_APPEND`, which the lock code never
//! touches. If two holds overlapped, the log would show two `enter` lines in a row. The test
//! checks that the log strictly alternates enter/exit of the same holder and epoch, and that the
//! epochs of successive holds are exactly 1, 2, 3, ...: every acquire bumps the fencing epoch
//! once and no epoch is ever handed out twice. It also checks that the lock really changed hands
//! often, so the race was a race.

// Helpers outside the #[test] functions fail the test by panicking, as the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_lock::read;
use support::{Driven, Scratch};

const RACERS: usize = 4;
const ACQUISITIONS_PER_RACER: u64 = 260;
/// The racers pause briefly after each release, so the lock normally changes hands on most holds.
const HANDOVERS_MIN: usize = 100;

#[test]
fn racing_processes_never_hold_one_lock_at_the_same_time() {
    let scratch = Scratch::with_lock_tables();
    let log = scratch.dir.path().join("holds.log");
    std::fs::write(&log, b"").unwrap();
    let database = scratch.database.to_str().unwrap();
    let per_racer = ACQUISITIONS_PER_RACER.to_string();
    let mut racers: Vec<Driven> = (0..RACERS)
        .map(|_| {
            Driven::spawn(
                env!("CARGO_BIN_EXE_lock_racer"),
                &[database, log.to_str().unwrap(), "the-resource", &per_racer],
            )
        })
        .collect();
    for racer in &mut racers {
        racer.expect("ready");
    }
    for racer in &mut racers {
        racer.send("go");
    }
    let mut pids = Vec::new();
    for mut racer in racers {
        let done = racer.expect("done");
        assert_eq!(done[0], per_racer);
        pids.push(racer.pid());
        racer.finish();
    }

    let holds = check_log(&std::fs::read_to_string(&log).unwrap());
    let total = ACQUISITIONS_PER_RACER * RACERS as u64;
    assert_eq!(holds.len() as u64, total);
    for pid in pids {
        let by_pid = holds.iter().filter(|(holder, _)| *holder == pid).count() as u64;
        assert_eq!(
            by_pid, ACQUISITIONS_PER_RACER,
            "racer {pid} logged {by_pid} holds"
        );
    }
    // A race in name only (each racer taking all its holds in one run) would prove nothing.
    let handovers = holds
        .windows(2)
        .filter(|pair| pair[0].0 != pair[1].0)
        .count();
    assert!(
        handovers >= HANDOVERS_MIN,
        "the lock changed hands only {handovers} times"
    );
    let row = read(&scratch.conn(), "the-resource").unwrap().unwrap();
    assert_eq!(row.epoch, total, "one epoch per acquire");
    assert!(row.holder.is_none(), "every racer released: {row:?}");
}

/// Checks that hold intervals in the log never overlap and returns the holds (pid, epoch).
fn check_log(log: &str) -> Vec<(u32, u64)> {
    let mut holds = Vec::new();
    let mut inside: Option<(u32, u64)> = None;
    for (number, line) in log.lines().enumerate() {
        let words: Vec<&str> = line.split(' ').collect();
        let [kind, pid, epoch] = words.as_slice() else {
            panic!("line {number} is torn: {line:?}");
        };
        let hold = (pid.parse::<u32>().unwrap(), epoch.parse::<u64>().unwrap());
        match (*kind, inside) {
            ("enter", None) => {
                let expected = holds.len() as u64 + 1;
                assert_eq!(
                    hold.1, expected,
                    "line {number}: epochs must go 1, 2, 3, ..."
                );
                holds.push(hold);
                inside = Some(hold);
            }
            ("enter", Some(current)) => {
                panic!("line {number}: {hold:?} entered while {current:?} held the lock")
            }
            ("exit", Some(current)) if current == hold => inside = None,
            _ => panic!("line {number}: {line:?} does not close the open hold {inside:?}"),
        }
    }
    assert_eq!(inside, None, "the log ends inside a hold");
    holds
}
