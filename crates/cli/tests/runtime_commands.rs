//! What these prove: `durably start`, `send` and `resume` work through the runtime on a
//! journal that a runtime of another process serves: a start is durable and idempotent by id
//! and says whether it created the execution, `--wait` prints the outcome with exit code 0
//! only when it completed (and stops waiting when only an operator can move it on), a message is delivered once per key, and a stuck execution goes
//! back to its queue, with a new deadline when `resume --deadline` gives one. Every refusal of the runtime plan's §9 table gets its exit code (2 for
//! a bad name, JSON, id or option; 1 for the rest) and a hint, and leaves the journal exactly
//! as it was, rows and schema; on a journal no runtime has used, they do not even add the
//! runtime's tables.
//!
//! Method: the test process runs a runtime on the journal (see `runtime_support`); the built
//! binary runs as a child process, and the database is dumped with plain SQLite before and
//! after each refusal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod runtime_support;

use common::{assert_code, assert_one_error, assert_stderr_says, fixture, json, stderr, stdout};
use durably::Status;
use runtime_support::{QUEUE, RuntimeJournal, SERVED, UNSERVED, dump};

/// Runs `args` on `journal`, and asserts that it fails with `code`, says `needle`, gives a
/// hint, and changes nothing.
fn refused(journal: &RuntimeJournal, args: &[&str], code: i32, needle: &str) {
    let before = journal.dump();
    let output = journal.durably(args);
    assert_stderr_says(&output, code, needle);
    assert_one_error(&output);
    assert!(
        stderr(&output).contains("durably: hint: "),
        "{args:?} gave no hint: {}",
        stderr(&output)
    );
    assert!(stdout(&output).is_empty(), "{}", stdout(&output));
    assert!(journal.dump() == before, "{args:?} changed the journal");
}

