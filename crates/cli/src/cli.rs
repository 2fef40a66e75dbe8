//! The command line, as clap sees it. Parsing of values (ids, JSON, durations, times) happens
//! here, so a bad value is a usage error (exit code 2) with clap's message.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use durably::operator::{SeenIntent, SeenIntentParseError};
use uuid::Uuid;

use crate::demo::scheduled::SchedulerArgs;
use crate::demo::worker::WorkerArgs;

/// The most rows `ls` and `fires` print in one call.
pub const LIST_LIMIT_MAX: u32 = 10_000;

const AFTER_HELP: &str = "\
Exit codes: 0 ok, 1 the command failed (missing or foreign database, refused operator action, \
refused start or send, start --wait that did not complete, storage error), 2 the command line \
is wrong (unknown flag, bad id, bad JSON, bad duration, a name with a control character). \
Errors print as `durably: error: ...` and `durably: hint: ...` on standard error, or with \
--json as one JSON object {code, message, hint, exit_code, ...}: code is stable (the codes \
are listed in docs/cli.md), and ids and paths the error names are fields of their own.

Reading commands (ls, show, locks, fires, sweep --dry-run) only read: they never create, \
migrate or change a file, and read access to the journal is enough. sweep, cancel and gc first \
run SQLite's integrity check and refuse a journal that fails it, unless given --force. \
start, send, resume, fork and patches go through the runtime (durably::runtime) and need a \
journal that a runtime has used; they refuse what a program's call would refuse, and a refusal writes nothing. \
Every reading command takes --json; its fields are listed in docs/cli.md and are stable. \
Text from the database is printed with control characters escaped (ESC prints as \\e).";

/// Inspect and operate a durably journal, or watch the demo.
#[derive(Debug, Parser)]
#[command(name = "durably", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// The journal: a SQLite database file, or a PostgreSQL URL (`postgres://…`, in a build
    /// with the `postgres` feature); without it, the DURABLY_DB environment variable.
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,

    /// How long one read of the journal may run before it is stopped (`30s`, `5min`).
    #[arg(long, global = true, value_name = "DUR", default_value_t = read_timeout_default(), value_parser = parse_timeout)]
    pub read_timeout: humantime::Duration,

    /// Print JSON instead of tables, and errors as JSON (fields and error codes documented in
    /// docs/cli.md).
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List executions, newest first.
    Ls(LsArgs),
    /// Show one execution: its row, a page of its steps and a page of its audit events.
    Show(ShowArgs),
    /// List held locks, their holders, and whether each holder is alive.
    Locks,
    /// Run the crash-orphan sweep: reclaim executions whose process died.
    Sweep {
        /// Report what would be reclaimed; change nothing (and only read the journal).
        #[arg(long)]
        dry_run: bool,
        /// Sweep even a journal that fails SQLite's integrity check.
        #[arg(long)]
        force: bool,
    },
    /// Run the retention sweep: delete old finalized executions.
    Gc(GcArgs),
    /// Answer for a step stuck in the ambiguous window (intent recorded, no result).
    Resolve(ResolveArgs),
    /// Cancel an execution. One that no live process runs is cancelled at once; the process
    /// that runs one is asked to stop, and ends it cancelled before its next step (a guarded
    /// step already running finishes first). It does not run again unless resumed.
    Cancel {
        /// The execution id (a UUID; `durably ls` lists them).
        #[arg(value_parser = parse_execution_id)]
        id: Uuid,
        /// Why, recorded in the execution's error and the audit trail.
        #[arg(long, default_value = "cancelled by an operator with `durably cancel`")]
        reason: String,
        /// Cancel even in a journal that fails SQLite's integrity check.
        #[arg(long)]
        force: bool,
    },
    /// Start an execution of a workflow kind that a runtime on this journal serves.
    Start(StartArgs),
    /// Send a message to an execution, for its `recv` on the topic.
    Send(SendArgs),
    /// Put a stuck or cancelled execution back in its queue, to continue from its last step.
    Resume(ResumeArgs),
    /// Start a new execution that copies an ended one's steps before a seq and runs the rest
    /// on current code (to recover a stuck or wrongly finished run).
    Fork(ForkArgs),
    /// List the unfinished executions that still need a patch's branches (`patched` answered
    /// false, or its marker recorded), to know when a patch's old branch can go.
    Patches(PatchesArgs),
    /// List scheduler fires (the slot ledger), newest slot first.
    Fires {
        /// Only this job.
        #[arg(long)]
        job: Option<String>,
        /// At most this many rows (1 to 10000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(LIST_LIMIT_MAX)))]
        limit: u32,
    },
    /// List the scheduled jobs, or pause, resume, trigger or backfill one.
    Schedules {
        /// What to do; without it, list every job.
        #[command(subcommand)]
        action: Option<SchedulesAction>,
    },
    /// Print the execution id of a scheduler fire (job, slot). Needs no database.
    FireId {
        /// The job id.
        job: String,
        /// The slot, RFC 3339 (`2026-01-01T02:00:00Z`).
        slot: String,
    },
    /// Copy the whole journal into an empty database: a SQLite file into PostgreSQL
    /// (`--to postgresql://…`), or back. Refused while a live process holds a lock of the
    /// source, when the destination holds rows, or when the schema versions differ; one
    /// transaction, verified by each table's row count and digest before it commits.
    Copy {
        /// The journal to copy: a SQLite file, or a PostgreSQL URL.
        #[arg(long, value_name = "SOURCE")]
        from: PathBuf,
        /// The empty destination: a PostgreSQL URL (its schema is the URL's `search_path`),
        /// or a SQLite file; created and migrated if new.
        #[arg(long, value_name = "DESTINATION")]
        to: PathBuf,
    },
    /// Run the demo: a workflow killed mid-effect and resumed under each ambiguity policy.
    ///
    /// Without --db it deletes and recreates ./durably-demo.db; with --db PATH it uses that
    /// path and refuses one that exists and is not empty. DURABLY_DB is ignored, so the demo
    /// never writes into a real journal. With --json, only an error is printed as JSON.
    Demo,
    /// The demo's child process (internal).
    #[command(hide = true)]
    DemoWorker(WorkerArgs),
    /// The demo's scheduler process (internal).
    #[command(hide = true)]
    DemoScheduler(SchedulerArgs),
}

