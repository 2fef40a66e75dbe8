//! Test helper for the `journal_*` integration tests and `faults.rs`: drives a journal in its
//! own process, so the tests can crash it (at a failpoint, or with SIGKILL), run it as another
//! user, or race several of it against one file. It prints one JSON line per result on stdout.
//!
//! Usage, one command per run:
//!
//! - `guarded <db> <ledger> <execution-id> <policy>`: opens the execution, runs the pure step
//!   `prepare` and then the guarded step `charge` under `<policy>` (`skip`, `retry`, `fail`,
//!   `reconcile-some`, `reconcile-none`), and finalizes: completed with the value when done,
//!   failed when skipped. Every call of a closure appends `<step> <execution-id> <key>` to the
//!   ledger (`O_APPEND`, one write per line), a record the engine never writes. Built with the
//!   `failpoints` feature, `FAILPOINTS=journal::after-intent-commit=return` aborts the process
//!   right after the intent of `charge` commits.
//! - `race <db>`: waits for a line on stdin, then opens the journal (creating it if needed),
//!   runs a new execution with one guarded step and completes it.
//! - `hold <db> <execution-id>`: opens the execution, runs the pure step `held`, prints
//!   `{"held":<pid>}` and keeps the execution until stdin closes; then drops the handle
//!   without finalizing and exits.
//! - `hold-write <db>`: takes SQLite's write lock with `BEGIN IMMEDIATE` on a plain connection,
//!   prints `{"locked":<pid>}` and holds it until stdin closes.
//! - `open <db>`: only opens the journal, and reports the error if that fails.
//! - `fenced-effect <db> <sink> <execution-id> <lease-ms> <wait|go>`: opens the journal with a
//!   lease of `<lease-ms>` and no orphan sweep (so a dead holder is taken over by the open,
//!   with a `takeover` event), opens the execution and runs the guarded step `charge` under
//!   `Fail`. Its closure performs the effect on the effect sink at `<sink>`, an SQLite file
//!   that records the highest fencing token seen for each idempotency key and refuses a write
//!   with a lower one, and prints `{"effect":"accepted"|"refused","token":<token>}`. With
//!   `wait`, the closure first prints `{"inside":<token>}` and waits for a line on stdin (on a
//!   blocking thread: the lease heartbeat goes on meanwhile). A done step completes the
//!   execution.
//! - `hooked <db> <execution-id> <step|release>`: opens the execution (creating the side table
//!   `side (execution_id, seq, note)` first), runs the pure step `prepare`, then either the
//!   idempotent step `consume` through `step_with`, whose hook inserts a `consumed` row into
//!   `side`, and completes (`step`); or parks the execution `waiting` on topic `t` through
//!   `release_to`, whose hook inserts a `parked` row (`release`). Built with the `failpoints`
//!   feature, `journal::before-hooked-result-commit` and `journal::before-release-commit`
//!   abort between the hook and the commit.
//! - `inspect <db>`: opens the journal only to read it (`Journal::inspect`), and prints each
//!   execution's id and status and each lock holder's resource and verdict, or the error.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use durably_journal::{
    Effect, Error, Guarded, Journal, ListFilter, Opened, Policy, Release, StepError, Timing,
};
use durably_lock::Judgement;
use durably_tests::worker_io::{append, say, wait_for_a_line};
use serde_json::{Value, json};
use uuid::Uuid;

