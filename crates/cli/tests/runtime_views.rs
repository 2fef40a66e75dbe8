//! What these prove: the operator's view of the runtime. `durably ls` says where each
//! execution is in its DETAIL column (queue, place and priority, not-before time, the topic
//! and time a parked execution waits for, why one is stuck, which step waits for an operator,
//! a pending cancel) and filters by every status, by queue and by pending cancel; `durably
//! show` adds the runtime block and pages of the messages and workflow events, newest first
//! with their counts, as escaped previews. Both forms carry the fields docs/cli.md lists, and
//! neither changes the journal; a journal no runtime has used shows none of it.
//!
//! Method: the test process runs a runtime on the journal (see `runtime_support`) whose
//! workflows park to receive messages, consume them and publish events; a cancel request,
//! which no runtime API makes yet, is written with plain SQL as the journal will write it. The
//! built binary runs as a child process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod runtime_support;

use common::{assert_code, fixture, json, stdout};
use durably::{Opened, Policy, Status, StepError};
use runtime_support::{QUEUE, RuntimeJournal, SERVED, UNSERVED};
use uuid::Uuid;

/// The line of `ls`'s table that shows `id`.
fn line_of(text: &str, id: Uuid) -> String {
    let id = id.to_string();
    text.lines()
        .find(|line| line.starts_with(&id))
        .unwrap_or_else(|| panic!("{id} is not listed:\n{text}"))
        .to_owned()
}

#[test]
fn ls_says_where_each_execution_is_and_filters_by_queue_and_cancel() {
    let journal = RuntimeJournal::new();
    let first = journal.start(UNSERVED, "null", &["--queue", QUEUE]);
    let urgent = journal.start(UNSERVED, "null", &["--queue", QUEUE, "--priority", "5"]);
    let later = journal.start(UNSERVED, "null", &["--queue", QUEUE, "--not-before", "1h"]);
    let parked = journal.parked();
    let stuck = journal.stuck();
    let sleeper = journal.start("sleeper", "null", &[]);
    journal.wait_for(sleeper, Status::Waiting);
    let running = journal.start(SERVED, "{}", &[]);
    journal.wait_for(running, Status::Running);
    journal.stand_in(
        "UPDATE executions SET cancel_requested_at = '2026-01-01T00:00:00.000Z',
                               cancel_reason = 'no longer needed'
         WHERE execution_id = ?1",
        running,
    );

    let output = journal.durably(&["ls"]);
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(text.lines().next().unwrap().ends_with("DETAIL"), "{text}");
    let sleeper_record = journal.journal.get(sleeper).unwrap().unwrap();
    let wakes = durably::lock::format_timestamp(sleeper_record.due_at.unwrap());
    let parked_record = journal.journal.get(parked).unwrap().unwrap();
    let parked_until = durably::lock::format_timestamp(parked_record.due_at.unwrap());
    let later_record = journal.journal.get(later).unwrap().unwrap();
    let not_before = durably::lock::format_timestamp(later_record.due_at.unwrap());
    for (id, detail) in [
        (urgent, "q=reports #1 p=5".to_owned()),
        (first, "q=reports #2 p=0".to_owned()),
        (later, format!("q=reports p=0 not before {not_before}")),
        (parked, format!("topic approval until {parked_until}")),
        (sleeper, format!("timer nap until {wakes}")),
        (stuck, "failed 3 runs in a row: ".to_owned()),
        (running, "cancel requested".to_owned()),
    ] {
        let line = line_of(&text, id);
        assert!(line.contains(&detail), "{detail:?} not in {line}");
    }

    let queued = json(&journal.durably(&["--json", "ls", "--status", "queued"]));
    let queued = queued.as_array().unwrap();
    assert_eq!(queued.len(), 3, "{queued:?}");
    let urgent_row = queued
        .iter()
        .find(|row| row["execution_id"] == urgent.to_string())
        .unwrap();
    for (field, value) in [
        ("queue", serde_json::json!("reports")),
        ("priority", serde_json::json!(5)),
        ("position", serde_json::json!(1)),
        ("due_at", serde_json::Value::Null),
        ("wait_topic", serde_json::Value::Null),
        ("cancel_requested_at", serde_json::Value::Null),
        ("cancel_reason", serde_json::Value::Null),
        ("status_detail", serde_json::Value::Null),
    ] {
        assert_eq!(urgent_row[field], value, "{field} of {urgent_row}");
    }
    let waiting = json(&journal.durably(&["--json", "ls", "--status", "waiting"]));
    assert_eq!(waiting.as_array().unwrap().len(), 2, "{waiting}");
    assert_eq!(waiting[0]["execution_id"], sleeper.to_string());
    assert_eq!(waiting[0]["wait_topic"], serde_json::Value::Null);
    assert_eq!(waiting[0]["status_detail"]["timer"], "nap");
    assert_eq!(waiting[1]["wait_topic"], "approval");
    assert_eq!(waiting[1]["due_at"], parked_until.as_str());

    let in_queue = json(&journal.durably(&["--json", "ls", "--queue", QUEUE]));
    assert_eq!(in_queue.as_array().unwrap().len(), 3);
    let cancelling = json(&journal.durably(&["--json", "ls", "--cancel-requested"]));
    assert_eq!(cancelling.as_array().unwrap().len(), 1);
    assert_eq!(cancelling[0]["execution_id"], running.to_string());
    assert_eq!(cancelling[0]["cancel_reason"], "no longer needed");
    let none = journal.durably(&["ls", "--queue", "elsewhere"]);
    assert_eq!(stdout(&none), "no executions match\n");
}