/// What `durably schedules` does to one job.
#[derive(Debug, Subcommand)]
pub enum SchedulesAction {
    /// Stop firing the job in every process until it is resumed.
    Pause {
        /// The job id.
        job: String,
    },
    /// Fire the job again; its catch-up policy decides the slots missed while paused.
    Resume {
        /// The job id.
        job: String,
    },
    /// Start the job's upcoming slot now (once: the slot does not fire again at its time).
    Trigger {
        /// The job id.
        job: String,
    },
    /// Start every slot of a range not fired yet, each once.
    Backfill {
        /// The job id.
        job: String,
        /// The range's first instant, RFC 3339 (`2026-01-01T00:00:00Z`).
        #[arg(long)]
        from: String,
        /// The range's last instant, RFC 3339, at or before now.
        #[arg(long)]
        to: String,
    },
}

impl SchedulesAction {
    /// The job the action names.
    pub fn job(&self) -> &str {
        match self {
            Self::Pause { job }
            | Self::Resume { job }
            | Self::Trigger { job }
            | Self::Backfill { job, .. } => job,
        }
    }
}

/// Arguments of `ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only executions with this status.
    #[arg(long, value_enum)]
    pub status: Option<StatusArg>,
    /// Only executions of this runtime queue.
    #[arg(long, value_name = "Q")]
    pub queue: Option<String>,
    /// Only executions with a cancel request that their process has not acted on yet.
    #[arg(long)]
    pub cancel_requested: bool,
    /// Only executions of this kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only the children of this execution (those its steps started), in the order they
    /// were started.
    #[arg(long, value_name = "ID", value_parser = parse_execution_id,
          conflicts_with_all = ["queue", "cancel_requested", "name", "since"])]
    pub parent: Option<Uuid>,
    /// Only executions whose name contains this text.
    #[arg(long)]
    pub name: Option<String>,
    /// Only executions created since: an RFC 3339 time, or an age such as `2h` or `7d`.
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// At most this many rows (1 to 10000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(LIST_LIMIT_MAX)))]
    pub limit: u32,
}

/// How many steps, and how many audit events, `show` prints when not told.
pub const SHOW_LIMIT_DEFAULT: u32 = 100;

/// Arguments of `show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The execution id (a UUID; `durably ls` lists them).
    #[arg(value_parser = parse_execution_id)]
    pub id: Uuid,
    /// At most this many steps, and this many audit events (1 to 10000).
    #[arg(long, default_value_t = SHOW_LIMIT_DEFAULT, value_parser = clap::value_parser!(u32).range(1..=i64::from(LIST_LIMIT_MAX)))]
    pub limit: u32,
    /// Show the steps after this seq (`show` prints the one that starts the next page).
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u32>,
    /// Show the audit events after this event id (`show` prints the one that starts the next
    /// page).
    #[arg(long, value_name = "ID")]
    pub events_after: Option<i64>,
    /// Show the messages older than this message id (`show` prints the one that starts the
    /// next page).
    #[arg(long, value_name = "ID")]
    pub messages_before: Option<i64>,
    /// Show the workflow events set before step SEQ (`show` prints the one that starts the
    /// next page).
    #[arg(long, value_name = "SEQ")]
    pub workflow_events_before: Option<u32>,
}

