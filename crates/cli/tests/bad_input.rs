//! What these prove: bad input never panics and never damages anything. A missing database is
//! not created by a reading command; a foreign SQLite file and a garbage file are refused and
//! left byte-for-byte unchanged; a missing `--db`, an unknown command or flag is a usage error.
//! Each case gives one clear line on standard error and exit code 1 or 2. Method: run the
//! built binary against such files and compare the files before and after.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{assert_code, durably, stderr};

const READING: [&[&str]; 5] = [
    &["ls"],
    &["show", "00000000-0000-4000-8000-000000000000"],
    &["locks"],
    &["fires"],
    &["sweep", "--dry-run"],
];

#[test]
fn a_missing_database_is_reported_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("nothing-here.db");
    let db_arg = db.to_str().unwrap();
    for command in READING {
        let mut args = vec!["--db", db_arg];
        args.extend_from_slice(command);
        let output = durably(&args);
        assert_code(&output, 1);
        assert!(
            stderr(&output).contains("no database at"),
            "{}",
            stderr(&output)
        );
        assert!(!db.exists(), "{command:?} created the database");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was created"
    );
    let directory = durably(&["--db", dir.path().to_str().unwrap(), "ls"]);
    assert_code(&directory, 1);
    assert!(stderr(&directory).contains("is not a file"));
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
    for command in READING {
        let mut args = vec!["--db", db.to_str().unwrap()];
        args.extend_from_slice(command);
        let output = durably(&args);
        assert_code(&output, 1);
        assert!(
            stderr(&output).contains("another application"),
            "{}",
            stderr(&output)
        );
    }
    assert_eq!(std::fs::read(&db).unwrap(), before);
}

#[test]
fn a_garbage_file_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("garbage.db");
    let garbage: Vec<u8> = (0..8192_u32).map(|index| (index * 7 + 3) as u8).collect();
    std::fs::write(&db, &garbage).unwrap();
    for command in READING {
        let mut args = vec!["--db", db.to_str().unwrap()];
        args.extend_from_slice(command);
        let output = durably(&args);
        assert_code(&output, 1);
        assert!(
            stderr(&output).contains("not a usable SQLite database"),
            "{}",
            stderr(&output)
        );
        assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
    }
    assert_eq!(std::fs::read(&db).unwrap(), garbage);
}

#[test]
fn usage_errors_exit_with_2() {
    let no_db = durably(&["ls"]);
    assert_code(&no_db, 2);
    assert!(stderr(&no_db).contains("--db"), "{}", stderr(&no_db));
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
    assert_code(&output, 1);
    assert!(stderr(&output).contains("env.db"), "{}", stderr(&output));
}
