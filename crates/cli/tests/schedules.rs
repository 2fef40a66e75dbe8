//! What these prove: `durably schedules` manages a journal's scheduled jobs from the ledger
//! alone, with none of the jobs' code: it lists a job (workflow, schedule, next and last slot,
//! paused, fires per state); `pause` stops it and `resume` lets it go on; `trigger` starts the
//! upcoming slot once (a second trigger starts nothing); `backfill` starts each missing slot of
//! a range once. Every bad input (an unknown job, a paused job, a reversed, empty or future
//! range, a time that is not RFC 3339) exits with code 2, one error and a hint, and leaves the
//! journal exactly as it was.
//!
//! Method: the test process registers a job whose workflow kind a stopped runtime registered
//! (so its executions stay queued and are counted, not run); the built binary runs as a child
//! process, and the database is dumped with plain SQLite before and after each refusal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod runtime_support;

use common::{assert_code, assert_one_error, assert_stderr_says, json, stderr, stdout};
use durably::scheduler::{Job, Scheduler};
use runtime_support::{RuntimeJournal, UNSERVED};

const JOB: &str = "nightly";

/// The journal with job [`JOB`] registered: every minute, starting [`UNSERVED`].
fn with_job() -> RuntimeJournal {
    let journal = RuntimeJournal::new();
    journal.tokio.block_on(async {
        let client = durably::runtime::Client::new(journal.journal.clone())
            .await
            .unwrap();
        let scheduler = Scheduler::new(client).await.unwrap();
        let job = Job::builder(JOB)
            .interval(std::time::Duration::from_mins(1), 0)
            .workflow(UNSERVED)
            .build()
            .unwrap();
        let _ = scheduler.register(job).await.unwrap();
    });
    journal
}

fn count(journal: &RuntimeJournal, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(&journal.db).unwrap();
    conn.query_row(sql, [], |row| row.get(0)).unwrap()
}

fn refused(journal: &RuntimeJournal, args: &[&str], needle: &str) {
    let before = journal.dump();
    let output = journal.durably(args);
    assert_stderr_says(&output, 2, needle);
    assert_one_error(&output);
    assert!(
        stderr(&output).contains("durably: hint: "),
        "{args:?} gave no hint: {}",
        stderr(&output)
    );
    assert!(journal.dump() == before, "{args:?} changed the journal");
}

/// `schedules backfill JOB --from FROM --to TO`, refused as [`refused`] checks.
fn refused_backfill(journal: &RuntimeJournal, from: &str, to: &str, needle: &str) {
    let args = ["schedules", "backfill", JOB, "--from", from, "--to", to];
    refused(journal, &args, needle);
}

/// An RFC 3339 time `minutes` whole minutes before the start of this minute.
fn minutes_ago(minutes: i64) -> String {
    rfc3339((now_ms() / 60_000 - minutes) * 60_000)
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

fn rfc3339(ms: i64) -> String {
    durably::scheduler::Slot::from_millis(ms)
        .unwrap()
        .to_rfc3339()
}

#[test]
fn schedules_lists_triggers_pauses_and_backfills() {
    let journal = with_job();
    let listed = json(&journal.durably(&["--json", "schedules"]));
    assert_eq!(listed[0]["job"], JOB);
    assert_eq!(listed[0]["workflow"], UNSERVED);
    assert_eq!(listed[0]["paused"], false);
    assert!(listed[0]["next_slot"].is_string(), "{listed}");

    let first = json(&journal.durably(&["--json", "schedules", "trigger", JOB]));
    assert_eq!(first[0]["outcome"], "started");
    let again = json(&journal.durably(&["--json", "schedules", "trigger", JOB]));
    assert_eq!(again[0]["outcome"], "existing");
    assert_eq!(again[0]["execution_id"], first[0]["execution_id"]);
    assert_eq!(count(&journal, "SELECT count(*) FROM fires"), 1);

    let paused = journal.durably(&["schedules", "pause", JOB]);
    assert_code(&paused, 0);
    assert_eq!(stdout(&paused), format!("{JOB} paused\n"));
    refused(&journal, &["schedules", "trigger", JOB], "is paused");
    let listed = journal.durably(&["schedules"]);
    assert!(stdout(&listed).contains("yes"), "{}", stdout(&listed));
    let resumed = journal.durably(&["schedules", "resume", JOB]);
    assert_eq!(stdout(&resumed), format!("{JOB} resumed\n"));

    let (from, to) = (minutes_ago(3), minutes_ago(1));
    let args = [
        "--json",
        "schedules",
        "backfill",
        JOB,
        "--from",
        &from,
        "--to",
        &to,
    ];
    let filled = json(&journal.durably(&args));
    let outcomes: Vec<&str> = filled
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["started", "started", "started"]);
    let refilled = json(&journal.durably(&args));
    assert!(
        refilled
            .as_array()
            .unwrap()
            .iter()
            .all(|row| row["outcome"] == "existing"),
        "{refilled}"
    );
    assert_eq!(count(&journal, "SELECT count(*) FROM fires"), 4);
    assert_eq!(
        count(
            &journal,
            &format!(
                "SELECT count(*) FROM executions WHERE kind = '{UNSERVED}' AND name = '{JOB}'"
            )
        ),
        4
    );
}

#[test]
fn bad_schedule_input_is_refused_and_changes_nothing() {
    let journal = with_job();
    let (earlier, later) = (minutes_ago(3), minutes_ago(1));
    refused(
        &journal,
        &["schedules", "pause", "nobody"],
        "not registered",
    );
    refused(
        &journal,
        &["schedules", "trigger", "nobody"],
        "not registered",
    );
    refused_backfill(&journal, &later, &earlier, "after its end");
    let inside = rfc3339(now_ms() / 60_000 * 60_000 - 50_000);
    let inside_end = rfc3339(now_ms() / 60_000 * 60_000 - 40_000);
    refused_backfill(&journal, &inside, &inside_end, "holds no slot");
    let future = rfc3339(now_ms() + 3_600_000);
    refused_backfill(&journal, &earlier, &future, "after now");
    let output = journal.durably(&[
        "schedules",
        "backfill",
        JOB,
        "--from",
        "yesterday",
        "--to",
        &later,
    ]);
    assert_stderr_says(&output, 2, "not an RFC 3339 time");
}