/// An execution status, as `ls --status` takes it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StatusArg {
    /// Waiting for a runtime to claim it (in its queue, or until its not-before time).
    Queued,
    /// Being driven, or abandoned and not yet swept.
    Running,
    /// Parked until a time or a message.
    Waiting,
    /// Its process died; resumable.
    Interrupted,
    /// Failed to resume too many times in a row; `durably resume` moves it on.
    Stuck,
    /// A step in the ambiguous window waits for `durably resolve`.
    AwaitingOperator,
    /// Finished with an output.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled by an operator.
    Cancelled,
}

impl StatusArg {
    /// The journal's status.
    pub fn status(self) -> durably::Status {
        use durably::Status;
        match self {
            Self::Queued => Status::Queued,
            Self::Running => Status::Running,
            Self::Waiting => Status::Waiting,
            Self::Interrupted => Status::Interrupted,
            Self::Stuck => Status::Stuck,
            Self::AwaitingOperator => Status::AwaitingOperator,
            Self::Completed => Status::Completed,
            Self::Failed => Status::Failed,
            Self::Cancelled => Status::Cancelled,
        }
    }
}

/// Arguments of `start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// The workflow kind, as a runtime on this journal registered it.
    pub kind: String,
    /// The input, as JSON (quote it for the shell: '{"order": 42}').
    #[arg(value_name = "JSON", value_parser = parse_json, allow_negative_numbers = true)]
    pub input: serde_json::Value,
    /// The execution id; without it, a new one. Starting an id again returns that execution.
    #[arg(long, value_name = "UUID", value_parser = parse_execution_id)]
    pub id: Option<Uuid>,
    /// The queue to run in; a runtime must have configured it.
    #[arg(long, value_name = "Q")]
    pub queue: Option<String>,
    /// Its priority in the queue: larger runs first.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub priority: i32,
    /// Not before this time: RFC 3339, or a delay from now such as `30min`.
    #[arg(long, value_name = "WHEN", value_parser = parse_when)]
    pub not_before: Option<chrono::DateTime<chrono::Utc>>,
    /// Cancel it (reason `timeout`) if it has not ended after this long (`2h`, `7d`), or at
    /// this RFC 3339 time.
    #[arg(long, value_name = "DUR", value_parser = parse_deadline)]
    pub deadline: Option<Deadline>,
    /// A deduplication key: while an unfinished execution of the queue holds it, the start
    /// is refused (or, with --dedup-return, returns that execution).
    #[arg(long, value_name = "KEY")]
    pub dedup: Option<String>,
    /// With --dedup: return the execution that holds the key instead of refusing.
    #[arg(long, requires = "dedup")]
    pub dedup_return: bool,
    /// Wait for the outcome and print it, at most DUR when given (`--wait 30s`). Exit code 0
    /// when it completed, 1 when it failed, was cancelled or had not ended in time.
    #[arg(long, value_name = "DUR", num_args = 0..=1, value_parser = parse_age)]
    // clap's form of a flag whose value is optional: absent, bare, or with a value.
    #[allow(clippy::option_option)]
    pub wait: Option<Option<humantime::Duration>>,
}

/// Arguments of `send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The receiving execution's id.
    #[arg(value_parser = parse_execution_id)]
    pub id: Uuid,
    /// The topic its `recv` waits on.
    pub topic: String,
    /// The message, as JSON (quote it for the shell: '{"approved": true}').
    #[arg(value_name = "JSON", value_parser = parse_json, allow_negative_numbers = true)]
    pub message: serde_json::Value,
    /// An idempotency key: the same key sent again to this execution delivers nothing more.
    #[arg(long, value_name = "K")]
    pub key: Option<String>,
}

/// Arguments of `resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The execution id (a UUID; `durably ls --status stuck` lists the stuck ones).
    #[arg(value_parser = parse_execution_id)]
    pub id: Uuid,
    /// A new deadline: cancel it (reason `timeout`) if it has not ended after this long
    /// (`2h`, `7d`), or at this RFC 3339 time. Without it, the old deadline is cleared.
    #[arg(long, value_name = "DUR", value_parser = parse_deadline)]
    pub deadline: Option<Deadline>,
}

/// Arguments of `fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The execution to fork (a UUID): completed, failed, cancelled or stuck.
    #[arg(value_parser = parse_execution_id)]
    pub id: Uuid,
    /// Copy the steps with a seq below this (`durably show ID` lists them); the fork runs the
    /// rest. Steps at or after it run under new idempotency keys, so their effects can happen
    /// again.
    #[arg(long, value_name = "N")]
    pub from_seq: u32,
    /// Run the fork on this version of the workflow kind instead of the original's.
    #[arg(long, value_name = "V")]
    pub version: Option<u32>,
}

