//! Guarantee: an `Inspector` reads what a `Journal` reads and changes nothing: no byte of the
//! database, no file beside it (no `-wal`, `-shm` or liveness directory), no migration. It
//! refuses what a writer refuses (garbage, a foreign or a future file) with the same typed
//! errors, and also a file that holds no journal yet, and one that only a writer's recovery
//! can make readable. It trusts no schema: a view that never ends is stopped by the read
//! timeout, and the inspector reads on afterwards. Read without a WAL, it sees a writer's later
//! commits once they reach the file, never a mix of two states. Its pages and previews are a
//! journal's, and its payload cap is its builder's.
//!
//! Method: journals are built through the library and then changed with plain SQLite where a
//! test needs a file the library would never write. Each refusal is checked for its variant,
//! then for the files: their bytes unchanged and no name added to the directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

use durably_journal::{
    APPLICATION_ID, Error, Inspector, Journal, ListFilter, SCHEMA_VERSION, Status,
};
use rusqlite::Connection;
use support::{Scratch, leave_guarded_step_ambiguous, pure_steps, start};
use uuid::Uuid;

/// The names in `dir`.
fn entries(dir: &Path) -> BTreeSet<OsString> {
    let names = std::fs::read_dir(dir).unwrap();
    names.map(|entry| entry.unwrap().file_name()).collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A closed journal with one completed execution and one left with an ambiguous step, and no
/// liveness directory (as a journal copied from elsewhere has none): the ids.
fn closed_journal(scratch: &Scratch) -> (Uuid, Uuid) {
    let (done, stuck) = runtime().block_on(async {
        let journal = scratch.open();
        let (done, stuck) = (Uuid::now_v7(), Uuid::now_v7());
        let mut execution = start(&journal, done).await;
        pure_steps(&mut execution, 0..2).await;
        execution.complete(&"done").await.unwrap();
        let mut execution = start(&journal, stuck).await;
        leave_guarded_step_ambiguous(&mut execution).await;
        drop(execution);
        support::barrier(&journal).await;
        (done, stuck)
    });
    let liveness = scratch.dir().unwrap().join("journal.db.durably-live");
    std::fs::remove_dir_all(liveness).unwrap();
    (done, stuck)
}

/// Everything both read, from an inspector and from a journal, the same.
fn assert_reads_alike(inspector: &Inspector, journal: &Journal, ids: &[Uuid]) {
    let filter = ListFilter::default();
    assert_eq!(
        inspector.list(&filter).unwrap(),
        journal.list(&filter).unwrap()
    );
    for id in ids {
        assert_eq!(inspector.get(*id).unwrap(), journal.get(*id).unwrap());
        assert_eq!(inspector.steps(*id).unwrap(), journal.steps(*id).unwrap());
        assert_eq!(inspector.events(*id).unwrap(), journal.events(*id).unwrap());
        assert_eq!(
            inspector.steps_page(*id, Some(0), 1).unwrap(),
            journal.steps_page(*id, Some(0), 1).unwrap()
        );
        assert_eq!(
            inspector.events_page(*id, None, 2).unwrap(),
            journal.events_page(*id, None, 2).unwrap()
        );
        let (inspected, journaled) = (inspector.previews(), journal.previews());
        assert_eq!(inspected.get(*id).unwrap(), journaled.get(*id).unwrap());
        assert_eq!(
            inspected.steps_page(*id, None, 10).unwrap(),
            journaled.steps_page(*id, None, 10).unwrap()
        );
        assert_eq!(
            inspected.events_page(*id, None, 10).unwrap(),
            journaled.events_page(*id, None, 10).unwrap()
        );
    }
    assert_eq!(
        inspector.previews().list(&filter).unwrap(),
        journal.previews().list(&filter).unwrap()
    );
}

#[test]
fn an_inspectors_payload_cap_is_its_builders() {
    let scratch = Scratch::new();
    let (done, _) = closed_journal(&scratch);
    // The input, `"input"`, is 7 bytes of JSON.
    let inspector = Journal::builder(scratch.path())
        .payload_bytes_max(6)
        .inspect()
        .unwrap();
    assert!(
        matches!(
            inspector.get(done),
            Err(Error::PayloadTooLarge {
                bytes: 7,
                max: 6,
                ..
            })
        ),
        "{:?}",
        inspector.get(done)
    );
    let input = inspector.previews().get(done).unwrap().unwrap().input;
    assert_eq!((input.head, input.bytes), (None, 7));
    let inspector = Journal::builder(scratch.path())
        .payload_bytes_max(7)
        .inspect()
        .unwrap();
    assert_eq!(
        inspector.get(done).unwrap().unwrap().input.as_json(),
        "\"input\""
    );
}

#[test]
fn an_inspector_reads_what_a_journal_reads_and_creates_nothing() {
    let scratch = Scratch::new();
    let (done, stuck) = closed_journal(&scratch);
    let before = entries(scratch.dir().unwrap());
    let bytes = std::fs::read(scratch.path()).unwrap();

    let inspector = Journal::inspect(scratch.path()).unwrap();
    assert_eq!(inspector.list(&ListFilter::default()).unwrap().len(), 2);
    assert_eq!(inspector.steps(done).unwrap().len(), 2);
    let seen = inspector.seen_intent(stuck, 0).unwrap();
    assert!(seen.is_some(), "nobody holds the stuck execution");
    let preview = inspector.sweep_preview().unwrap();
    assert_eq!(preview.unlocked, vec![stuck], "{preview:?}");
    assert!(inspector.integrity_check().unwrap().is_empty());
    assert!(inspector.lock_holders().unwrap().is_empty());
    drop(inspector);
    assert_eq!(
        entries(scratch.dir().unwrap()),
        before,
        "a file was created"
    );
    assert!(
        std::fs::read(scratch.path()).unwrap() == bytes,
        "a byte changed"
    );

    // With a writer holding the journal open, through its WAL.
    let journal = Journal::builder(scratch.path())
        .sweep_on_open(false)
        .open()
        .unwrap();
    let held = Uuid::now_v7();
    let runtime = runtime();
    let execution = runtime.block_on(start(&journal, held));
    let during = entries(scratch.dir().unwrap());
    let inspector = Journal::inspect(scratch.path()).unwrap();
    assert_reads_alike(&inspector, &journal, &[done, stuck, held]);
    let holders = inspector.lock_holders().unwrap();
    assert_eq!(holders.len(), 1);
    assert!(!holders[0].1.is_dead(), "{holders:?}");
    assert!(matches!(
        inspector.seen_intent(held, 0),
        Ok(None) // no step yet: nothing ambiguous, so nothing is refused
    ));
    drop(inspector);
    assert_eq!(
        entries(scratch.dir().unwrap()),
        during,
        "a file was created"
    );
    drop(execution);
}

#[test]
fn a_journal_read_without_its_wal_shows_later_commits_once_they_reach_the_file() {
    let scratch = Scratch::new();
    closed_journal(&scratch);
    let inspector = Journal::inspect(scratch.path()).unwrap();
    assert_eq!(inspector.list(&ListFilter::default()).unwrap().len(), 2);

    // A writer opens, commits and closes: closing checkpoints its WAL into the file.
    let added = Uuid::now_v7();
    runtime().block_on(async {
        let journal = scratch.open();
        start(&journal, added)
            .await
            .complete(&"late")
            .await
            .unwrap();
    });
    let listed = inspector.list(&ListFilter::default()).unwrap();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(
        inspector.get(added).unwrap().map(|record| record.status),
        Some(Status::Completed)
    );
}

#[test]
fn a_view_that_never_ends_is_stopped_and_the_inspector_reads_on() {
    let scratch = Scratch::new();
    closed_journal(&scratch);
    let conn = Connection::open(scratch.path()).unwrap();
    conn.execute_batch(
        "CREATE VIEW forever AS
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n;",
    )
    .unwrap();
    drop(conn);
    let inspector = Journal::builder(scratch.path())
        .read_timeout_ms(100)
        .inspect()
        .unwrap();
    let trusted: i64 = inspector
        .read(|conn| Ok(conn.query_row("PRAGMA trusted_schema", [], |row| row.get(0))?))
        .unwrap();
    assert_eq!(trusted, 0, "the file's schema is trusted");
    let error = inspector
        .read(|conn| {
            Ok(conn.query_row("SELECT max(i) FROM forever", [], |row| row.get::<_, i64>(0))?)
        })
        .unwrap_err();
    assert!(
        matches!(&error, Error::ReadTimeout { path, timeout_ms: 100 } if *path == scratch.path().canonicalize().unwrap()),
        "{error:?}"
    );
    assert_eq!(inspector.list(&ListFilter::default()).unwrap().len(), 2);
}

/// Builds with plain SQLite a file `prepare` writes to, then asserts that inspecting it fails
/// as `expected` says and leaves its bytes and its directory as they were.
fn refused_untouched(prepare: impl FnOnce(&Path), expected: impl Fn(&Error) -> bool) {
    let scratch = Scratch::new();
    prepare(scratch.path());
    let before = entries(scratch.dir().unwrap());
    let bytes = std::fs::read(scratch.path()).unwrap();
    let error = Journal::inspect(scratch.path()).unwrap_err();
    assert!(expected(&error), "{error:?}");
    assert!(
        std::fs::read(scratch.path()).unwrap() == bytes,
        "a byte changed"
    );
    assert_eq!(
        entries(scratch.dir().unwrap()),
        before,
        "a file was created"
    );
}

/// A database in rollback mode (never switched to WAL) made by `sql`.
fn sqlite_file(sql: impl Into<String>) -> impl FnOnce(&Path) {
    let sql = sql.into();
    move |path| Connection::open(path).unwrap().execute_batch(&sql).unwrap()
}

#[test]
fn what_a_writer_refuses_a_reader_refuses_too_and_changes_nothing() {
    refused_untouched(
        |path| std::fs::write(path, vec![0x5a; 8192]).unwrap(),
        |error| matches!(error, Error::Corrupt { path, .. } if path.ends_with("journal.db")),
    );
    refused_untouched(
        sqlite_file("CREATE TABLE customers (id INTEGER PRIMARY KEY);"),
        |error| matches!(error, Error::ForeignDatabase { .. }),
    );
    let future = format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {};
         CREATE TABLE later (x);",
        SCHEMA_VERSION + 1
    );
    refused_untouched(
        sqlite_file(future),
        |error| matches!(error, Error::SchemaTooNew { found, .. } if *found == SCHEMA_VERSION + 1),
    );
}