#[test]
fn ls_lists_a_step_awaiting_an_operator() {
    let fixture = fixture();
    let runtime = common::runtime();
    runtime.block_on(async {
        let journal = durably::Journal::open(&fixture.db).unwrap();
        let Opened::Running(execution) = journal
            .open_execution(fixture.ambiguous, "order", "", &serde_json::json!({}))
            .await
            .unwrap()
        else {
            unreachable!("the fixture's ambiguous execution is unfinished");
        };
        let _: u32 = execution.pure("plan", || async { Ok(1) }).await.unwrap();
        let charge = execution
            .guarded("charge", Policy::Fail, |_key| async {
                Ok::<u32, StepError>(1)
            })
            .await;
        assert!(matches!(charge, Err(durably::Error::Ambiguous { .. })));
    });
    let output = common::durably(&[
        "--db",
        fixture.db_arg(),
        "ls",
        "--status",
        "awaiting-operator",
    ]);
    assert_code(&output, 0);
    let line = line_of(&stdout(&output), fixture.ambiguous);
    assert!(line.contains("awaiting_operator"), "{line}");
    assert!(line.ends_with("step 1 charge (fail)"), "{line}");
}

#[test]
fn show_prints_the_runtime_block_and_pages_of_messages_and_workflow_events() {
    let journal = RuntimeJournal::new();
    let id = journal.inbox_with_messages(
        r#"{"n": 1}"#,
        &[r#""right-to-left \u202e text""#, r#"{"n": 3}"#],
    );
    let id_arg = id.to_string();
    let record = journal.journal.get(id).unwrap().unwrap();
    let due = durably::lock::format_timestamp(record.due_at.unwrap());

    let output = journal.durably(&["show", &id_arg]);
    assert_code(&output, 0);
    let text = stdout(&output);
    for needle in [
        "status     waiting\n".to_owned(),
        format!("detail     {{\"deadline\":\"{due}\",\"recv\":\"never\"}}\n"),
        "\nruntime\n".to_owned(),
        "version      1\n".to_owned(),
        "queue        -\n".to_owned(),
        format!("due          {due}\n"),
        "waits for    never\n".to_owned(),
        "failures     0\n".to_owned(),
        "messages (3 of 3, 2 pending)".to_owned(),
        "consumed by step 2 at ".to_owned(),
        "\"right-to-left \\u{202e} text\"".to_owned(),
        "workflow events (2 of 2)".to_owned(),
        "status    0    ".to_owned(),
        "\"awaiting approval ✓\"".to_owned(),
        "progress  3    ".to_owned(),
    ] {
        assert!(text.contains(&needle), "{needle:?} not in\n{text}");
    }
    assert!(!text.contains('\u{202e}'), "{text}");
    assert!(!text.contains("more messages follow"), "{text}");

    let page = journal.durably(&["show", &id_arg, "--limit", "1"]);
    let text = stdout(&page);
    assert!(text.contains("messages (1 of 3, 2 pending)"), "{text}");
    for next in [
        format!("`durably show {id} --messages-before 3`"),
        format!("`durably show {id} --workflow-events-before 3`"),
    ] {
        assert!(text.contains(&next), "{next} not in\n{text}");
    }

    let shown = json(&journal.durably(&[
        "--json",
        "show",
        &id_arg,
        "--limit",
        "1",
        "--messages-before",
        "2",
        "--workflow-events-before",
        "3",
    ]));
    assert_eq!(shown["execution"]["wait_topic"], "never");
    assert_eq!(shown["execution"]["due_at"], due.as_str());
    assert_eq!(shown["execution"]["status_detail"]["recv"], "never");
    assert_eq!(shown["messages_count"], 3);
    assert_eq!(shown["messages_pending"], 2);
    let messages = shown["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["id"], 1);
    assert_eq!(messages[0]["topic"], "approval");
    assert_eq!(messages[0]["consumed_seq"], 2);
    assert_eq!(messages[0]["preview"], r#"{"n":1}"#);
    assert_eq!(shown["messages_next_before"], serde_json::Value::Null);
    assert_eq!(shown["workflow_events_count"], 2);
    assert_eq!(shown["workflow_events"][0]["key"], "status");
    assert_eq!(shown["workflow_events"][0]["seq"], 0);
    assert_eq!(
        shown["workflow_events"][0]["value_preview"],
        "\"awaiting approval ✓\""
    );
    assert_eq!(
        shown["workflow_events_next_before"],
        serde_json::Value::Null
    );

    // A queued execution's place, and its runtime row.
    let queued = journal.start(UNSERVED, "null", &["--queue", QUEUE, "--dedup", "daily"]);
    let shown = json(&journal.durably(&["--json", "show", &queued.to_string()]));
    assert_eq!(shown["execution"]["queue"], "reports");
    assert_eq!(shown["execution"]["position"], 1);
    assert_eq!(
        shown["runtime"],
        serde_json::json!({
            "version": 1, "deadline_at": null, "dedup_key": "daily", "resume_failures": 0,
            "last_failure": null, "forked_from": null, "forks": []
        })
    );
    let text = stdout(&journal.durably(&["show", &queued.to_string()]));
    assert!(text.contains("queue        reports (#1)\n"), "{text}");
    assert!(text.contains("\nmessages (none)\n"), "{text}");
}

#[test]
fn a_stuck_execution_shows_why_and_a_hand_driven_one_shows_no_runtime() {
    let journal = RuntimeJournal::new();
    let stuck = journal.stuck();
    let text = stdout(&journal.durably(&["show", &stuck.to_string()]));
    assert!(
        text.contains("detail     {\"failures\":3,\"last\":{"),
        "{text}"
    );
    assert!(text.contains("failures     3\n"), "{text}");
    assert!(text.contains("last failure {\"message\":"), "{text}");

    let fixture = fixture();
    let completed = fixture.completed.to_string();
    let output = common::durably(&["--db", fixture.db_arg(), "show", &completed]);
    let text = stdout(&output);
    for section in ["\nruntime\n", "\nmessages", "\nworkflow events"] {
        assert!(!text.contains(section), "{section:?} in\n{text}");
    }
    let shown = json(&common::durably(&[
        "--db",
        fixture.db_arg(),
        "--json",
        "show",
        &completed,
    ]));
    assert_eq!(shown["runtime"], serde_json::Value::Null);
    assert_eq!(shown["messages"], serde_json::json!([]));
    assert_eq!(shown["messages_count"], 0);
    assert_eq!(shown["workflow_events"], serde_json::json!([]));
    assert_eq!(shown["execution"]["queue"], serde_json::Value::Null);
}

#[test]
fn reading_a_runtime_journal_changes_nothing() {
    let mut journal = RuntimeJournal::new();
    let queued = journal
        .start(UNSERVED, "null", &["--queue", QUEUE])
        .to_string();
    assert_code(&journal.durably(&["send", &queued, "approval", "1"]), 0);
    journal.stop();
    let before = journal.dump();
    for args in [
        &["ls"][..],
        &["ls", "--status", "queued", "--queue", QUEUE],
        &["ls", "--cancel-requested"],
        &["show", &queued],
        &[
            "show",
            &queued,
            "--messages-before",
            "1",
            "--workflow-events-before",
            "1",
        ],
    ] {
        for form in [&[][..], &["--json"][..]] {
            let mut all = form.to_vec();
            all.extend(args);
            assert_code(&journal.durably(&all), 0);
        }
    }
    assert!(
        journal.dump() == before,
        "a reading command changed the journal"
    );
}
