//! Test helper for `pg_ownership.rs`: holds one execution of a journal on PostgreSQL in its own
//! process, so the test can SIGKILL it, stop it, or terminate its liveness session, and then
//! ask it to write. It prints one JSON line per answer on stdout.
//!
//! Usage: `pg_holder <url> <execution-id> <lease-ms|none>`. It opens the journal (no orphan
//! sweep), opens the execution, records the guarded step `first` (a guarded step writes its
//! intent at once, so every step is a write), and prints
//! `{"ready":"<instance-id>"}`. Then, one command per line on stdin, until stdin closes:
//!
//! - `step <name>`: records the guarded step `<name>` (policy `Fail`); prints `{"step":"ok"}`, or
//!   `{"step":"error","kind":"lock_lost"|"instance_lost"|"other","message":...}`.
//! - `await-lost`: waits until the journal's liveness session is known lost (its ping failed),
//!   at most 20 s; prints `{"lost":true}`, or `{"lost":false}` past the bound.

use std::io::BufRead;
use std::time::{Duration, Instant};

use durably_journal::{Error, Guarded, Journal, Opened, Policy};
use durably_tests::worker_io::say;
use serde_json::{Value, json};
use uuid::Uuid;

type Outcome<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// How long `await-lost` waits for the ping to notice.
const LOST_WAIT_MAX: Duration = Duration::from_secs(20);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Outcome {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, id, lease] = args.as_slice() else {
        return Err(
            format!("usage: pg_holder <url> <execution-id> <lease-ms|none>, not {args:?}").into(),
        );
    };
    let id: Uuid = id.parse()?;
    let mut builder = Journal::builder(url.as_str()).sweep_on_open(false);
    if lease != "none" {
        builder = builder.lease_ms(lease.parse()?);
    }
    let journal = builder.open()?;
    let Opened::Running(execution) = journal.open_execution(id, "worker", "pg", &"input").await?
    else {
        return Err("the execution was already finished".into());
    };
    let Guarded::Done(_) = execution
        .guarded("first", Policy::Fail, |_key| async { Ok(1_u32) })
        .await?
    else {
        return Err("a fresh Fail step was skipped".into());
    };
    say(&json!({ "ready": journal.locker().instance_id().to_string() }))?;

    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let answer = match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["step", name] => match execution
                .guarded(name, Policy::Fail, |_key| async { Ok(2_u32) })
                .await
            {
                Ok(_) => json!({ "step": "ok" }),
                Err(error) => error_json(&error),
            },
            ["await-lost"] => json!({ "lost": await_lost(&journal) }),
            _ => return Err(format!("unknown command {line:?}").into()),
        };
        say(&answer)?;
    }
    Ok(())
}

fn error_json(error: &Error) -> Value {
    let kind = match error {
        Error::LockLost(_) => "lock_lost",
        Error::InstanceLost { .. } => "instance_lost",
        _ => "other",
    };
    json!({ "step": "error", "kind": kind, "message": error.to_string() })
}

fn await_lost(journal: &Journal) -> bool {
    let Some(session) = journal.locker().session() else {
        return false;
    };
    let started = Instant::now();
    while !session.is_lost() {
        if started.elapsed() > LOST_WAIT_MAX {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}
