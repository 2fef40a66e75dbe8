//! What these prove: with `--json`, an error is one JSON object on standard error that a
//! program can branch on. It carries the stable `code` documented in docs/cli.md, the human
//! `message` (control characters escaped), the `hint`, the `exit_code` the process exits with,
//! and the ids and paths the error names, for each family of errors an operator meets: bad
//! input (a clap parse error included, wherever `--json` stands), a missing database, an
//! unknown id, a lock held by a live process, and a stale resolve token. Without `--json` the
//! same error is the two documented text lines.
//!
//! Method: the built binary runs as a child process on a journal built through the library; a
//! live holder is this test process itself, holding the execution open through the library.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Output;

use common::{assert_code, assert_one_error, durably, fixture, hold, on, runtime, stderr};
use serde_json::Value;

/// Asserts that the command exited with `exit_code` and printed nothing on standard output and
/// one JSON error with `code` on standard error, and returns that error.
fn json_error(output: &Output, code: &str, exit_code: i32) -> Value {
    assert_code(output, exit_code);
    assert!(output.stdout.is_empty(), "{output:?}");
    let text = stderr(output);
    assert_eq!(text.lines().count(), 1, "{text}");
    let error: Value = serde_json::from_str(&text)
        .unwrap_or_else(|problem| panic!("stderr is not JSON ({problem}): {text}"));
    assert_eq!(error["code"], code, "{text}");
    assert_eq!(error["exit_code"], exit_code, "{text}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|message| !message.is_empty()),
        "{text}"
    );
    assert!(
        error["hint"].is_null() || error["hint"].is_string(),
        "{text}"
    );
    error
}

#[test]
fn bad_input_has_code_bad_input_wherever_json_stands() {
    let fixture = fixture();
    let db = fixture.db_arg();
    let cases: [&[&str]; 6] = [
        // Clap's own refusals: an unknown flag, before and after the subcommand.
        &["--json", "ls", "--frobnicate"],
        &["ls", "--frobnicate", "--json"],
        &["--json", "explode"],
        &["--json"],
        // This tool's checks of what clap parsed.
        &["--json", "--db", db, "show", "not-an-id"],
        &["--json", "ls"],
    ];
    for args in cases {
        let error = json_error(&durably(args), "bad_input", 2);
        assert!(error["hint"].is_string(), "{args:?}: {error}");
    }
    // `--json` after `--` is an argument, not the flag: the error is text.
    let text = durably(&["ls", "--", "--json"]);
    assert_code(&text, 2);
    assert_one_error(&text);
}

#[test]
fn a_missing_database_has_code_database_missing_and_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("gone \u{1b}[31m.db");
    let missing = missing.to_str().unwrap();
    let error = json_error(
        &durably(&["--json", "--db", missing, "ls"]),
        "database_missing",
        1,
    );
    // The path, as the message, has its control characters escaped.
    let escaped = missing.replace('\u{1b}', "\\e");
    assert_eq!(error["path"], escaped.as_str(), "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(&escaped), "{message}");
    assert!(!message.contains('\u{1b}'), "{message}");

    // Without --json: the same error as the two text lines, unchanged.
    let text = durably(&["--db", missing, "ls"]);
    assert_code(&text, 1);
    assert_one_error(&text);
    assert!(
        stderr(&text).starts_with(&format!("durably: error: no database at {escaped}\n")),
        "{}",
        stderr(&text)
    );
}

#[test]
fn an_unknown_id_has_code_not_found_and_the_id() {
    let fixture = fixture();
    let unknown = uuid::Uuid::new_v4().to_string();
    for command in [
        vec!["show", unknown.as_str()],
        vec!["resolve", unknown.as_str(), "0", "--not-done"],
    ] {
        let mut args = vec!["--json", "--db", fixture.db_arg()];
        args.extend(&command);
        let error = json_error(&durably(&args), "not_found", 1);
        assert_eq!(error["execution_id"], unknown.as_str(), "{error}");
        assert!(error["hint"].is_string(), "{error}");
    }
}

#[test]
fn a_lock_held_by_a_live_process_has_code_lock_held_and_the_holder() {
    let fixture = fixture();
    let ambiguous = fixture.ambiguous.to_string();
    let runtime = runtime();
    let held = hold(&runtime, &fixture.db, fixture.ambiguous);
    let output = durably(&[
        "--db",
        fixture.db_arg(),
        "resolve",
        &ambiguous,
        "1",
        "--not-done",
        "--json",
    ]);
    drop(held);
    let error = json_error(&output, "lock_held", 1);
    assert_eq!(error["execution_id"], ambiguous.as_str(), "{error}");
    assert_eq!(error["pid"], std::process::id(), "{error}");
    assert!(error["hint"].is_string(), "{error}");
}

#[test]
fn a_stale_resolve_token_has_code_ambiguous_token_stale_and_both_tokens() {
    let fixture = fixture();
    let ambiguous = fixture.ambiguous.to_string();
    let resolve = |token: &str| {
        let command = ["resolve", &ambiguous, "1", "--seen", token, "--not-done"].map(String::from);
        on(&fixture.db, &["--json"], &command)
    };
    // The step's intent is a1-r0: a token of another intent is stale, and nothing is written.
    let error = json_error(&resolve("a2-r0"), "ambiguous_token_stale", 1);
    assert_eq!(error["execution_id"], ambiguous.as_str(), "{error}");
    assert_eq!(error["seq"], 1, "{error}");
    assert_eq!(error["seen"], "a2-r0", "{error}");
    assert_eq!(error["now"], "a1-r0", "{error}");
    assert!(error["hint"].is_string(), "{error}");

    // Answered, the step leaves the ambiguous window: the old token is stale, with no intent now.
    assert_code(&resolve("a1-r0"), 0);
    let error = json_error(&resolve("a1-r0"), "ambiguous_token_stale", 1);
    assert_eq!(error["now"], Value::Null, "{error}");
}