type Outcome<T = ()> = Result<T, Box<dyn std::error::Error>>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Outcome {
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let answer = match words.as_slice() {
        ["guarded", db, ledger, id, policy] => {
            guarded(Path::new(db), Path::new(ledger), id.parse()?, policy).await?
        }
        ["race", db] => race(Path::new(db)).await?,
        ["hold", db, id] => hold(Path::new(db), id.parse()?).await?,
        ["hold-write", db] => hold_write(Path::new(db))?,
        ["fenced-effect", db, sink, id, lease_ms, when] => {
            let wait = match *when {
                "wait" => true,
                "go" => false,
                other => return Err(format!("wait or go, not {other:?}").into()),
            };
            let place = (Path::new(db), Path::new(sink));
            fenced_effect(place, id.parse()?, lease_ms.parse()?, wait).await?
        }
        ["open", db] => match Journal::open(*db) {
            Ok(_) => json!({ "outcome": "opened" }),
            Err(error) => error_json(&error),
        },
        ["hooked", db, id, mode] => hooked(Path::new(db), id.parse()?, mode).await?,
        ["inspect", db] => inspect(Path::new(db)).unwrap_or_else(|error| error_json(&error)),
        _ => return Err(format!("unknown command {args:?}").into()),
    };
    Ok(say(&answer)?)
}

/// A short name for each error the tests tell apart.
fn kind(error: &Error) -> &'static str {
    match error {
        Error::Ambiguous { .. } => "ambiguous",
        Error::AwaitingOperator { .. } => "awaiting_operator",
        Error::Locked { .. } => "locked",
        Error::LockLost(_) => "lock_lost",
        Error::ReadOnly { .. } => "read_only",
        Error::Busy { .. } => "busy",
        Error::Corrupt { .. } => "corrupt",
        Error::ForeignDatabase { .. } => "foreign_database",
        Error::StepFailed { .. } => "step_failed",
        Error::LeaseExpiredHolderAlive { .. } => "lease_expired_holder_alive",
        Error::NeedsRecovery { .. } => "needs_recovery",
        Error::CannotOpen { .. } => "cannot_open",
        _ => "other",
    }
}

fn error_json(error: &Error) -> Value {
    json!({ "outcome": "error", "kind": kind(error), "message": error.to_string() })
}

fn policy_of(word: &str) -> Outcome<Policy> {
    Ok(match word {
        "skip" => Policy::Skip,
        "retry" => Policy::Retry,
        "fail" => Policy::Fail,
        "reconcile-some" => Policy::reconcile(|key| async move {
            Ok(Some(json!(format!("found by the probe with key {key}"))))
        }),
        "reconcile-none" => Policy::reconcile(|_key| async { Ok(None) }),
        other => return Err(format!("unknown policy {other:?}").into()),
    })
}

async fn guarded(db: &Path, ledger: &Path, id: Uuid, policy: &str) -> Outcome<Value> {
    let policy = policy_of(policy)?;
    let journal = Journal::open(db)?;
    let execution = match journal
        .open_execution(id, "worker", "guarded", &"input")
        .await
    {
        Ok(Opened::Running(execution)) => execution,
        Ok(Opened::Finished(finished)) => {
            return Ok(json!({
                "outcome": "finished",
                "status": finished.status.as_str(),
                "output": finished.output,
                "error": finished.error,
            }));
        }
        Err(error) => return Ok(error_json(&error)),
    };
    let prepared = execution
        .pure("prepare", || async {
            append(ledger, &format!("prepare {id} -"))?;
            Ok(42_u32)
        })
        .await;
    if let Err(error) = prepared {
        return Ok(error_json(&error));
    }
    let charged = execution
        .guarded("charge", policy, |key| async move {
            append(ledger, &format!("charge {id} {key}"))?;
            Ok::<_, StepError>(format!("charged with key {key}"))
        })
        .await;
    match charged {
        Ok(Guarded::Done(value)) => {
            execution.complete(&value).await?;
            Ok(json!({ "outcome": "done", "value": value }))
        }
        Ok(Guarded::Skipped(skipped)) => {
            execution.fail(&skipped.to_string()).await?;
            Ok(
                json!({ "outcome": "skipped", "seq": skipped.seq, "key": skipped.idempotency_key.to_string() }),
            )
        }
        Err(error) => Ok(error_json(&error)),
    }
}

