//! `durably fires [--job JOB]`: the scheduler's slot ledger, read through the `fire_ledger` view.

use durably::db::{Row, params};
use serde::Serialize;

use crate::db::Target;
use crate::error::Result;
use crate::escape::escape;
use crate::output::{or_dash, print_rows};

/// One row of `fires --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Fire {
    job: String,
    slot: String,
    state: String,
    attempts: i64,
    execution_id: String,
    execution_status: Option<String>,
    reason: Option<String>,
    registered_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
}

impl Fire {
    fn from_row(row: &Row<'_>) -> durably::db::Result<Self> {
        let text = |index: usize| -> durably::db::Result<String> {
            row.get::<_, String>(index).map(|value| escape(&value))
        };
        let optional = |index: usize| -> durably::db::Result<Option<String>> {
            row.get::<_, Option<String>>(index)
                .map(|value| value.as_deref().map(escape))
        };
        Ok(Self {
            job: text(0)?,
            slot: text(1)?,
            state: text(2)?,
            attempts: row.get(3)?,
            execution_id: text(4)?,
            execution_status: optional(5)?,
            reason: optional(6)?,
            registered_at: text(7)?,
            started_at: optional(8)?,
            finished_at: optional(9)?,
        })
    }
}

/// Lists fires, newest slot first.
pub fn run(target: &Target, job: Option<&str>, limit: u32, json: bool) -> Result<()> {
    let fires = target.inspect()?.read(|conn| {
        // The scheduler creates its ledger when it first runs on a journal; until then there
        // is nothing to list.
        if !crate::catalog::view_present(conn, "fire_ledger")? {
            return Ok(Vec::new());
        }
        let mut statement = conn.prepare_cached(
            "SELECT job, slot, state, attempts, execution_id, execution_status, reason,
                    registered_at, started_at, finished_at
             FROM fire_ledger WHERE (job = ?1 OR ?1 IS NULL)
             ORDER BY slot DESC, job LIMIT ?2",
        )?;
        let rows = statement.query_map(params![job, limit], Fire::from_row)?;
        Ok(rows.collect::<durably::db::Result<Vec<_>>>()?)
    })?;
    let header = [
        "JOB",
        "SLOT",
        "STATE",
        "ATTEMPTS",
        "EXECUTION",
        "REASON",
        "STARTED",
        "FINISHED",
    ];
    print_rows(&fires, json, "no fires recorded", &header, |fire| {
        vec![
            fire.job.clone(),
            fire.slot.clone(),
            fire.state.clone(),
            fire.attempts.to_string(),
            fire.execution_id.clone(),
            or_dash(fire.reason.as_deref()),
            or_dash(fire.started_at.as_deref()),
            or_dash(fire.finished_at.as_deref()),
        ]
    })
}
