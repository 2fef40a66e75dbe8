//! `durably patches PATCH`: the unfinished executions that still need a patch's branches, by
//! the answer `patched` recorded for them. While one answered `false`, the old branch must
//! stay; once none has, `patched` can become `deprecate_patch` and the old branch go; once no
//! unfinished execution has the marker (answered `true`), the call can go too (docs/design.md,
//! "Versioning").

use std::fmt::Write as _;

use durably::runtime::{PATCH_HOLDOUTS_MAX, PatchHoldouts, PatchUse};
use serde::Serialize;

use crate::cli::PatchesArgs;
use crate::db::Target;
use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::escape::escape;
use crate::output::{Table, print, print_json};

/// One row of `patches --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Holdout {
    execution_id: String,
    /// What `patched` answered: `false` runs the old branch.
    answer: bool,
    status: String,
    seq: u32,
    decided_at: String,
}

/// `patches --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Shown {
    patch: String,
    executions: Vec<Holdout>,
    /// Whether a list stopped at its bound (`PATCH_HOLDOUTS_MAX` executions per answer).
    truncated: bool,
}

/// Lists the unfinished executions that answered the patch.
pub fn run(target: &Target, args: &PatchesArgs, json: bool) -> Result<()> {
    let runtime = crate::db::runtime()?;
    let client = target.client(&runtime, |_| {
        Ok(CliError::new(
            ErrorCode::NotRuntime,
            "no runtime has used this journal, so no execution answered a patch",
        )
        .hint("patches are answered by workflows run by a program's durably runtime"))
    })?;
    let holdouts = client.patch_holdouts(&args.patch)?;
    let shown = shown(&args.patch, holdouts);
    if json {
        return print_json(&shown);
    }
    print(&text(&shown))
}

fn shown(patch: &str, holdouts: PatchHoldouts) -> Shown {
    let rows = |uses: Vec<PatchUse>, answer: bool| {
        uses.into_iter().map(move |used| Holdout {
            execution_id: used.execution_id.to_string(),
            answer,
            status: used.status.to_string(),
            seq: used.seq,
            decided_at: used.decided_at,
        })
    };
    let mut executions: Vec<Holdout> = rows(holdouts.answered_false, false).collect();
    executions.extend(rows(holdouts.answered_true, true));
    Shown {
        patch: patch.to_owned(),
        executions,
        truncated: holdouts.truncated,
    }
}

fn text(shown: &Shown) -> String {
    let patch = escape(&shown.patch);
    let old = shown.executions.iter().filter(|row| !row.answer).count();
    let marked = shown.executions.len() - old;
    let mut text = if old > 0 {
        format!(
            "{old} unfinished execution(s) answered false to patch {patch:?}: keep both branches \
             of `patched`\n"
        )
    } else if marked > 0 {
        format!(
            "no unfinished execution answered false to patch {patch:?}: `patched` can become \
             `deprecate_patch` and the old branch go; {marked} unfinished execution(s) have its \
             marker, so keep the call\n"
        )
    } else {
        format!("no unfinished execution answered patch {patch:?}: the call can be removed\n")
    };
    if shown.executions.is_empty() {
        return text;
    }
    let mut table = Table::new(&["EXECUTION", "ANSWER", "STATUS", "SEQ", "DECIDED"]);
    for row in &shown.executions {
        table.row(vec![
            row.execution_id.clone(),
            row.answer.to_string(),
            row.status.clone(),
            row.seq.to_string(),
            row.decided_at.clone(),
        ]);
    }
    text.push_str(&table.render());
    if shown.truncated {
        let _ = writeln!(
            text,
            "(lists stop at {PATCH_HOLDOUTS_MAX} executions per answer)"
        );
    }
    text
}
