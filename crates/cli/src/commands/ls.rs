//! `durably ls`: executions, newest first.

use std::path::Path;

use durably_journal::{ExecutionRecord, ListFilter};
use serde::Serialize;

use crate::cli::LsArgs;
use crate::error::Result;
use crate::escape::escape;
use crate::output::{Table, or_dash, print, print_json};

/// One row of `ls --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Row {
    execution_id: String,
    kind: String,
    name: String,
    status: String,
    opens: i64,
    created_at: String,
    updated_at: String,
    finalized_at: Option<String>,
}

impl Row {
    fn from_record(record: &ExecutionRecord) -> Self {
        Self {
            execution_id: escape(&record.execution_id),
            kind: escape(&record.kind),
            name: escape(&record.name),
            status: escape(&record.status),
            opens: record.opens,
            created_at: escape(&record.created_at),
            updated_at: escape(&record.updated_at),
            finalized_at: record.finalized_at.as_deref().map(escape),
        }
    }
}

/// Lists executions.
pub fn run(db: &Path, args: &LsArgs, json: bool) -> Result<()> {
    let journal = crate::db::open_existing(db)?;
    let filter = ListFilter {
        status: args.status.map(crate::cli::StatusArg::status),
        kind: args.kind.clone(),
        name_contains: args.name.clone(),
        created_since: args.since.clone(),
        limit: Some(args.limit),
    };
    let rows: Vec<Row> = journal
        .list(&filter)?
        .iter()
        .map(Row::from_record)
        .collect();
    if json {
        return print_json(&rows);
    }
    if rows.is_empty() {
        return print("no executions match\n");
    }
    let mut table = Table::new(&[
        "EXECUTION",
        "STATUS",
        "KIND",
        "NAME",
        "OPENS",
        "CREATED",
        "FINALIZED",
    ]);
    for row in rows {
        table.row(vec![
            row.execution_id,
            row.status,
            row.kind,
            row.name,
            row.opens.to_string(),
            row.created_at,
            or_dash(row.finalized_at.as_deref()),
        ]);
    }
    print(&table.render())
}
