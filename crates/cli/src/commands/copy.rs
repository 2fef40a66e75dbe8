//! `durably copy --from SOURCE --to DESTINATION`: the whole journal into an empty database
//! (a SQLite file into a PostgreSQL schema, or back), verified table by table.

use std::path::Path;
use std::time::Duration;

use durably::copy::{CopyError, CopyReport, copy_journal, source_in_use};
use durably::db::{Dialect, Target as DbTarget};
use durably::runtime::Client;
use durably::scheduler::Scheduler;
use durably::{Inspector, Journal};
use serde::Serialize;

use crate::db::Target;
use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::escape::escape;
use crate::output::{Table, print, print_json};

/// How long the copy's one transaction may run before the command stops waiting for it. The
/// writer's usual acknowledgement timeout is for single steps; a copy writes every row.
const COPY_ACK_TIMEOUT: Duration = Duration::from_hours(6);

/// `copy --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Report {
    from: String,
    to: String,
    tables: Vec<TableRow>,
}

#[derive(Debug, Serialize)]
struct TableRow {
    table: &'static str,
    source_rows: u64,
    destination_rows: u64,
    digest: String,
}

/// Copies the journal at `from` into the empty database `to`.
///
/// # Errors
/// A refusal of the copy (a live holder of the source, rows in the destination, differing
/// schema versions), or a storage error on either side; nothing is copied then.
pub fn run(from: &Path, to: &Path, read_timeout: Duration, json: bool) -> Result<()> {
    let source_target = DbTarget::from(from);
    let destination_target = DbTarget::from(to);
    let source = inspect(from, &source_target, read_timeout)?;
    // Before the destination is created or migrated: a refused copy leaves it untouched.
    source_in_use(&source).map_err(|error| refusal(error, &source_target, &destination_target))?;
    let tokio = crate::db::runtime()?;
    let destination = Journal::builder(destination_target.clone())
        .sweep_on_open(false)
        .ack_timeout(COPY_ACK_TIMEOUT)
        .open()?;
    // Opening with this build brings the destination's schemas (the journal's, the
    // runtime's, the scheduler's) to this build's versions, which the copy then compares
    // with the source's.
    tokio.block_on(async {
        let client = Client::new(destination.clone()).await?;
        Scheduler::new(client).await?;
        Ok::<_, CliError>(())
    })?;
    let report = tokio
        .block_on(copy_journal(source, &destination))
        .map_err(|error| refusal(error, &source_target, &destination_target))?;
    print_report(&report, &source_target, &destination_target, json)
}

/// The source, read-only: a SQLite file must exist (a copy never creates its source).
fn inspect(from: &Path, target: &DbTarget, read_timeout: Duration) -> Result<Inspector> {
    if target.dialect() == Dialect::Sqlite {
        return Target::chosen(Some(from), read_timeout)?.inspect();
    }
    let timeout_ms = u64::try_from(read_timeout.as_millis()).unwrap_or(u64::MAX);
    Ok(Journal::builder(target.clone())
        .read_timeout_ms(timeout_ms)
        .inspect()?)
}

fn refusal(error: CopyError, from: &DbTarget, to: &DbTarget) -> CliError {
    let message = escape(&error.to_string());
    match error {
        CopyError::Journal(error) => CliError::from(error),
        CopyError::SourceInUse { .. } => CliError::new(ErrorCode::LockHeld, message).hint(
            "`durably locks --db SOURCE` lists the holders; stop them (or wait for them to \
             end), then copy again",
        ),
        CopyError::DestinationNotEmpty { .. } => {
            CliError::new(ErrorCode::DestinationNotEmpty, message).hint(format!(
                "copy into a new schema or database; {to} was left as it was"
            ))
        }
        CopyError::SchemaMismatch { .. } => {
            CliError::new(ErrorCode::SchemaMismatch, message).hint(format!(
                "run the program that uses {from} once with this version of durably (its \
                 runtime and scheduler migrate their tables when they start), then copy"
            ))
        }
        _ => CliError::new(ErrorCode::Failed, message),
    }
}

fn print_report(report: &CopyReport, from: &DbTarget, to: &DbTarget, json: bool) -> Result<()> {
    let shown = Report {
        from: escape(&from.to_string()),
        to: escape(&to.to_string()),
        tables: report
            .tables
            .iter()
            .map(|table| TableRow {
                table: table.table,
                source_rows: table.source_rows,
                destination_rows: table.destination_rows,
                digest: table.digest.clone(),
            })
            .collect(),
    };
    if json {
        return print_json(&shown);
    }
    let mut table = Table::new(&["TABLE", "SOURCE", "COPIED", "DIGEST"]);
    for row in &shown.tables {
        table.row(vec![
            row.table.to_owned(),
            row.source_rows.to_string(),
            row.destination_rows.to_string(),
            row.digest.chars().take(16).collect(),
        ]);
    }
    let total: u64 = shown.tables.iter().map(|row| row.destination_rows).sum();
    print(&format!(
        "copied {} into {}: {total} rows, each table's count and digest equal on both sides\n{}",
        shown.from,
        shown.to,
        table.render()
    ))
}