async fn hooked(db: &Path, id: Uuid, mode: &str) -> Outcome<Value> {
    let journal = Journal::open(db)?;
    journal
        .write(|conn| {
            conn.execute_batch(
                "CREATE TABLE IF NOT EXISTS side (execution_id TEXT, seq INTEGER, note TEXT)",
            )?;
            Ok(())
        })
        .await?;
    let execution = match journal
        .open_execution(id, "worker", "hooked", &"input")
        .await
    {
        Ok(Opened::Running(execution)) => execution,
        Ok(Opened::Finished(finished)) => {
            return Ok(json!({ "outcome": "finished", "status": finished.status.as_str() }));
        }
        Err(error) => return Ok(error_json(&error)),
    };
    execution.pure("prepare", || async { Ok(1_u32) }).await?;
    let side = move |conn: &durably_db::Connection, seq: Option<u32>, note: &str| {
        conn.execute(
            "INSERT INTO side (execution_id, seq, note) VALUES (?1, ?2, ?3)",
            durably_db::params![id.to_string(), seq, note],
        )?;
        Ok(())
    };
    match mode {
        "step" => {
            let value: u32 = execution
                .step_with(
                    "consume",
                    Effect::Idempotent,
                    Timing::Now,
                    |_key| async { Ok(5) },
                    move |conn, step| side(conn, Some(step.seq), "consumed"),
                )
                .await?;
            execution.complete(&value).await?;
            Ok(json!({ "outcome": "done", "value": value }))
        }
        "release" => {
            let due_at = chrono::Utc::now() + chrono::TimeDelta::hours(1);
            let to = Release::Waiting {
                due_at,
                topic: Some("t".to_owned()),
            };
            execution
                .release_to(to, json!({ "waiting_for": "t" }), move |conn| {
                    side(conn, None, "parked")
                })
                .await?;
            Ok(json!({ "outcome": "released" }))
        }
        other => Err(format!("step or release, not {other:?}").into()),
    }
}

async fn race(db: &Path) -> Outcome<Value> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let journal = match Journal::open(db) {
        Ok(journal) => journal,
        Err(error) => return Ok(error_json(&error)),
    };
    let id = Uuid::new_v4();
    let execution = match journal.open_execution(id, "worker", "race", &"input").await {
        Ok(Opened::Running(execution)) => execution,
        Ok(Opened::Finished(_)) => return Err("a new execution was finished".into()),
        Err(error) => return Ok(error_json(&error)),
    };
    let step = execution
        .guarded("step", Policy::Fail, |_key| async {
            Ok::<_, StepError>(std::process::id())
        })
        .await;
    match step {
        Ok(Guarded::Done(pid)) => {
            execution.complete(&pid).await?;
            Ok(json!({ "outcome": "done", "execution": id.to_string() }))
        }
        Ok(Guarded::Skipped(_)) => Err("a fresh step was skipped".into()),
        Err(error) => Ok(error_json(&error)),
    }
}

async fn hold(db: &Path, id: Uuid) -> Outcome<Value> {
    let journal = Journal::open(db)?;
    let Opened::Running(execution) = journal
        .open_execution(id, "worker", "held", &"input")
        .await?
    else {
        return Err("the execution is already finished".into());
    };
    let pid = std::process::id();
    let _: u32 = execution.pure("held", || async move { Ok(pid) }).await?;
    say(&json!({ "held": pid }))?;
    // Until the test closes stdin (or kills this process).
    std::io::stdin().lock().lines().for_each(drop);
    drop(execution);
    Ok(json!({ "outcome": "dropped" }))
}

fn inspect(db: &Path) -> Result<Value, Error> {
    let inspector = Journal::inspect(db)?;
    let executions: Vec<Value> = inspector
        .list(&ListFilter::default())?
        .iter()
        .map(|record| json!({ "id": record.execution_id, "status": record.status.as_str() }))
        .collect();
    let holders: Vec<Value> = inspector
        .lock_holders()?
        .iter()
        .map(|(row, judgement)| {
            let verdict = match judgement {
                Judgement::Alive(_) => "alive",
                Judgement::Dead(_) => "dead",
                Judgement::Unknown(_) => "unknown",
            };
            json!({ "resource": row.resource, "verdict": verdict })
        })
        .collect();
    Ok(json!({ "outcome": "inspected", "executions": executions, "holders": holders }))
}

