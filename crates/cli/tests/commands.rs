//! What these prove: every subcommand of the `durably` binary works on a real journal in both
//! output forms (tables for people, `--json` parsed with serde_json), prints stored text with
//! its control characters escaped, and refuses what it must (a step that is not ambiguous, an
//! execution a live process holds, a token for a step a process whose lease expired may still
//! run). Method: journals are built through the library, the built
//! binary is run as a child process, and its exit code and output are checked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    EVIL_NAME, assert_code, assert_stderr_says, assert_stdout_says, durably, fixture, hold, json,
    runtime, stderr, stdout,
};

#[test]
fn ls_lists_newest_first_with_filters_in_both_forms() {
    let fixture = fixture();
    let db = fixture.db_arg();

    let table = durably(&["--db", db, "ls"]);
    assert_code(&table, 0);
    let text = stdout(&table);
    assert!(text.starts_with("EXECUTION"), "{text}");
    for id in [fixture.completed, fixture.failed, fixture.ambiguous] {
        assert!(text.contains(&id.to_string()), "{text}");
    }
    // The stored escape sequence is shown, not obeyed.
    assert!(!text.contains('\u{1b}'), "{text}");
    assert!(text.contains("evil \\e[31mred\\e[0m name"), "{text}");

    let listed = json(&durably(&["ls", "--db", db, "--json"]));
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["execution_id"], fixture.ambiguous.to_string());
    for field in [
        "execution_id",
        "kind",
        "name",
        "status",
        "opens",
        "created_at",
        "updated_at",
        "finalized_at",
    ] {
        assert!(
            rows[0].get(field).is_some(),
            "missing {field} in {}",
            rows[0]
        );
    }

    let failed = json(&durably(&[
        "--db", db, "--json", "ls", "--status", "failed",
    ]));
    assert_eq!(failed.as_array().unwrap().len(), 1);
    assert_eq!(failed[0]["execution_id"], fixture.failed.to_string());
    let named = json(&durably(&["--db", db, "--json", "ls", "--name", "stuck"]));
    assert_eq!(named[0]["execution_id"], fixture.ambiguous.to_string());
    let limited = json(&durably(&[
        "--db", db, "--json", "ls", "--limit", "1", "--since", "1h",
    ]));
    assert_eq!(limited.as_array().unwrap().len(), 1);
    let future = json(&durably(&[
        "--db",
        db,
        "--json",
        "ls",
        "--since",
        "2999-01-01T00:00:00Z",
    ]));
    assert_eq!(future.as_array().unwrap().len(), 0);
    let kind = json(&durably(&["--db", db, "--json", "ls", "--kind", "nothing"]));
    assert_eq!(kind.as_array().unwrap().len(), 0);

    assert_code(&durably(&["--db", db, "ls", "--status", "sleeping"]), 2);
    assert_code(&durably(&["--db", db, "ls", "--since", "yesterday-ish"]), 2);
    assert_code(&durably(&["--db", db, "ls", "--limit", "0"]), 2);
}

