//! What these prove: the reading commands (`ls`, `show`, `locks`, `fires`, `sweep --dry-run`)
//! change nothing and create nothing: not a byte of the journal, no `-wal`, `-shm` or liveness
//! directory; no schema in an empty file; no migration of an older journal. A file from a newer
//! durably keeps every byte of its header, even under the writing commands, whose refusal says
//! it was left untouched. A writer's open transaction does not block the reading commands, and
//! a view that never ends is stopped by `--read-timeout`.
//!
//! Method: journals are built through the library and changed with plain SQLite where a test
//! needs a file durably would not write; the built binary runs as a child process, and the
//! directory listing and the file's bytes are compared before and after.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{
    assert_code, assert_stderr_says, durably_within, entries, fixture, on, reading_commands,
    stderr, stdout,
};
use durably::sqlite::{APPLICATION_ID, SCHEMA_VERSION};
use rusqlite::Connection;

/// The directory's names and the database's bytes, to show that nothing changed.
fn state(db: &Path) -> (Vec<String>, Vec<u8>) {
    (entries(db.parent().unwrap()), std::fs::read(db).unwrap())
}

#[test]
fn reading_commands_create_nothing_and_change_no_byte() {
    let fixture = fixture();
    // A journal copied from elsewhere has no liveness directory; reading must not make one.
    std::fs::remove_dir_all(fixture.dir.path().join("journal.db.durably-live")).unwrap();
    let before = state(&fixture.db);
    assert_eq!(before.0, ["journal.db"]);
    for command in reading_commands(&fixture) {
        for extra in [&[][..], &["--json"][..]] {
            let output = on(&fixture.db, extra, &command);
            assert_code(&output, 0);
            assert!(!stdout(&output).is_empty(), "{command:?} printed nothing");
            assert!(
                state(&fixture.db) == before,
                "{command:?} {extra:?} changed the files"
            );
        }
    }
}

#[test]
fn an_empty_file_is_refused_and_stays_empty() {
    let fixture = fixture();
    // Private to this user, so a writer's open would adopt it and write a schema into it.
    let empty = fixture.dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = state(&empty);
    for command in reading_commands(&fixture) {
        let output = on(&empty, &[], &command);
        assert_stderr_says(&output, 1, "is not a durably journal yet");
        assert!(
            state(&empty) == before,
            "{command:?} wrote to the empty file"
        );
    }
}

#[test]
fn a_file_of_a_newer_durably_keeps_every_byte_under_every_command() {
    let fixture = fixture();
    let future = fixture.dir.path().join("future.db");
    Connection::open(&future)
        .unwrap()
        .execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {};
             CREATE TABLE later (x);",
            SCHEMA_VERSION + 1
        ))
        .unwrap();
    let before = state(&future);
    let id = fixture.ambiguous.to_string();
    let writing: Vec<Vec<String>> = [
        vec!["sweep", "--force"],
        vec!["cancel", id.as_str(), "--force"],
        vec!["gc", "--force"],
        vec!["sweep"],
    ]
    .iter()
    .map(|command| command.iter().map(|word| (*word).to_owned()).collect())
    .collect();
    for command in reading_commands(&fixture).iter().chain(&writing) {
        let output = on(&future, &[], command);
        assert_stderr_says(&output, 1, "left untouched");
        assert!(
            stderr(&output).contains("schema version"),
            "{}",
            stderr(&output)
        );
        assert!(state(&future) == before, "{command:?} changed the file");
    }
}

#[test]
fn a_journal_one_schema_behind_is_read_without_migrating_it() {
    let fixture = fixture();
    Connection::open(&fixture.db)
        .unwrap()
        .execute_batch("PRAGMA user_version = 4")
        .unwrap();
    std::fs::remove_dir_all(fixture.dir.path().join("journal.db.durably-live")).unwrap();
    let before = state(&fixture.db);
    let listed = on(&fixture.db, &["--json"], &["ls".to_owned()]);
    assert_code(&listed, 0);
    assert_eq!(common::json(&listed).as_array().unwrap().len(), 3);
    // Before the runtime's columns, no execution has a queue or a cancel request.
    for filter in [&["--queue", "q"][..], &["--cancel-requested"][..]] {
        let mut command = vec!["ls".to_owned()];
        command.extend(filter.iter().map(|word| (*word).to_owned()));
        let output = on(&fixture.db, &[], &command);
        assert_code(&output, 0);
        assert_eq!(stdout(&output), "no executions match\n");
    }
    assert!(state(&fixture.db) == before, "the journal was migrated");
}

#[test]
fn a_writers_open_transaction_does_not_block_the_reading_commands() {
    let fixture = fixture();
    let writer = Connection::open(&fixture.db).unwrap();
    writer
        .execute_batch("BEGIN IMMEDIATE; UPDATE executions SET kind = 'uncommitted';")
        .unwrap();
    for command in reading_commands(&fixture) {
        let output = on(&fixture.db, &[], &command);
        assert_code(&output, 0);
    }
    let listed = common::json(&on(&fixture.db, &["--json"], &["ls".to_owned()]));
    for row in listed.as_array().unwrap() {
        assert_eq!(row["kind"], "order", "the uncommitted change was seen");
    }
    writer.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn a_view_that_never_ends_is_stopped_by_the_read_timeout() {
    let fixture = fixture();
    Connection::open(&fixture.db)
        .unwrap()
        .execute_batch(
            "DROP VIEW IF EXISTS fire_ledger;
             CREATE VIEW fire_ledger AS
                 WITH RECURSIVE forever(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM forever)
                 SELECT 'job' AS job, 'slot' AS slot, 'state' AS state, 0 AS attempts,
                        'id' AS execution_id, NULL AS execution_status, NULL AS reason,
                        'at' AS registered_at, NULL AS started_at, NULL AS finished_at
                 FROM forever WHERE n < 0;",
        )
        .unwrap();
    let db = fixture.db_arg();
    let output = durably_within(
        &["--db", db, "--read-timeout", "300ms", "fires"],
        Duration::from_secs(20),
    );
    assert_stderr_says(&output, 1, "took longer than 300 ms and was stopped");
    assert!(
        stderr(&output).contains("--read-timeout"),
        "{}",
        stderr(&output)
    );
}