#[test]
fn a_file_with_no_journal_yet_or_an_old_one_is_refused_not_migrated() {
    refused_untouched(
        |path| std::fs::write(path, b"").unwrap(),
        |error| matches!(error, Error::NotAJournal { .. }),
    );
    refused_untouched(sqlite_file("PRAGMA page_size = 4096; VACUUM;"), |error| {
        matches!(error, Error::NotAJournal { .. })
    });
    let old = format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 3; CREATE TABLE t (x);"
    );
    refused_untouched(sqlite_file(old), |error| {
        matches!(
            error,
            Error::SchemaTooOld {
                found: 3,
                oldest: 4,
                ..
            }
        )
    });
}

#[test]
fn a_journal_one_schema_behind_is_read_as_it_is() {
    let scratch = Scratch::new();
    let (done, _) = closed_journal(&scratch);
    Connection::open(scratch.path())
        .unwrap()
        .execute_batch("PRAGMA journal_mode = DELETE; PRAGMA user_version = 4;")
        .unwrap();
    let bytes = std::fs::read(scratch.path()).unwrap();
    let inspector = Journal::inspect(scratch.path()).unwrap();
    assert_eq!(inspector.steps(done).unwrap().len(), 2);
    drop(inspector);
    assert!(
        std::fs::read(scratch.path()).unwrap() == bytes,
        "it was migrated"
    );
}

