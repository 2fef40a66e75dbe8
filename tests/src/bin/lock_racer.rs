//! Test helper for `tests/lock_mutual_exclusion.rs`: races other processes for one lock until it
//! has held it a given number of times, logging each hold interval to an independent file.
//!
//! Usage: `lock_racer <database> <log> <resource> <acquisitions>`. It registers its lock
//! instance, prints `ready`, and waits for a `go` line on stdin so that every racer starts at
//! once. Each acquire and each release runs in its own `BEGIN IMMEDIATE` transaction. While it
//! holds the lock it appends `enter <pid> <epoch>` and then `exit <pid> <epoch>` to the log,
//! which is opened with `O_APPEND` so each line lands whole, in the order the writes happened.
//! At the end it prints `done <acquisitions> <attempts>`.

use std::fs::OpenOptions;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use durably_db::Connection;
use durably_lock::{Acquire, LivenessDir, Locker, LockerConfig};
use durably_tests::immediate::immediate;

type Outcome<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// How long to wait before retrying a database another racer has locked, and how many times.
const BUSY_RETRY_PAUSE: Duration = Duration::from_micros(20);
const BUSY_RETRIES_MAX: i32 = 500_000;

/// A pause after each release, so the lock changes hands instead of going back to the racer
/// that just let it go. It only shapes the race; exclusion never depends on it.
const AFTER_RELEASE_PAUSE: Duration = Duration::from_micros(100);

/// A racer that has not finished by then is starved or stuck; it fails instead of hanging.
const RUN_MAX: Duration = Duration::from_mins(1);

fn main() -> Outcome {
    let args: Vec<String> = std::env::args().collect();
    let [_, database, log, resource, acquisitions] = args.as_slice() else {
        return Err("usage: lock_racer <database> <log> <resource> <acquisitions>".into());
    };
    let database = PathBuf::from(database);
    let acquisitions: u64 = acquisitions.parse()?;
    let locker = Locker::new(LockerConfig::new(LivenessDir::beside(&database)))?;
    let conn = rusqlite::Connection::open(&database)?;
    // SQLite's own busy handler backs off for up to 100 ms at a time, so one racer would get the
    // lock over and over while the others sleep. Short, bounded retries keep the race tight.
    conn.busy_handler(Some(|retries| {
        std::thread::sleep(BUSY_RETRY_PAUSE);
        retries < BUSY_RETRIES_MAX
    }))?;
    conn.execute_batch("PRAGMA synchronous = NORMAL")?;
    let conn = Connection::from(conn);
    let mut log = OpenOptions::new().append(true).open(log)?;
    let pid = std::process::id();

    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go)?;
    if go.trim() != "go" {
        return Err(format!("expected `go`, got {go:?}").into());
    }

    let deadline = Instant::now() + RUN_MAX;
    let (mut held, mut attempts) = (0, 0_u64);
    while held < acquisitions {
        if Instant::now() > deadline {
            return Err(format!("held the lock only {held} times in {RUN_MAX:?}").into());
        }
        attempts += 1;
        let Some(epoch) = try_acquire(&locker, &conn, resource)? else {
            std::thread::yield_now();
            continue;
        };
        // Each line is written with one write(2) on an O_APPEND file.
        log.write_all(format!("enter {pid} {epoch}\n").as_bytes())?;
        locker.fence(&conn, resource, epoch)?;
        log.write_all(format!("exit {pid} {epoch}\n").as_bytes())?;
        immediate(&conn, |conn| locker.release(conn, resource, epoch))?;
        held += 1;
        std::thread::sleep(AFTER_RELEASE_PAUSE);
    }
    writeln!(out, "done {held} {attempts}")?;
    out.flush()?;
    Ok(())
}

/// One acquire attempt in its own transaction; the epoch when it got the lock.
fn try_acquire(locker: &Locker, conn: &Connection, resource: &str) -> Outcome<Option<u64>> {
    immediate(conn, |conn| match locker.try_acquire(conn, resource)? {
        Acquire::Acquired {
            epoch,
            took_over: None,
        } => Ok(Some(epoch)),
        Acquire::Acquired {
            took_over: Some(takeover),
            ..
        } => Err(format!("no racer dies, yet one was taken over: {takeover:?}").into()),
        Acquire::Held { .. } => Ok(None),
    })
}