/// Arguments of `patches`.
#[derive(Debug, Args)]
pub struct PatchesArgs {
    /// The patch id, as the workflow code passes it to `patched`.
    pub patch: String,
}

/// Arguments of `gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Delete completed executions finalized longer ago than this (`7d`, `12h`, `90min`).
    /// Default 7d.
    #[arg(long, value_name = "DUR", value_parser = parse_age)]
    pub completed_older_than: Option<humantime::Duration>,
    /// Delete failed and cancelled executions finalized longer ago than this. Default 30d.
    #[arg(long, value_name = "DUR", value_parser = parse_age)]
    pub failed_older_than: Option<humantime::Duration>,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete even from a journal that fails SQLite's integrity check.
    #[arg(long)]
    pub force: bool,
}

/// Arguments of `resolve`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("answer").required(true).args(["completed", "not_done"]))]
pub struct ResolveArgs {
    /// The execution id (a UUID; `durably ls` lists them).
    #[arg(value_parser = parse_execution_id)]
    pub id: Uuid,
    /// The step's sequence number (`durably show ID` lists them).
    pub seq: u32,
    /// The effect happened, and this JSON is its result: replay returns it.
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    pub completed: Option<serde_json::Value>,
    /// The effect did not happen: the next run executes the step, with the same key.
    #[arg(long)]
    pub not_done: bool,
    /// The intent you checked, as `durably show ID` printed it (like `a1-r0`). The answer is
    /// then refused if the step ran again or was answered since, instead of being applied to
    /// an intent nobody checked.
    #[arg(long, value_name = "TOKEN", value_parser = parse_seen)]
    pub seen: Option<SeenIntent>,
}

fn parse_execution_id(text: &str) -> Result<Uuid, String> {
    Uuid::parse_str(text).map_err(|error| {
        format!(
            "not an execution id ({error}); give its UUID, like \
             0190a0b2-7c3e-7d41-9a8f-2b1c3d4e5f60 (`durably ls` lists them)"
        )
    })
}

/// When an execution must end: `In` a duration from now, or `At` an instant.
pub type Deadline = durably::runtime::Deadline;

fn parse_when(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&chrono::Utc));
    }
    let delay = humantime::parse_duration(text).map_err(|error| {
        format!(
            "{text:?} is neither an RFC 3339 time (2026-01-31T12:00:00Z) nor a delay (30min, \
             2h): as a delay, {error}"
        )
    })?;
    chrono::Duration::from_std(delay)
        .ok()
        .and_then(|delay| chrono::Utc::now().checked_add_signed(delay))
        .ok_or_else(|| format!("a delay of {text} reaches past the latest time durably can name"))
}

fn parse_deadline(text: &str) -> Result<Deadline, String> {
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(Deadline::At(time.with_timezone(&chrono::Utc)));
    }
    humantime::parse_duration(text)
        .map(Deadline::In)
        .map_err(|error| {
            format!(
                "{text:?} is neither a duration (2h, 7d) nor an RFC 3339 time \
                 (2026-01-31T12:00:00Z): as a duration, {error}"
            )
        })
}

fn parse_seen(text: &str) -> Result<SeenIntent, String> {
    text.parse()
        .map_err(|error: SeenIntentParseError| error.to_string())
}

fn parse_age(text: &str) -> Result<humantime::Duration, String> {
    text.parse::<humantime::Duration>()
        .map_err(|error| format!("not an age ({error}); write it like 7d, 12h or 90min"))
}

fn parse_json(text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|error| {
        format!("not valid JSON ({error}); quote it for the shell, e.g. '{{\"receipt\": \"r-1\"}}'")
    })
}

fn parse_since(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&chrono::Utc));
    }
    let too_far = || {
        format!(
            "the age {text} reaches back before the earliest time durably can name; to list \
             executions of any age, leave --since out"
        )
    };
    match humantime::parse_duration(text) {
        Ok(age) => chrono::Duration::from_std(age)
            .ok()
            .and_then(|age| chrono::Utc::now().checked_sub_signed(age))
            .ok_or_else(too_far),
        Err(humantime::DurationError::NumberOverflow) => Err(too_far()),
        Err(error) => Err(format!(
            "{text:?} is neither an RFC 3339 time (2026-01-31T12:00:00Z) nor an age (2h, 7d): \
             as an age, {error}"
        )),
    }
}

/// The library's default read timeout, as `--read-timeout` shows and takes it.
fn read_timeout_default() -> humantime::Duration {
    std::time::Duration::from_millis(durably::defaults::READ_TIMEOUT_MS_DEFAULT).into()
}

fn parse_timeout(text: &str) -> Result<humantime::Duration, String> {
    let timeout = parse_age(text)?;
    if timeout.as_millis() == 0 {
        return Err("a read timeout of zero would stop every read; give at least 1ms".to_owned());
    }
    Ok(timeout)
}
