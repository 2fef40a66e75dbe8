//! `durably start KIND JSON [...] [--wait [DUR]]`: starts an execution of a workflow kind that
//! some runtime on this journal serves (this tool runs none), durable when the command returns;
//! with `--wait`, waits for its outcome. Every refusal writes nothing.

use std::fmt::Write as _;
use std::time::Duration;

use durably::Status;
use durably::runtime::{Client, Error, OnDuplicate, StartOptions, StartOutcome, WorkflowHandle};
use serde::Serialize;
use serde::de::IgnoredAny;
use uuid::Uuid;

use crate::cli::StartArgs;
use crate::db::Target;
use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::error_fields;
use crate::escape::preview_opt;
use crate::output::{print, print_json};

/// `start --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Started {
    execution_id: String,
    /// `new`, or `existing` when the id (or the deduplication key) named an execution
    /// already; nothing was written then.
    outcome: &'static str,
    /// Its status when the command returned.
    status: String,
    output_preview: Option<String>,
    error_preview: Option<String>,
}

/// What `--wait` saw.
enum Waited {
    /// It completed.
    Completed,
    /// It failed or was cancelled: the runtime's error says which.
    Ended(Error),
    /// It is stuck or awaits an operator: nothing moves it on until an operator acts.
    NeedsOperator,
    /// It had not ended in time.
    TimedOut(Duration),
}

/// How often `--wait` checks whether the execution is stuck or awaits an operator. Its end
/// wakes the wait at once, through the runtime's watcher; these states only end a wait that
/// would otherwise last until an operator acts.
const OPERATOR_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Waits until the execution ends, needs an operator, or `limit` has passed.
async fn wait(handle: &WorkflowHandle<IgnoredAny>, limit: Option<Duration>) -> Result<Waited> {
    let needs_operator = async {
        loop {
            tokio::time::sleep(OPERATOR_CHECK_INTERVAL).await;
            if matches!(handle.status()?, Status::Stuck | Status::AwaitingOperator) {
                return Ok::<_, Error>(Waited::NeedsOperator);
            }
        }
    };
    let waited = async {
        tokio::select! {
            ended = handle.result() => ended.map(|_| Waited::Completed),
            parked = needs_operator => parked,
        }
    };
    let waited = match limit {
        None => waited.await,
        Some(limit) => tokio::time::timeout(limit, waited)
            .await
            .unwrap_or(Ok(Waited::TimedOut(limit))),
    };
    Ok(waited.or_else(|error| match error {
        Error::WorkflowFailed { .. } | Error::Cancelled { .. } => Ok(Waited::Ended(error)),
        error => Err(error),
    })?)
}

/// Starts the execution, and waits for it when asked.
pub fn run(target: &Target, args: &StartArgs, json: bool) -> Result<()> {
    let runtime = crate::db::runtime()?;
    let client = target.client(&runtime, |_| {
        // No runtime has used this journal, so none has registered the kind.
        Ok(Error::UnknownKind {
            kind: args.kind.clone(),
        }
        .into())
    })?;
    let id = args.id.unwrap_or_else(durably::new_execution_id);
    let (handle, outcome) = runtime.block_on(client.start_with_outcome::<_, IgnoredAny>(
        &args.kind,
        id,
        &args.input,
        options(args),
    ))?;
    let id = handle.id();
    let waited = args
        .wait
        .map(|limit| runtime.block_on(wait(&handle, limit.map(Duration::from))))
        .transpose()?;
    let started = started(&client, id, outcome)?;
    if json {
        print_json(&started)?;
    } else {
        print(&render(&started, waited.is_some()))?;
    }
    match waited {
        None | Some(Waited::Completed) => Ok(()),
        Some(Waited::Ended(error)) => {
            Err(ended(&error, &started).with(error_fields::execution(&id)))
        }
        Some(Waited::NeedsOperator) => Err(CliError::new(
            ErrorCode::NeedsOperator,
            format!(
                "execution {id} is {}: it runs again only after an operator acts",
                started.status
            ),
        )
        .with(error_fields::execution(&id))
        .hint(format!(
            "`durably show {id}` says why; `durably resume {id}` once a stuck execution's \
             cause is fixed, `durably resolve` for a step awaiting an operator"
        ))),
        Some(Waited::TimedOut(limit)) => Err(CliError::new(
            ErrorCode::WaitTimedOut,
            format!(
                "execution {id} has not ended after {}: it is {}",
                humantime::format_duration(limit),
                started.status
            ),
        )
        .with(error_fields::execution(&id))
        .hint(format!(
            "`durably show {id}` shows where it is; start it again with `--id {id} --wait` to \
             wait for it again"
        ))),
    }
}

/// The start options the command line gives.
fn options(args: &StartArgs) -> StartOptions {
    let mut options = StartOptions::default().priority(args.priority);
    if let Some(queue) = &args.queue {
        options = options.queue(queue);
    }
    if let Some(at) = args.not_before {
        options = options.not_before(at);
    }
    if let Some(deadline) = args.deadline {
        options = options.deadline(deadline);
    }
    if let Some(key) = &args.dedup {
        let on_duplicate = if args.dedup_return {
            OnDuplicate::ReturnExisting
        } else {
            OnDuplicate::Reject
        };
        options = options.dedup(key, on_duplicate);
    }
    options
}

/// The execution as it is now, with previews of its output or error.
fn started(client: &Client, id: Uuid, outcome: StartOutcome) -> Result<Started> {
    let record = client.journal().previews().get(id)?.ok_or_else(|| {
        // Only retention removes an execution, and only a finished one, long after the end.
        CliError::new(
            ErrorCode::NotFound,
            format!("execution {id} was started, but is gone from the journal already"),
        )
        .with(error_fields::execution(&id))
        .hint(
            "a retention sweep (`durably gc`) may have removed it; `durably ls` lists what is left",
        )
    })?;
    Ok(Started {
        execution_id: id.to_string(),
        outcome: match outcome {
            StartOutcome::New => "new",
            _ => "existing",
        },
        status: record.status.as_str().to_owned(),
        output_preview: preview_opt(record.output.as_ref()),
        error_preview: preview_opt(record.error.as_ref()),
    })
}

fn render(started: &Started, waited: bool) -> String {
    let (id, status) = (&started.execution_id, &started.status);
    let mut text = format!("{} execution {id} ({status})\n", started.outcome);
    if waited && let Some(output) = &started.output_preview {
        let _ = writeln!(text, "output: {output}");
    }
    text
}

/// The error of a `--wait` that saw the execution fail or be cancelled: what it recorded, as
/// a preview.
fn ended(error: &Error, started: &Started) -> CliError {
    let id = &started.execution_id;
    let recorded = started
        .error_preview
        .as_deref()
        .unwrap_or("no error recorded");
    let (code, message) = match error {
        Error::Cancelled { .. } => (
            ErrorCode::ExecutionCancelled,
            format!("execution {id} was cancelled: {recorded}"),
        ),
        _ => (
            ErrorCode::ExecutionFailed,
            format!("execution {id} failed: {recorded}"),
        ),
    };
    CliError::new(code, message).hint(format!(
        "`durably show {id}` shows its steps and audit trail"
    ))
}