fn hold_write(db: &Path) -> Outcome<Value> {
    let conn = rusqlite::Connection::open(PathBuf::from(db))?;
    conn.execute_batch("BEGIN IMMEDIATE")?;
    say(&json!({ "locked": std::process::id() }))?;
    std::io::stdin().lock().lines().for_each(drop);
    conn.execute_batch("ROLLBACK")?;
    Ok(json!({ "outcome": "released" }))
}

/// `fenced-effect`: see the module documentation.
async fn fenced_effect(
    (db, sink): (&Path, &Path),
    id: Uuid,
    lease_ms: u64,
    wait: bool,
) -> Outcome<Value> {
    let journal = Journal::builder(db)
        .lease_ms(lease_ms)
        .sweep_on_open(false)
        .open()?;
    let execution = match journal
        .open_execution(id, "worker", "fenced", &"input")
        .await
    {
        Ok(Opened::Running(execution)) => execution,
        Ok(Opened::Finished(finished)) => {
            return Ok(json!({ "outcome": "finished", "status": finished.status.as_str() }));
        }
        Err(error) => return Ok(error_json(&error)),
    };
    let charged = execution
        .guarded("charge", Policy::Fail, |key| async move {
            let token = key.fencing_token().0;
            if wait {
                say(&json!({ "inside": token }))
                    .map_err(|error| StepError::fatal(error.to_string()))?;
                wait_for_a_line().await?;
            }
            let accepted = sink_write(sink, &key.idempotency_key().to_string(), token)?;
            let effect = if accepted { "accepted" } else { "refused" };
            say(&json!({ "effect": effect, "token": token }))
                .map_err(|error| StepError::fatal(error.to_string()))?;
            if accepted {
                Ok(token)
            } else {
                Err(StepError::fatal(
                    "the effect sink refused a stale fencing token",
                ))
            }
        })
        .await;
    match charged {
        Ok(Guarded::Done(token)) => {
            execution.complete(&token).await?;
            Ok(json!({ "outcome": "done", "token": token }))
        }
        Ok(Guarded::Skipped(_)) => Err("a Fail step was skipped".into()),
        Err(error) => Ok(error_json(&error)),
    }
}

/// Waits for a line on stdin on a blocking thread, so the runtime (and the lease heartbeat on
/// it) goes on meanwhile.
/// The effect sink: performs the effect of `key` with fencing `token`, unless a write with a
/// higher token has been seen for `key`, in which case it refuses. Every write, accepted or
/// refused, is logged in `writes`; `highest` keeps the highest token accepted per key.
fn sink_write(sink: &Path, key: &str, token: u64) -> Result<bool, StepError> {
    let write = || -> rusqlite::Result<bool> {
        let mut conn = rusqlite::Connection::open(sink)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        let transaction =
            conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        transaction.execute_batch(
            "CREATE TABLE IF NOT EXISTS highest (key TEXT PRIMARY KEY, token INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS writes (key TEXT NOT NULL, token INTEGER NOT NULL,
                                                outcome TEXT NOT NULL);",
        )?;
        let highest: Option<i64> = rusqlite::OptionalExtension::optional(transaction.query_row(
            "SELECT token FROM highest WHERE key = ?1",
            [key],
            |row| row.get(0),
        ))?;
        let token = i64::try_from(token).unwrap_or(i64::MAX);
        let accepted = highest.is_none_or(|highest| token >= highest);
        if accepted {
            transaction.execute(
                "INSERT INTO highest (key, token) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET token = excluded.token",
                rusqlite::params![key, token],
            )?;
        }
        let outcome = if accepted { "accepted" } else { "refused" };
        transaction.execute(
            "INSERT INTO writes (key, token, outcome) VALUES (?1, ?2, ?3)",
            rusqlite::params![key, token, outcome],
        )?;
        transaction.commit()?;
        Ok(accepted)
    };
    write().map_err(|error| StepError::fatal(format!("the effect sink failed: {error}")))
}
