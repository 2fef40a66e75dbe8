//! Test helper for the `lock_*` integration tests: one lock instance in its own process, driven
//! by commands on stdin, answering one line per command on stdout.
//!
//! Usage: `lock_holder <database> <resource> [--lease-ms <ms>]`. At start it prints
//! `ready <instance-id> <pid>`. Commands:
//!
//! - `acquire`: `try_acquire` in its own `BEGIN IMMEDIATE` transaction; prints
//!   `acquired <epoch> <took-over-reason or none>` or `held <epoch> <judgement>`.
//! - `fence <epoch>`: a fenced write: in one `BEGIN IMMEDIATE` transaction, the fence check and
//!   then an insert into `fenced_writes`; prints `fenced <epoch>` or `lost <error>`.
//! - `release <epoch>`: prints `released <epoch>` or `lost <error>`.
//! - `exit`, or the end of stdin: exits.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use durably_db::{Connection, params};
use durably_lock::{Acquire, Error, LivenessDir, Locker, LockerConfig};
use durably_tests::immediate::immediate;

type Outcome = Result<(), Box<dyn std::error::Error>>;

fn main() -> Outcome {
    let args: Vec<String> = std::env::args().collect();
    let (Some(database), Some(resource)) = (args.get(1), args.get(2)) else {
        return Err("usage: lock_holder <database> <resource> [--lease-ms <ms>]".into());
    };
    let database = PathBuf::from(database);
    let mut config = LockerConfig::new(LivenessDir::beside(&database));
    if args.get(3).map(String::as_str) == Some("--lease-ms") {
        config.lease_ms = Some(args.get(4).ok_or("--lease-ms needs a value")?.parse()?);
    }
    let locker = Locker::new(config)?;
    let conn = rusqlite::Connection::open(&database)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    let conn = Connection::from(conn);
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {} {}", locker.instance_id(), std::process::id())?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let mut words = line.split_whitespace();
        let answer = match (words.next(), words.next().map(str::parse::<u64>)) {
            (Some("acquire"), None) => acquire(&locker, &conn, resource)?,
            (Some("fence"), Some(Ok(epoch))) => fenced_write(&locker, &conn, resource, epoch)?,
            (Some("release"), Some(Ok(epoch))) => {
                under_epoch(&conn, format!("released {epoch}"), |transaction| {
                    locker.release(transaction, resource, epoch)
                })?
            }
            (Some("exit"), None) => break,
            _ => return Err(format!("unknown command {line:?}").into()),
        };
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    Ok(())
}

fn acquire(
    locker: &Locker,
    conn: &Connection,
    resource: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let answer = match immediate(conn, |transaction| {
        locker.try_acquire(transaction, resource)
    })? {
        Acquire::Acquired { epoch, took_over } => match took_over {
            Some(takeover) => format!("acquired {epoch} {:?}", takeover.reason),
            None => format!("acquired {epoch} none"),
        },
        Acquire::Held {
            epoch, judgement, ..
        } => format!("held {epoch} {judgement}"),
    };
    Ok(answer)
}

fn fenced_write(
    locker: &Locker,
    conn: &Connection,
    resource: &str,
    epoch: u64,
) -> Result<String, Box<dyn std::error::Error>> {
    under_epoch(conn, format!("fenced {epoch}"), |transaction| {
        locker.fence(transaction, resource, epoch)?;
        transaction.execute(
            "INSERT INTO fenced_writes (resource, epoch, pid) VALUES (?1, ?2, ?3)",
            params![resource, epoch as i64, std::process::id()],
        )?;
        Ok(())
    })
}

/// Runs `work` in its own `BEGIN IMMEDIATE` transaction and commits it, answering `done`. A lost
/// lock is an answer, `lost <error>`, not a failure: dropping the transaction rolls it back, so
/// nothing is written under a stale epoch.
fn under_epoch(
    conn: &Connection,
    done: String,
    work: impl FnOnce(&Connection) -> durably_lock::Result<()>,
) -> Result<String, Box<dyn std::error::Error>> {
    match immediate(conn, work) {
        Ok(()) => Ok(done),
        Err(error @ Error::LockLost { .. }) => Ok(format!("lost {error}")),
        Err(error) => Err(error.into()),
    }
}