#[test]
fn show_prints_steps_events_and_bounded_escaped_previews() {
    let fixture = fixture();
    let db = fixture.db_arg();
    let ambiguous = fixture.ambiguous.to_string();

    let table = durably(&["--db", db, "show", &ambiguous]);
    assert_code(&table, 0);
    let text = stdout(&table);
    assert!(text.contains("stuck order"), "{text}");
    assert!(text.contains("SEQ  NAME"), "{text}");
    assert!(text.contains("charge"), "{text}");
    assert!(text.contains("ambiguous window"), "{text}");
    assert!(
        text.contains(&format!(
            "durably resolve {ambiguous} 1 --seen a1-r0 --completed"
        )),
        "{text}"
    );

    let shown = json(&durably(&["--db", db, "show", &ambiguous, "--json"]));
    assert_eq!(shown["execution"]["execution_id"], ambiguous);
    assert_eq!(shown["execution"]["input_preview"], "{\"order\":1}");
    assert!(shown["holder"].is_null());
    let steps = shown["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[1]["name"], "charge");
    assert_eq!(steps[1]["effect"], "guarded");
    assert_eq!(steps[1]["policy"], "fail");
    assert_eq!(steps[1]["state"], "intent");
    assert_eq!(steps[1]["attempts"], 1);
    assert!(steps[1]["intent_at"].as_str().unwrap().ends_with('Z'));
    assert!(steps[1]["result_at"].is_null());
    assert!(shown["events"].as_array().is_some());

    let completed = durably(&["--db", db, "show", &fixture.completed.to_string()]);
    assert_code(&completed, 0);
    let text = stdout(&completed);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{9b}'),
        "{text}"
    );
    assert!(!text.contains('\u{202e}'), "{text}");
    assert!(text.contains(r#""done \x9b2J \u{202e}""#), "{text}");
    let completed = json(&durably(&[
        "--db",
        db,
        "--json",
        "show",
        &fixture.completed.to_string(),
    ]));
    assert_eq!(completed["execution"]["name"], "evil \\e[31mred\\e[0m name");
    assert_ne!(completed["execution"]["name"], EVIL_NAME);

    let unknown = durably(&["--db", db, "show", "00000000-0000-4000-8000-000000000000"]);
    assert_stderr_says(&unknown, 1, "durably ls");
    let bad = durably(&["--db", db, "show", "not-a-uuid"]);
    assert_stderr_says(&bad, 2, "not an execution id");
}

#[test]
fn show_gives_no_token_while_a_holder_whose_lease_expired_may_still_run() {
    let fixture = fixture();
    let db = fixture.db_arg();
    let ambiguous = fixture.ambiguous.to_string();
    // A holder on another host, which no process test here can judge, whose lease expired long
    // ago: dead to the lock, but nothing says its process has stopped.
    runtime().block_on(async {
        let journal = durably::Journal::builder(&fixture.db)
            .sweep_on_open(false)
            .open()
            .unwrap();
        let resource = ambiguous.clone();
        journal
            .write(move |conn| {
                conn.execute(
                    "UPDATE locks SET instance_id = ?2, pid = 4242, start_time = 1, boot_id = ?3,
                         pid_ns = 1, hostname = 'another-host',
                         acquired_at = '2026-01-01T00:00:00.000Z',
                         heartbeat_at = '2026-01-01T00:00:00.000Z', lease_ms = 1,
                         released_at = NULL
                     WHERE resource = ?1",
                    durably::db::params![
                        resource,
                        uuid::Uuid::new_v4().to_string(),
                        uuid::Uuid::new_v4().to_string()
                    ],
                )?;
                Ok(())
            })
            .await
            .unwrap();
    });

    let table = durably(&["--db", db, "show", &ambiguous]);
    assert_code(&table, 0);
    let text = stdout(&table);
    assert!(
        text.contains("pid 4242 lost the execution when its lease expired"),
        "{text}"
    );
    assert!(!text.contains("--seen"), "{text}");
    let shown = json(&durably(&["--db", db, "show", &ambiguous, "--json"]));
    assert_eq!(shown["steps"][1]["state"], "intent");
    assert!(shown["steps"][1]["seen"].is_null(), "{shown}");
}

#[test]
fn locks_shows_a_live_holder_with_its_judgement() {
    let fixture = fixture();
    let db = fixture.db_arg();
    let none = durably(&["--db", db, "locks"]);
    assert_stdout_says(&none, "no locks are held");
    assert_eq!(
        json(&durably(&["--db", db, "locks", "--json"])),
        serde_json::json!([])
    );

    let runtime = runtime();
    let held = hold(&runtime, &fixture.db, fixture.ambiguous);
    let table = durably(&["--db", db, "locks"]);
    assert_code(&table, 0);
    let text = stdout(&table);
    assert!(text.contains(&fixture.ambiguous.to_string()), "{text}");
    assert!(text.contains("alive"), "{text}");
    let locks = json(&durably(&["--db", db, "locks", "--json"]));
    assert_eq!(locks[0]["resource"], fixture.ambiguous.to_string());
    assert_eq!(locks[0]["pid"], i64::from(std::process::id()));
    assert_eq!(locks[0]["verdict"], "alive");
    assert!(
        locks[0]["reason"]
            .as_str()
            .unwrap()
            .contains("liveness file")
    );
    for field in ["hostname", "since", "heartbeat_at", "epoch"] {
        assert!(locks[0].get(field).is_some(), "missing {field}");
    }
    let shown = json(&durably(&[
        "--db",
        db,
        "--json",
        "show",
        &fixture.ambiguous.to_string(),
    ]));
    assert_eq!(shown["holder"]["verdict"], "alive");
    drop(held);
}

#[test]
fn sweep_marks_unheld_running_executions_and_honours_dry_run() {
    let fixture = fixture();
    let db = fixture.db_arg();
    let dry = json(&durably(&["--db", db, "--json", "sweep", "--dry-run"]));
    assert_eq!(dry["dry_run"], true);
    assert_eq!(
        dry["unlocked"],
        serde_json::json!([fixture.ambiguous.to_string()])
    );
    assert_eq!(dry["reclaimed"], serde_json::json!([]));
    let listed = json(&durably(&[
        "--db", db, "--json", "ls", "--status", "running",
    ]));
    assert_eq!(
        listed.as_array().unwrap().len(),
        1,
        "a dry run changes nothing"
    );

    let swept = durably(&["--db", db, "sweep"]);
    assert_stdout_says(&swept, "marked interrupted");
    let listed = json(&durably(&[
        "--db",
        db,
        "--json",
        "ls",
        "--status",
        "interrupted",
    ]));
    assert_eq!(listed[0]["execution_id"], fixture.ambiguous.to_string());
}

#[test]
fn gc_counts_and_deletes_by_age() {
    let fixture = fixture();
    let db = fixture.db_arg();
    let kept = json(&durably(&["--db", db, "--json", "gc", "--dry-run"]));
    assert_eq!(kept["completed"], 0, "{kept}");
    assert_eq!(kept["completed_older_than"], "7days");

    let dry = json(&durably(&[
        "--db",
        db,
        "--json",
        "gc",
        "--completed-older-than",
        "0s",
        "--failed-older-than",
        "0s",
        "--dry-run",
    ]));
    assert_eq!(
        (dry["completed"].as_u64(), dry["failed"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(dry["dry_run"], true);

    let real = durably(&[
        "--db",
        db,
        "gc",
        "--completed-older-than",
        "0s",
        "--failed-older-than",
        "12h",
    ]);
    assert_code(&real, 0);
    assert!(
        stdout(&real).starts_with("deleted 1 completed"),
        "{}",
        stdout(&real)
    );
    assert_eq!(
        json(&durably(&["--db", db, "--json", "ls"]))
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let bad = durably(&["--db", db, "gc", "--completed-older-than", "seven days"]);
    assert_stderr_says(&bad, 2, "completed-older-than");
}

#[test]
fn resolve_records_an_answer_and_refuses_what_is_not_ambiguous() {
    let fixture = fixture();
    let db = fixture.db_arg();
    let ambiguous = fixture.ambiguous.to_string();

    let plan = durably(&["--db", db, "resolve", &ambiguous, "0", "--not-done"]);
    assert_stderr_says(&plan, 1, "is not ambiguous");
    let missing = durably(&["--db", db, "resolve", &ambiguous, "9", "--not-done"]);
    assert_stderr_says(&missing, 1, "has no step 9");

    assert_code(&durably(&["--db", db, "resolve", &ambiguous, "1"]), 2);
    assert_code(
        &durably(&[
            "--db",
            db,
            "resolve",
            &ambiguous,
            "1",
            "--not-done",
            "--completed",
            "1",
        ]),
        2,
    );
    let bad_json = durably(&[
        "--db",
        db,
        "resolve",
        &ambiguous,
        "1",
        "--completed",
        "{oops",
    ]);
    assert_stderr_says(&bad_json, 2, "not valid JSON");

    let runtime = runtime();
    let held = hold(&runtime, &fixture.db, fixture.ambiguous);
    // A live holder may be running the step: `show` hands out no token for it.
    let shown_held = durably(&["--db", db, "show", &ambiguous]);
    assert!(
        stdout(&shown_held).contains("a live process holds the execution"),
        "{}",
        stdout(&shown_held)
    );
    let held_json = json(&durably(&["--db", db, "--json", "show", &ambiguous]));
    assert_eq!(held_json["steps"][1]["seen"], serde_json::Value::Null);
    let refused = durably(&["--db", db, "resolve", &ambiguous, "1", "--not-done"]);
    assert_code(&refused, 1);
    let message = stderr(&refused);
    assert!(message.contains("held by live process"), "{message}");
    assert!(
        message.contains(&std::process::id().to_string()),
        "{message}"
    );
    // Dropping the last handle of its journal waits for the writer to commit the release and
    // close the file.
    drop(held);

    // The intent the operator checks is named by the token `show` prints; an answer about
    // another intent of the step is refused, and a malformed token is a usage error.
    let before = json(&durably(&["--db", db, "--json", "show", &ambiguous]));
    assert_eq!(before["steps"][0]["seen"], serde_json::Value::Null);
    let seen = before["steps"][1]["seen"].as_str().unwrap().to_owned();
    assert_eq!(seen, "a1-r0");
    let not_done_seen = |token: &str| {
        durably(&[
            "--db",
            db,
            "resolve",
            &ambiguous,
            "1",
            "--seen",
            token,
            "--not-done",
        ])
    };
    assert_stderr_says(
        &not_done_seen("a2-r0"),
        1,
        "changed since it was looked at (then a2-r0, now a1-r0)",
    );
    assert_stderr_says(&not_done_seen("latest"), 2, "not a seen-intent token");

    let resolved = json(&durably(&[
        "--db",
        db,
        "--json",
        "resolve",
        &ambiguous,
        "1",
        "--seen",
        &seen,
        "--completed",
        r#"{"receipt":"r-1"}"#,
    ]));
    assert_eq!(
        resolved,
        serde_json::json!({
            "execution_id": ambiguous, "seq": 1, "resolution": "completed"
        })
    );
    let shown = json(&durably(&["--db", db, "--json", "show", &ambiguous]));
    assert_eq!(shown["steps"][1]["state"], "completed");
    assert_eq!(shown["steps"][1]["result_preview"], r#"{"receipt":"r-1"}"#);
    let kinds: Vec<&str> = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"operator_resolved"), "{kinds:?}");
    let again = durably(&["--db", db, "resolve", &ambiguous, "1", "--not-done"]);
    assert_stderr_says(&again, 1, "is not ambiguous");
}

#[test]
fn cancel_asks_a_live_holder_and_is_final_afterwards() {
    let fixture = fixture();
    let db = fixture.db_arg();
    let ambiguous = fixture.ambiguous.to_string();
    let runtime = runtime();
    let held = hold(&runtime, &fixture.db, fixture.ambiguous);
    let requested = durably(&["--db", db, "cancel", &ambiguous]);
    assert_code(&requested, 0);
    assert_eq!(
        String::from_utf8_lossy(&requested.stdout),
        format!("cancel requested (held by pid {})\n", std::process::id())
    );
    let again = json(&durably(&["--db", db, "--json", "cancel", &ambiguous]));
    assert_eq!(
        again,
        serde_json::json!({
            "execution_id": ambiguous, "status": "cancel_requested", "pid": std::process::id()
        })
    );
    // Dropping the last handle of its journal waits for the writer to commit the release and
    // close the file. The holder wrote nothing, and no live process holds it now.
    drop(held);

    let cancelled = json(&durably(&[
        "--db", db, "--json", "cancel", &ambiguous, "--reason", "test",
    ]));
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["execution_id"], ambiguous);
    let listed = json(&durably(&[
        "--db",
        db,
        "--json",
        "ls",
        "--status",
        "cancelled",
    ]));
    assert_eq!(listed[0]["execution_id"], ambiguous);

    let finished = durably(&["--db", db, "cancel", &fixture.completed.to_string()]);
    assert_stderr_says(&finished, 1, "already completed");
    let table = durably(&["--db", db, "cancel", &fixture.failed.to_string()]);
    assert_code(&table, 1);
    assert_code(&durably(&["--db", db, "cancel", "xyz"]), 2);
}

#[test]
fn fires_reads_an_empty_ledger_and_fire_id_matches_the_library() {
    let fixture = fixture();
    let db = fixture.db_arg();
    let empty = durably(&["--db", db, "fires"]);
    assert_stdout_says(&empty, "no fires recorded");
    let none = json(&durably(&[
        "--db", db, "fires", "--job", "nightly", "--json",
    ]));
    assert_eq!(none, serde_json::json!([]));

    let printed = durably(&["fire-id", "nightly-report", "2026-01-01T00:00:00Z"]);
    assert_code(&printed, 0);
    // The fixed vector of the scheduler's crate documentation.
    assert_eq!(stdout(&printed), "b536f2cf-7f95-8a51-8745-e481d1e20d41\n");
    let offset = json(&durably(&[
        "--json",
        "fire-id",
        "nightly-report",
        "2026-01-01T01:00:00+01:00",
    ]));
    assert_eq!(offset["fire_id"], "b536f2cf-7f95-8a51-8745-e481d1e20d41");
    assert_eq!(offset["slot"], "2026-01-01T00:00:00.000Z");
    assert_eq!(offset["job"], "nightly-report");

    let bad_slot = durably(&["fire-id", "nightly-report", "tomorrow"]);
    assert_stderr_says(&bad_slot, 2, "RFC 3339");
    assert_code(&durably(&["fire-id", "", "2026-01-01T00:00:00Z"]), 2);
    assert_code(&durably(&["fire-id", "a\u{7}b", "2026-01-01T00:00:00Z"]), 2);
}
