//! What these prove: bad input never panics and never damages anything. A missing database is
//! not created by a reading command; a foreign SQLite file and a garbage file are refused and
//! left byte-for-byte unchanged; a missing `--db`, an unknown command or flag is a usage error.
//! Each case gives one error line on standard error (and at most one hint line) and exit code
//! 1 or 2. Method: run the built binary against such files and compare the files before and
//! after.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Output;

use common::{assert_code, assert_one_error, assert_stderr_says, durably};

const READING: [&[&str]; 5] = [
    &["ls"],
    &["show", "00000000-0000-4000-8000-000000000000"],
    &["locks"],
    &["fires"],
    &["sweep", "--dry-run"],
];

/// Runs every reading command on `db`, asserts each fails with exit code 1 and a message
/// containing `needle`, and hands each command and its output to `then` for further checks.
fn every_reading_command_refuses(db: &Path, needle: &str, then: impl Fn(&[&str], &Output)) {
    for command in READING {
        let mut args = vec!["--db", db.to_str().unwrap()];
        args.extend_from_slice(command);
        let output = durably(&args);
        assert_stderr_says(&output, 1, needle);
        then(command, &output);
    }
}

#[test]
fn a_missing_database_is_reported_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("nothing-here.db");
    every_reading_command_refuses(&db, "no database at", |command, _| {
        assert!(!db.exists(), "{command:?} created the database");
    });
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was created"
    );
    let directory = durably(&["--db", dir.path().to_str().unwrap(), "ls"]);
    assert_stderr_says(&directory, 1, "is not a file");
}

#[test]
fn a_foreign_sqlite_file_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("foreign.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY); INSERT INTO customers VALUES (1);",
    )
    .unwrap();
    drop(conn);
    let before = std::fs::read(&db).unwrap();
    every_reading_command_refuses(&db, "another application", |_, _| {});
    assert_eq!(std::fs::read(&db).unwrap(), before);
}

#[test]
fn a_garbage_file_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("garbage.db");
    let garbage: Vec<u8> = (0..8192_u32).map(|index| (index * 7 + 3) as u8).collect();
    std::fs::write(&db, &garbage).unwrap();
    every_reading_command_refuses(&db, "not a usable SQLite database", |_, output| {
        assert_one_error(output);
    });
    assert_eq!(std::fs::read(&db).unwrap(), garbage);
}

#[test]
fn usage_errors_exit_with_2() {
    let no_db = durably(&["ls"]);
    assert_stderr_says(&no_db, 2, "--db");
    assert_code(&durably(&["explode"]), 2);
    assert_code(&durably(&["ls", "--frobnicate"]), 2);
    assert_code(&durably(&[]), 2);
    let help = durably(&["--help"]);
    assert_code(&help, 0);
    let text = String::from_utf8(help.stdout).unwrap();
    assert!(text.contains("Exit codes"), "{text}");
    assert!(!text.contains("demo-worker"), "hidden commands stay hidden");
}

#[test]
fn the_environment_variable_names_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("env.db");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_durably"))
        .arg("ls")
        .env("DURABLY_DB", &db)
        .output()
        .unwrap();
    assert_stderr_says(&output, 1, "env.db");
}
