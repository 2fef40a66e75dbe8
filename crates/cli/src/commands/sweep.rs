//! `durably sweep`: the crash-orphan sweep, printing what it reclaimed. A dry run only reads
//! the journal.

use std::fmt::Write as _;

use serde::Serialize;

use crate::db::Target;
use crate::error::Result;
use crate::escape::escape;
use crate::output::{print, print_json};

/// `sweep --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Report {
    dry_run: bool,
    reclaimed: Vec<Reclaimed>,
    unlocked: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Reclaimed {
    resource: String,
    pid: i64,
    reason: String,
}

/// Runs the sweep.
pub fn run(target: &Target, dry_run: bool, force: bool, json: bool) -> Result<()> {
    let sweep = if dry_run {
        target.inspect()?.sweep_preview()?
    } else {
        let journal = target.open_checked(force)?;
        crate::db::runtime()?.block_on(journal.operator().sweep(false))?
    };
    let report = Report {
        dry_run,
        reclaimed: sweep
            .reclaimed
            .iter()
            .map(|one| Reclaimed {
                resource: escape(&one.resource),
                pid: one.pid,
                reason: escape(&one.reason),
            })
            .collect(),
        unlocked: sweep.unlocked.iter().map(ToString::to_string).collect(),
    };
    if json {
        return print_json(&report);
    }
    let verb = if dry_run {
        "would reclaim"
    } else {
        "reclaimed"
    };
    let mut text = String::new();
    for one in &report.reclaimed {
        let _ = writeln!(
            text,
            "{verb} {} from dead pid {}: {}",
            one.resource, one.pid, one.reason
        );
    }
    let verb = if dry_run {
        "would mark interrupted"
    } else {
        "marked interrupted"
    };
    for id in &report.unlocked {
        let _ = writeln!(text, "{verb} {id}: running with no lock holder");
    }
    let _ = writeln!(
        text,
        "{} reclaimed from dead processes, {} running without a holder{}",
        report.reclaimed.len(),
        report.unlocked.len(),
        if dry_run {
            " (dry run: nothing changed)"
        } else {
            ""
        }
    );
    print(&text)
}
