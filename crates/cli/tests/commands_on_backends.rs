//! Every `durably` command that opens a journal works on the backend `DURABLY_TEST_BACKEND`
//! names, given the journal as `--db`: a SQLite file's path, or a PostgreSQL URL. On
//! PostgreSQL, no output or error ever shows the URL's password, and a server that cannot be
//! reached is the error `cannot_connect` with what to do.
//!
//! Method: the `approval` example (a runtime program) parks an execution on the test's journal
//! and is killed, as a user would leave it; then each command runs as its own process on that
//! journal, and the test checks its exit code, what it printed, and the `--json` error codes of
//! the refusals. The PostgreSQL checks run on PostgreSQL only.
//!
//! The example binary is built by `cargo test --workspace`; run alone, build it first with
//! `cargo build -p durably --example approval` (on PostgreSQL the harness builds it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Output;

use common::example::{Site, kill_while_parked};
use common::{assert_code, assert_stdout_says, durably, stderr, stdout};

/// The workflow kind the `approval` example registers, and an input it takes.
const KIND: &str = "refund-approval";
const INPUT: &str = r#"{"number": 7, "customer": "ann@example.com"}"#;

/// The `code` of the `--json` error the command printed.
fn error_code(output: &Output) -> String {
    let error: serde_json::Value = serde_json::from_str(stderr(output).trim())
        .unwrap_or_else(|_| panic!("not one JSON error: {}", stderr(output)));
    error["code"].as_str().unwrap().to_owned()
}

#[test]
fn every_command_works_on_the_tests_backend() {
    let db = Site::new();
    let parked = kill_while_parked(&db, "approval", "awaiting approval");

    // Reading commands.
    assert_stdout_says(&db.durably(&["ls"]), &parked);
    assert_stdout_says(&db.durably(&["ls", "--status", "waiting"]), &parked);
    assert_stdout_says(&db.durably(&["show", &parked]), "waits for    approval");
    assert_stdout_says(&db.durably(&["locks"]), "no locks are held");
    assert_stdout_says(&db.durably(&["fires"]), "no fires recorded");
    assert_stdout_says(&db.durably(&["schedules"]), "no scheduled jobs");
    assert_stdout_says(
        &db.durably(&["patches", "fraud-check"]),
        "the call can be removed",
    );
    assert_stdout_says(&db.durably(&["sweep", "--dry-run"]), "dry run");
    assert_stdout_says(&db.durably(&["gc", "--dry-run"]), "would delete 0");

    // Changing commands.
    let started = db.durably(&["start", KIND, INPUT]);
    assert_stdout_says(&started, "new execution");
    let new = stdout(&started)
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_owned();
    assert_stdout_says(
        &db.durably(&["send", &new, "approval", "{}"]),
        "sent message",
    );
    assert_stdout_says(
        &db.durably(&["cancel", &new, "--reason", "test"]),
        "cancelled",
    );
    assert_stdout_says(&db.durably(&["resume", &new]), "resumed");
    assert_stdout_says(&db.durably(&["sweep"]), "reclaimed");
    assert_stdout_says(&db.durably(&["gc"]), "deleted 0");

    // Refusals keep their codes.
    let refused = |args: &[&str]| {
        let mut all = vec!["--json"];
        all.extend(args);
        let output = db.durably(&all);
        assert_code(&output, 1);
        error_code(&output)
    };
    assert_eq!(
        refused(&["fork", &parked, "--from-seq", "1"]),
        "fork_refused"
    );
    assert_eq!(refused(&["resolve", &parked, "0", "--not-done"]), "refused");
    assert_eq!(refused(&["resume", &parked]), "not_resumable");
    let unknown = "00000000-0000-4000-8000-000000000000";
    assert_eq!(refused(&["show", unknown]), "not_found");
    assert_eq!(refused(&["start", "no-such-kind", "{}"]), "unknown_kind");

    // The parked execution was left as it was.
    assert_stdout_says(&db.durably(&["ls", "--status", "waiting"]), &parked);
}

/// On PostgreSQL: the URL with a password in it, for the server the test's journal is on
/// (which lets the test's user in without one, so the password is only carried along).
fn with_password(target: &str) -> String {
    target.replacen("://durably@", "://durably:s3cret-pw@", 1)
}

#[test]
fn a_postgres_password_is_never_shown() {
    let db = Site::new();
    let target = db.target();
    if !target.starts_with("postgres") {
        eprintln!("skipped, PostgreSQL only: the database is a SQLite file");
        return;
    }
    let url = with_password(&target);
    assert_ne!(url, target, "the test server's URL names the user durably");
    kill_while_parked(&db, "approval", "awaiting approval");
    let unknown = "00000000-0000-4000-8000-000000000000";
    for args in [
        vec!["--db", url.as_str(), "ls"],
        vec!["--db", url.as_str(), "show", unknown],
        vec!["--db", url.as_str(), "--json", "show", unknown],
        vec!["--db", url.as_str(), "--json", "cancel", unknown],
    ] {
        let output = durably(&args);
        let shown = format!("{}{}", stdout(&output), stderr(&output));
        assert!(!shown.contains("s3cret-pw"), "{args:?} showed: {shown}");
    }
}

#[test]
fn a_postgres_server_that_cannot_be_reached_says_what_to_do() {
    let db = Site::new();
    if !db.target().starts_with("postgres") {
        eprintln!("skipped, PostgreSQL only: the database is a SQLite file");
        return;
    }
    // A socket directory no server listens in.
    let url = "postgresql://durably:s3cret-pw@/durably?host=/nonexistent/durably-no-server";
    for command in [
        &["ls"][..],
        &["cancel", "00000000-0000-4000-8000-000000000000"],
    ] {
        let mut args = vec!["--db", url, "--json"];
        args.extend(command);
        let output = durably(&args);
        assert_code(&output, 1);
        assert_eq!(error_code(&output), "cannot_connect", "{}", stderr(&output));
        let error = stderr(&output);
        assert!(error.contains("start the PostgreSQL server"), "{error}");
        assert!(!error.contains("s3cret-pw"), "{error}");
    }
}

/// A build without the `postgres` feature refuses a URL and says how to get one that takes it.
#[cfg(not(feature = "postgres"))]
#[test]
fn a_build_without_postgres_says_how_to_get_it() {
    let output = durably(&[
        "--db",
        "postgres://ann:s3cret-pw@db.example/app",
        "--json",
        "ls",
    ]);
    assert_code(&output, 1);
    assert_eq!(error_code(&output), "backend_not_compiled");
    let error = stderr(&output);
    assert!(
        error.contains("cargo install durably-cli --features postgres"),
        "{error}"
    );
    assert!(!error.contains("s3cret-pw"), "{error}");
}
