//! `durably schedules [pause|resume|trigger|backfill]`: the scheduled jobs of a journal, and
//! their management. Works from the ledger alone, so it needs none of the jobs' code; the
//! fires it starts run in whatever runtime process serves the job's workflow.

use durably::Journal;
use durably::scheduler::{FireOutcome, JobId, Scheduler, Slot};
use serde::Serialize;

use crate::cli::SchedulesAction;
use crate::db::Target;
use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::escape::escape;
use crate::output::{or_dash, print, print_json, print_rows};

/// One row of `schedules --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Row {
    job: String,
    workflow: Option<String>,
    /// The schedule's definition (JSON text).
    schedule: Option<String>,
    next_slot: Option<String>,
    last_slot: Option<String>,
    paused: bool,
    /// Fires per state, for the states the job has.
    fires: std::collections::BTreeMap<String, u64>,
}

/// One fire a trigger or backfill decided, for `--json`. Stable fields.
#[derive(Debug, Serialize)]
struct Decided {
    job: String,
    slot: String,
    execution_id: String,
    /// `started`, `existing` (started or decided before; nothing started) or `skipped`.
    outcome: &'static str,
}

/// Runs the command.
pub fn run(target: &Target, action: Option<&SchedulesAction>, json: bool) -> Result<()> {
    let runtime = crate::db::runtime()?;
    let journal = target.open()?;
    if !ledger_present(&journal)? {
        return match action {
            None => print_rows::<Row>(&[], json, "no scheduled jobs", &[], |_| Vec::new()),
            Some(action) => Err(unknown(action.job())),
        };
    }
    let scheduler = runtime.block_on(async {
        let client = durably::runtime::Client::new(journal).await?;
        Ok::<_, CliError>(Scheduler::new(client).await?)
    })?;
    match action {
        None => list(&scheduler, json),
        Some(SchedulesAction::Pause { job }) => {
            let changed = runtime.block_on(scheduler.pause(&JobId::new(job)?))?;
            said(json, job, "paused", changed)
        }
        Some(SchedulesAction::Resume { job }) => {
            let changed = runtime.block_on(scheduler.resume(&JobId::new(job)?))?;
            said(json, job, "resumed", changed)
        }
        Some(SchedulesAction::Trigger { job }) => {
            let decided = runtime.block_on(scheduler.trigger(&JobId::new(job)?))?;
            print_decided(job, &[decided], json)
        }
        Some(SchedulesAction::Backfill { job, from, to }) => {
            let (from, to) = (slot(from, "--from")?, slot(to, "--to")?);
            let decided = runtime.block_on(scheduler.backfill(&JobId::new(job)?, from, to))?;
            print_decided(job, &decided, json)
        }
    }
}

/// Whether a scheduler ever created its ledger in this journal.
fn ledger_present(journal: &Journal) -> Result<bool> {
    Ok(journal.read(|conn| crate::catalog::table_present(conn, "jobs"))?)
}

fn unknown(job: &str) -> CliError {
    CliError::from(durably::scheduler::Error::UnknownJob {
        job: job.to_owned(),
    })
}

fn list(scheduler: &Scheduler, json: bool) -> Result<()> {
    let rows: Vec<Row> = scheduler
        .schedules()?
        .into_iter()
        .map(|summary| Row {
            job: escape(summary.job.as_str()),
            workflow: summary.workflow.as_deref().map(escape),
            schedule: summary.schedule,
            next_slot: summary.next_slot.map(Slot::to_rfc3339),
            last_slot: summary.last_slot.map(Slot::to_rfc3339),
            paused: summary.paused,
            fires: summary
                .fires
                .iter()
                .map(|(state, count)| (state.to_string(), *count))
                .collect(),
        })
        .collect();
    let header = [
        "JOB", "WORKFLOW", "SCHEDULE", "NEXT", "LAST", "PAUSED", "FIRES",
    ];
    print_rows(&rows, json, "no scheduled jobs", &header, |row| {
        let fires: Vec<String> = row
            .fires
            .iter()
            .map(|(state, count)| format!("{state}={count}"))
            .collect();
        vec![
            row.job.clone(),
            or_dash(row.workflow.as_deref()),
            or_dash(row.schedule.as_deref()),
            or_dash(row.next_slot.as_deref()),
            or_dash(row.last_slot.as_deref()),
            if row.paused { "yes" } else { "no" }.to_owned(),
            if fires.is_empty() {
                "-".to_owned()
            } else {
                fires.join(" ")
            },
        ]
    })
}

fn said(json: bool, job: &str, what: &str, changed: bool) -> Result<()> {
    if json {
        return print_json(&serde_json::json!({
            "job": escape(job),
            "state": what,
            "changed": changed,
        }));
    }
    let already = if changed { "" } else { " (it already was)" };
    print(&format!("{} {what}{already}\n", escape(job)))
}

fn print_decided(job: &str, decided: &[(Slot, FireOutcome)], json: bool) -> Result<()> {
    let rows: Vec<Decided> = decided
        .iter()
        .map(|(slot, outcome)| Decided {
            job: escape(job),
            slot: slot.to_rfc3339(),
            execution_id: outcome.execution_id().to_string(),
            outcome: match outcome {
                FireOutcome::Started { .. } => "started",
                FireOutcome::Skipped { .. } => "skipped",
                _ => "existing",
            },
        })
        .collect();
    let header = ["JOB", "SLOT", "EXECUTION", "OUTCOME"];
    print_rows(&rows, json, "no slot decided", &header, |row| {
        vec![
            row.job.clone(),
            row.slot.clone(),
            row.execution_id.clone(),
            row.outcome.to_owned(),
        ]
    })
}

/// A slot given on the command line, RFC 3339.
fn slot(text: &str, flag: &str) -> Result<Slot> {
    let time = chrono::DateTime::parse_from_rfc3339(text).map_err(|error| {
        CliError::new(
            ErrorCode::BadInput,
            format!(
                "{flag} {:?} is not an RFC 3339 time ({error}); write it like 2026-01-01T02:00:00Z",
                escape(text)
            ),
        )
    })?;
    Ok(Slot::from_datetime(time.with_timezone(&chrono::Utc))?)
}