#[test]
fn a_wal_without_its_index_or_a_rollback_journal_needs_a_writers_recovery() {
    // A WAL with commits not yet in the file, copied without the index beside it.
    let scratch = Scratch::new();
    closed_journal(&scratch);
    let copy = tempfile::tempdir().unwrap();
    let copied = copy.path().join("journal.db");
    {
        let journal = scratch.open();
        runtime().block_on(async {
            start(&journal, Uuid::now_v7())
                .await
                .complete(&1)
                .await
                .unwrap();
        });
        std::fs::copy(scratch.path(), &copied).unwrap();
        let wal = scratch.dir().unwrap().join("journal.db-wal");
        std::fs::copy(wal, copy.path().join("journal.db-wal")).unwrap();
    }
    let before = entries(copy.path());
    let error = Journal::inspect(&copied).unwrap_err();
    assert!(matches!(error, Error::NeedsRecovery { .. }), "{error:?}");
    assert_eq!(entries(copy.path()), before, "the index was created");

    // A rollback journal beside a file in rollback mode: a write was interrupted.
    refused_untouched(
        |path| {
            sqlite_file("PRAGMA user_version = 1; CREATE TABLE t (x);")(path);
            let mut name = path.as_os_str().to_owned();
            name.push("-journal");
            std::fs::write(name, vec![0xd9; 512]).unwrap();
        },
        |error| matches!(error, Error::NeedsRecovery { .. }),
    );
}

#[test]
fn a_path_longer_than_sqlite_takes_is_refused_as_too_long() {
    let dir = tempfile::tempdir().unwrap();
    let mut deep = dir.path().to_path_buf();
    while deep.as_os_str().len() < 520 {
        deep.push("d".repeat(60));
    }
    std::fs::create_dir_all(&deep).unwrap();
    let path = deep.join("journal.db");
    let error = Journal::open(&path).unwrap_err();
    assert!(
        matches!(&error, Error::PathTooLong { bytes, max: 504, .. } if *bytes > 504),
        "{error:?}"
    );
    assert!(entries(&deep).is_empty(), "the writer created a file");
    std::fs::write(&path, b"x").unwrap();
    let error = Journal::inspect(&path).unwrap_err();
    assert!(matches!(error, Error::PathTooLong { .. }), "{error:?}");
}