#[test]
fn start_runs_a_kind_served_elsewhere_and_wait_reports_its_outcome() {
    let journal = RuntimeJournal::new();

    // Held at the gate: still running when the wait ends.
    let output = journal.durably(&["start", SERVED, r#"{"order": 7}"#, "--wait", "300ms"]);
    assert_stderr_says(&output, 1, "has not ended after 300ms");
    let text = stdout(&output);
    assert!(text.starts_with("new execution "), "{text}");
    let id: uuid::Uuid = text.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(stderr(&output).contains(&format!("`durably show {id}`")));

    journal.open_gate();
    let id_arg = id.to_string();
    let output = journal.durably(&["start", SERVED, "{}", "--id", &id_arg, "--wait"]);
    assert_code(&output, 0);
    assert_eq!(
        stdout(&output),
        format!("existing execution {id} (completed)\noutput: {{\"order\":7}}\n")
    );
    let started = json(&journal.durably(&["--json", "start", SERVED, "{}", "--id", &id_arg]));
    assert_eq!(started["execution_id"], id_arg);
    assert_eq!(started["outcome"], "existing");
    assert_eq!(started["status"], "completed");
    assert_eq!(started["output_preview"], r#"{"order":7}"#);
    assert_eq!(started["error_preview"], serde_json::Value::Null);

    // A crash loop ends the wait once the execution is stuck: only an operator moves it on.
    let output = journal.durably(&["start", "oversized", "null", "--wait"]);
    assert_stderr_says(
        &output,
        1,
        "is stuck: it runs again only after an operator acts",
    );
    assert!(
        stderr(&output).contains("`durably resume "),
        "{}",
        stderr(&output)
    );

    // A failure is printed as an error, after the start.
    let output = journal.durably(&["start", SERVED, r#"{"refuse": true}"#, "--wait"]);
    assert_stderr_says(&output, 1, "failed: {\"message\":\"refused by the test\"}");
    assert_one_error(&output);
    assert!(
        stdout(&output).starts_with("new execution "),
        "{}",
        stdout(&output)
    );
}

#[test]
fn start_places_executions_in_their_queue() {
    let journal = RuntimeJournal::new();
    let later = journal.start(UNSERVED, "null", &["--queue", QUEUE, "--not-before", "1h"]);
    let first = journal.start(UNSERVED, "null", &["--queue", QUEUE]);
    let urgent = journal.start(UNSERVED, "null", &["--queue", QUEUE, "--priority", "5"]);
    let deadline = journal.start(UNSERVED, "null", &["--deadline", "2h"]);
    for id in [later, first, urgent, deadline] {
        assert_eq!(journal.status(id), Status::Queued);
    }
    let records: Vec<_> = [later, first, urgent, deadline]
        .iter()
        .map(|id| journal.journal.get(*id).unwrap().unwrap())
        .collect();
    assert!(records[0].due_at.is_some(), "not_before is its due time");
    assert_eq!(records[1].queue.as_deref(), Some(QUEUE));
    assert_eq!(records[2].priority, 5);
    assert_eq!(records[3].queue, None);

    // Deduplication: refused while the holder is unfinished, or the holder is returned.
    let keyed = journal.start(UNSERVED, "null", &["--queue", QUEUE, "--dedup", "nightly"]);
    refused(
        &journal,
        &[
            "start", UNSERVED, "null", "--queue", QUEUE, "--dedup", "nightly",
        ],
        1,
        &format!("is taken by execution {keyed}"),
    );
    let output = journal.durably(&[
        "start",
        UNSERVED,
        "null",
        "--queue",
        QUEUE,
        "--dedup",
        "nightly",
        "--dedup-return",
    ]);
    assert_code(&output, 0);
    assert_eq!(
        stdout(&output),
        format!("existing execution {keyed} (queued)\n")
    );
}

#[test]
fn start_refusals_change_nothing() {
    let journal = RuntimeJournal::new();
    let existing = journal.start(UNSERVED, "null", &[]).to_string();
    let cases: [(&[&str], i32, &str); 9] = [
        (
            &["start", "no-such-kind", "{}"],
            1,
            "unknown workflow kind \"no-such-kind\"",
        ),
        (
            &["start", UNSERVED, "{}", "--queue", "nope"],
            1,
            "unknown queue \"nope\"",
        ),
        (
            &["start", SERVED, "{}", "--id", &existing],
            1,
            "exists with kind \"report\"",
        ),
        (
            &["start", "bad\u{1b}kind", "{}"],
            2,
            "invalid workflow kind",
        ),
        (&["start", UNSERVED, "{not json"], 2, "not valid JSON"),
        (
            &["start", UNSERVED, "{}", "--id", "nope"],
            2,
            "not an execution id",
        ),
        (
            &[
                "start",
                UNSERVED,
                "{}",
                "--deadline",
                "2001-01-01T00:00:00Z",
            ],
            2,
            "is not after now",
        ),
        (&["start", UNSERVED, "{}", "--dedup-return"], 2, "--dedup"),
        (
            &["start", UNSERVED, "{}", "--wait", "soon"],
            2,
            "not an age",
        ),
    ];
    for (args, code, needle) in cases {
        refused(&journal, args, code, needle);
    }
}

#[test]
fn send_delivers_once_per_key_and_refuses_what_it_must() {
    let journal = RuntimeJournal::new();
    let receiver = journal.start(UNSERVED, "null", &[]).to_string();
    let receiver = receiver.as_str();

    let output = journal.durably(&["send", receiver, "approval", r#"{"ok": true}"#]);
    assert_eq!(stdout(&output), "sent message 1\n");
    let output = journal.durably(&["send", receiver, "approval", "true", "--key", "click-1"]);
    assert_eq!(stdout(&output), "sent message 2\n");
    let output = journal.durably(&["send", receiver, "approval", "true", "--key", "click-1"]);
    assert_code(&output, 0);
    assert_eq!(stdout(&output), "already sent (message 2)\n");
    let sent = json(&journal.durably(&[
        "--json", "send", receiver, "approval", "true", "--key", "click-1",
    ]));
    assert_eq!(
        sent,
        serde_json::json!({
            "execution_id": receiver, "topic": "approval", "message_id": 2,
            "outcome": "already_sent"
        })
    );

    // A finished receiver, and one driven by hand.
    journal.open_gate();
    let finished = journal.start(SERVED, "{}", &[]);
    journal.wait_for(finished, Status::Completed);
    // Held by this process for the rest of the test, so no sweep touches it meanwhile.
    let hand = uuid::Uuid::new_v4();
    let _held = journal
        .tokio
        .block_on(common::open(&journal.journal, hand, "by hand"));
    let (finished, hand) = (finished.to_string(), hand.to_string());
    let nobody = uuid::Uuid::new_v4().to_string();
    let cases: [(&[&str], i32, &str); 7] = [
        (
            &["send", receiver, "approval", "false", "--key", "click-1"],
            1,
            "was already used for message 2",
        ),
        (
            &["send", &nobody, "approval", "true"],
            1,
            "it does not exist",
        ),
        (
            &["send", &finished, "approval", "true"],
            1,
            "it has ended (completed)",
        ),
        (
            &["send", &hand, "approval", "true"],
            1,
            "was not started through the runtime",
        ),
        (
            &["send", receiver, "appro\u{1b}[2Jval", "true"],
            2,
            "invalid topic",
        ),
        (
            &["send", receiver, "approval", "true", "--key", ""],
            2,
            "invalid idempotency key",
        ),
        (
            &["send", receiver, "approval", "{oops"],
            2,
            "not valid JSON",
        ),
    ];
    for (args, code, needle) in cases {
        refused(&journal, args, code, needle);
    }
}

#[test]
fn a_stuck_execution_is_resumed_and_other_resumes_are_refused() {
    let journal = RuntimeJournal::new();
    let stuck = journal.stuck();
    let stuck_arg = stuck.to_string();
    let listed = json(&journal.durably(&["--json", "ls", "--status", "stuck"]));
    assert_eq!(listed[0]["execution_id"], stuck_arg);
    assert_eq!(listed[0]["status_detail"]["failures"], 3);

    let output = journal.durably(&["resume", &stuck_arg]);
    assert_code(&output, 0);
    assert!(stdout(&output).starts_with(&format!("resumed {stuck}: it is queued")));
    // Claimed again, it fails again: stuck after three more runs.
    journal.wait_for(stuck, Status::Stuck);
    assert_eq!(journal.journal.get(stuck).unwrap().unwrap().opens, 6);
    let resumed = json(&journal.durably(&["--json", "resume", &stuck_arg, "--deadline", "2h"]));
    assert_eq!(
        resumed,
        serde_json::json!({ "execution_id": stuck_arg, "status": "queued" })
    );
    journal.wait_for(stuck, Status::Stuck);
    let deadline: Option<String> = journal
        .journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT deadline_at FROM runtime_executions WHERE execution_id = ?1",
                [&stuck_arg],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    assert!(deadline.is_some(), "resume --deadline set a new deadline");

    let queued = journal.start(UNSERVED, "null", &[]).to_string();
    // Held by this process for the rest of the test, so no sweep touches it meanwhile.
    let hand = uuid::Uuid::new_v4();
    let _held = journal
        .tokio
        .block_on(common::open(&journal.journal, hand, "by hand"));
    let (hand, nobody) = (hand.to_string(), uuid::Uuid::new_v4().to_string());
    let cases: [(&[&str], i32, &str); 5] = [
        (
            &["resume", &queued],
            1,
            "is queued; only a stuck or cancelled",
        ),
        (
            &["resume", &stuck_arg, "--deadline", "soon"],
            2,
            "--deadline",
        ),
        (&["resume", &hand], 1, "was not started through the runtime"),
        (&["resume", &nobody], 1, "does not exist"),
        (&["resume", "nope"], 2, "not an execution id"),
    ];
    for (args, code, needle) in cases {
        refused(&journal, args, code, needle);
    }
}

#[test]
fn a_journal_no_runtime_used_gets_no_runtime_tables() {
    let fixture = fixture();
    let db = fixture.db_arg();
    let before = dump(&fixture.db);
    let known = fixture.completed.to_string();
    let nobody = uuid::Uuid::new_v4().to_string();
    let cases: [(&[&str], &str); 5] = [
        (
            &["start", "report", "{}"],
            "unknown workflow kind \"report\"",
        ),
        (
            &["send", &known, "approval", "true"],
            "was not started through the runtime",
        ),
        (&["send", &nobody, "approval", "true"], "it does not exist"),
        (&["resume", &known], "was not started through the runtime"),
        (&["resume", &nobody], "does not exist"),
    ];
    for (args, needle) in cases {
        let mut all = vec!["--db", db];
        all.extend(args);
        let output = common::durably(&all);
        assert_stderr_says(&output, 1, needle);
        assert_one_error(&output);
        assert!(dump(&fixture.db) == before, "{args:?} changed the journal");
    }
}
