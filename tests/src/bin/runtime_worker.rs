//! Test helper for the `runtime_*` integration tests: runs a workflow through
//! `Runtime::run` (deferred open, write-behind) in its own process, so the tests can crash it
//! at a failpoint or race two of it on one execution id. It prints JSON lines on stdout.
//!
//! Usage: `run <db> <ledger> <execution-id> <go|gate>`. Opens the journal, starts a runtime
//! serving kind `deferred` and runs execution `<execution-id>` of it to its end, then prints
//! `{"outcome":"done","output":...}` (or the error). The workflow:
//!
//! 0. idempotent `reserve`: appends `reserve <id> <key> <token> <pid>` to the ledger, returns
//!    this process's pid. With `gate`, it then prints `{"inside":<pid>}` and waits for a line
//!    on stdin (the race test lets two processes reach it before either writes);
//! 1. pure `draw`: returns a random number (different on every run of the step);
//! 2. idempotent `notify`: appends `notify <id> <key> <token> <draw>`;
//! 3. guarded `charge` under `Retry`: appends `charge <id> <key> <token> <draw>`;
//! 4. pure `summarize`: prints `{"summarized":<pid>}`.
//!
//! The output is `{"reserved_by": pid, "draw": n}`. Each ledger line is one `write` on an
//! `O_APPEND` file, so lines of processes never interleave and a crash right after one keeps
//! it. Built with the `failpoints` feature, `FAILPOINTS` makes it abort where it says.

use std::path::{Path, PathBuf};

use durably::runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError};
use durably::{Guarded, Journal, Policy, StepError};
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
    let ["run", db, ledger, id, gate] = words.as_slice() else {
        return Err(format!("unknown command {args:?}").into());
    };
    let gate = match *gate {
        "gate" => true,
        "go" => false,
        other => return Err(format!("go or gate, not {other:?}").into()),
    };
    let answer = run(Path::new(db), PathBuf::from(ledger), id.parse()?, gate).await?;
    Ok(say(&answer)?)
}

async fn workflow(
    context: WorkflowContext,
    (ledger, gate): (PathBuf, bool),
) -> Result<Value, WorkflowError> {
    let id = context.id();
    let pid = std::process::id();
    let reserved_by: u32 = context
        .idempotent("reserve", |key| {
            let ledger = ledger.clone();
            async move {
                let token = key.fencing_token();
                append(&ledger, &format!("reserve {id} {key} {token} {pid}"))?;
                if gate {
                    say(&json!({ "inside": pid }))
                        .map_err(|error| StepError::fatal(error.to_string()))?;
                    wait_for_a_line().await?;
                }
                Ok(pid)
            }
        })
        .await?;
    let draw: u64 = context
        .pure("draw", || async {
            Ok(u64::try_from(Uuid::new_v4().as_u128() >> 65).unwrap_or(0))
        })
        .await?;
    let effect = |step: &'static str| {
        let ledger = ledger.clone();
        move |key: durably::StepKey| {
            let ledger = ledger.clone();
            async move {
                let token = key.fencing_token();
                append(&ledger, &format!("{step} {id} {key} {token} {draw}"))?;
                Ok(draw)
            }
        }
    };
    context.idempotent("notify", effect("notify")).await?;
    let charged = context
        .guarded("charge", Policy::Retry, effect("charge"))
        .await?;
    let Guarded::Done(_) = charged else {
        return Err(WorkflowError::new("the charge was skipped"));
    };
    context
        .pure("summarize", || async move {
            say(&json!({ "summarized": pid })).map_err(|error| StepError::fatal(error.to_string()))
        })
        .await?;
    Ok(json!({ "reserved_by": reserved_by, "draw": draw }))
}

async fn run(db: &Path, ledger: PathBuf, id: Uuid, gate: bool) -> Outcome<Value> {
    let journal = Journal::open(db)?;
    let runtime = Runtime::builder(journal)
        .register("deferred", 1, move |context: WorkflowContext, (): ()| {
            workflow(context, (ledger.clone(), gate))
        })
        .start()
        .await?;
    Ok(
        match runtime
            .run::<_, Value>("deferred", id, &(), StartOptions::default())
            .await
        {
            Ok(output) => json!({ "outcome": "done", "output": output }),
            Err(error) => json!({ "outcome": "error", "message": error.to_string() }),
        },
    )
}
