//! What these prove: `durably fork` starts a linked copy of an ended execution that `durably
//! show` prints on both sides, and refuses (exit code 1, a hint, the journal unchanged) an
//! execution a process may still run, a seq past its recorded steps, a hand-driven execution
//! and an unknown id; an execution whose replay meets a code change is listed by `durably ls
//! --status stuck` with the diff in its DETAIL, shown by `durably show`, and `durably patches`
//! lists the unfinished executions that answered a patch.
//!
//! Method: the test process runs runtimes on the journal (see `runtime_support`), one with the
//! code a run started on and one with a changed step; the built binary runs as a child
//! process, and the database is dumped with plain SQLite before and after each refusal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod runtime_support;

use std::time::Duration;

use common::{assert_code, assert_one_error, assert_stderr_says, json, stderr, stdout};
use durably::Status;
use durably::runtime::{Runtime, StartOptions, WorkflowContext, WorkflowError};
use runtime_support::{RuntimeJournal, SERVED, UNSERVED};

/// Runs `args` on `journal`, and asserts that it fails with exit code 1, says `needle`, gives a
/// hint saying `hint`, and changes nothing.
fn refused(journal: &RuntimeJournal, args: &[&str], needle: &str, hint: &str) {
    let before = journal.dump();
    let output = journal.durably(args);
    assert_stderr_says(&output, 1, needle);
    assert_one_error(&output);
    assert!(
        stderr(&output).contains(&format!("durably: hint: {hint}")),
        "{args:?} gave another hint: {}",
        stderr(&output)
    );
    assert!(journal.dump() == before, "{args:?} changed the journal");
}

#[test]
fn fork_links_a_copy_and_refuses_what_may_still_run() {
    let journal = RuntimeJournal::new();
    let failed = journal.start(SERVED, r#"{"refuse": true}"#, &[]);
    journal.wait_for(failed, Status::Failed);
    let failed_arg = failed.to_string();

    let forked = json(&journal.durably(&["--json", "fork", &failed_arg, "--from-seq", "0"]));
    assert_eq!(forked["forked_from"], failed_arg);
    assert_eq!(forked["from_seq"], 0);
    let fork = forked["execution_id"].as_str().unwrap().to_owned();
    let shown = stdout(&journal.durably(&["show", &fork]));
    assert!(
        shown.contains(&format!(
            "forked from  {failed_arg} (its steps before seq 0)"
        )),
        "{shown}"
    );
    let shown = json(&journal.durably(&["--json", "show", &failed_arg]));
    assert_eq!(shown["runtime"]["forks"][0]["execution_id"], fork);

    let text = journal.durably(&["fork", &failed_arg, "--from-seq", "0"]);
    assert_code(&text, 0);
    assert!(stdout(&text).starts_with(&format!("forked {failed} from seq 0 as ")));

    let queued = journal.start(UNSERVED, "null", &[]).to_string();
    let hand = uuid::Uuid::new_v4();
    let _held = journal
        .tokio
        .block_on(common::open(&journal.journal, hand, "by hand"));
    let (hand, nobody) = (hand.to_string(), uuid::Uuid::new_v4().to_string());
    refused(
        &journal,
        &["fork", &failed_arg, "--from-seq", "1"],
        "seq 1 is past its recorded steps (it has 0)",
        "give --from-seq 0 or less",
    );
    refused(
        &journal,
        &["fork", &queued, "--from-seq", "0"],
        "it is queued, and a process may still run it",
        "a process may still run it",
    );
    refused(
        &journal,
        &["fork", &hand, "--from-seq", "0"],
        "it was not started through the runtime",
        "only executions started through the runtime",
    );
    refused(
        &journal,
        &["fork", &nobody, "--from-seq", "0"],
        "does not exist",
        "check the id",
    );
    let usage = journal.durably(&["fork", &failed_arg]);
    assert_code(&usage, 2);
}

/// The code a run started on: a step, then a week's receive.
async fn before(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    ctx.pure("load", || async { Ok(1_u32) }).await?;
    ctx.recv::<u32>("go", Duration::from_hours(168)).await?;
    Ok(())
}

/// The changed code: the first step renamed, and a patch before it.
async fn after(ctx: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    ctx.patched("first-patch").await?;
    ctx.pure("load v2", || async { Ok(1_u32) }).await?;
    ctx.recv::<u32>("go", Duration::from_hours(168)).await?;
    Ok(())
}

#[test]
fn a_code_change_parks_stuck_with_its_diff_and_patches_lists_the_answers() {
    let journal = RuntimeJournal::new();
    let old = journal
        .tokio
        .block_on(
            Runtime::builder(journal.journal.clone())
                .register("changing", 1, before)
                .start(),
        )
        .unwrap();
    let id = durably::new_execution_id();
    journal
        .tokio
        .block_on(old.start::<_, ()>("changing", id, &(), StartOptions::default()))
        .unwrap();
    journal.wait_for(id, Status::Waiting);
    old.shutdown();
    let new = journal
        .tokio
        .block_on(
            Runtime::builder(journal.journal.clone())
                .register("changing", 1, after)
                .start(),
        )
        .unwrap();
    journal.send(id, "go", "1");
    journal.wait_for(id, Status::Stuck);

    let listed = stdout(&journal.durably(&["ls", "--status", "stuck"]));
    let line = listed
        .lines()
        .find(|line| line.contains(&id.to_string()))
        .unwrap();
    let diff =
        r#"non-determinism at step 0: recorded pure step "load", called pure step "load v2""#;
    assert!(line.contains(diff), "DETAIL lacks the diff: {line}");
    let shown = json(&journal.durably(&["--json", "show", &id.to_string()]));
    let detail = &shown["execution"]["status_detail"];
    assert_eq!(detail["recorded"], "pure step \"load\"");
    assert_eq!(detail["called"], "pure step \"load v2\"");
    let text = stdout(&journal.durably(&["show", &id.to_string()]));
    assert!(
        text.contains(r#"detail     {"called":"pure step \"load v2\"""#),
        "{text}"
    );

    let patches = journal.durably(&["patches", "first-patch"]);
    assert_code(&patches, 0);
    let text = stdout(&patches);
    assert!(
        text.starts_with("1 unfinished execution(s) answered false"),
        "{text}"
    );
    assert!(
        text.contains(&id.to_string()) && text.contains("stuck"),
        "{text}"
    );
    let listed = json(&journal.durably(&["--json", "patches", "first-patch"]));
    assert_eq!(listed["executions"][0]["answer"], false);
    let none = stdout(&journal.durably(&["patches", "other"]));
    assert!(none.contains("the call can be removed"), "{none}");
    new.shutdown();
}
