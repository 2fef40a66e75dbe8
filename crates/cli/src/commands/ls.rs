//! `durably ls`: executions, newest first.

use durably::lock::format_timestamp;
use durably::{ExecutionRecord, ListFilter};
use serde::Serialize;

use crate::cli::LsArgs;
use crate::db::Target;
use crate::error::Result;
use crate::escape::escape;
use crate::output::{or_dash, print_rows};

/// One row of `ls --json`, and the leading fields of `show --json`'s `execution`. Stable fields.
#[derive(Debug, Serialize)]
pub(super) struct Row {
    pub(super) execution_id: String,
    pub(super) kind: String,
    pub(super) name: String,
    pub(super) status: String,
    pub(super) opens: i64,
    pub(super) created_at: String,
    pub(super) updated_at: String,
    pub(super) finalized_at: Option<String>,
}

impl Row {
    /// The record's row fields, escaped.
    pub(super) fn from_record<P>(record: &ExecutionRecord<P>) -> Self {
        Self {
            execution_id: record.execution_id.to_string(),
            kind: escape(&record.kind),
            name: escape(&record.name),
            status: record.status.as_str().to_owned(),
            opens: i64::from(record.opens),
            created_at: format_timestamp(record.created_at),
            updated_at: format_timestamp(record.updated_at),
            finalized_at: record.finalized_at.map(format_timestamp),
        }
    }
}

/// Lists executions.
pub fn run(target: &Target, args: &LsArgs, json: bool) -> Result<()> {
    let inspector = target.inspect()?;
    let filter = ListFilter {
        status: args.status.map(crate::cli::StatusArg::status),
        kind: args.kind.clone(),
        name_contains: args.name.clone(),
        created_since: args.since,
        limit: Some(args.limit),
    };
    // Previews: the rows print no payload, and a preview never reads one over the cap.
    let rows: Vec<Row> = inspector
        .previews()
        .list(&filter)?
        .iter()
        .map(Row::from_record)
        .collect();
    let header = [
        "EXECUTION",
        "STATUS",
        "KIND",
        "NAME",
        "OPENS",
        "CREATED",
        "FINALIZED",
    ];
    print_rows(&rows, json, "no executions match", &header, |row| {
        vec![
            row.execution_id.clone(),
            row.status.clone(),
            row.kind.clone(),
            row.name.clone(),
            row.opens.to_string(),
            row.created_at.clone(),
            or_dash(row.finalized_at.as_deref()),
        ]
    })
}
