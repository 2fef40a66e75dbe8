//! `durably gc`: the retention sweep, with progress on a terminal and counts at the end.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use durably::defaults::GC_BATCH_EXECUTIONS_DEFAULT;
use durably::operator::{GcOptions, GcReport};
use serde::Serialize;

use crate::cli::GcArgs;
use crate::db::Target;
use crate::error::Result;
use crate::output::{print, print_json};

/// `gc --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Report {
    dry_run: bool,
    completed_older_than: String,
    failed_older_than: String,
    completed: u64,
    failed: u64,
    batches: u64,
}

/// Runs the retention sweep.
pub fn run(target: &Target, args: &GcArgs, json: bool) -> Result<()> {
    let journal = target.open_checked(args.force)?;
    let defaults = journal.operator().default_gc_options();
    let options = GcOptions {
        completed_older_than: args
            .completed_older_than
            .map_or(defaults.completed_older_than, Into::into),
        failed_older_than: args
            .failed_older_than
            .map_or(defaults.failed_older_than, Into::into),
        dry_run: args.dry_run,
        batch_executions_max: GC_BATCH_EXECUTIONS_DEFAULT,
    };
    let show_progress = std::io::stderr().is_terminal();
    let gc =
        crate::db::runtime()?.block_on(journal.operator().collect_garbage(options, |so_far| {
            if show_progress {
                progress(so_far);
            }
        }))?;
    if show_progress && gc.batches > 0 {
        let _ = writeln!(std::io::stderr());
    }
    let report = Report {
        dry_run: args.dry_run,
        completed_older_than: age(options.completed_older_than),
        failed_older_than: age(options.failed_older_than),
        completed: gc.completed,
        failed: gc.failed,
        batches: gc.batches,
    };
    if json {
        return print_json(&report);
    }
    let verb = if report.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    print(&format!(
        "{verb} {} completed executions older than {} and {} failed or cancelled executions \
         older than {} ({})\n",
        report.completed,
        report.completed_older_than,
        report.failed,
        report.failed_older_than,
        batches(report.batches)
    ))
}

fn progress(so_far: &GcReport) {
    let mut stderr = std::io::stderr().lock();
    let _ = write!(
        stderr,
        "\rdeleting: {} completed, {} failed or cancelled, {}",
        so_far.completed,
        so_far.failed,
        batches(so_far.batches)
    );
    let _ = stderr.flush();
}

/// `1 batch`, `3 batches`.
fn batches(count: u64) -> String {
    let noun = if count == 1 { "batch" } else { "batches" };
    format!("{count} {noun}")
}

fn age(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}
