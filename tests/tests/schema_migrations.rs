//! Every journal file an earlier build left behind reaches exactly the schema of a fresh file,
//! with its rows: at every schema version from 0 to 6, opening it with today's journal gives it
//! the journal's schema (tables, indexes and views), and building a `Scheduler` on it gives it
//! the scheduler's, as on a new file. The rebuild of `executions` (migration 7) keeps every
//! step and event (no cascade fires), keeps the views of crates built on the journal, and
//! leaves no row without its parent; a crash before its commit leaves the file at version 6.
//! The scheduler's migrations refuse a version from the
//! future, views come back after someone dropped them, and an open of a current file leaves its
//! schema untouched.
//!
//! Method: build each old file with the SQL those builds applied (frozen in
//! tests/fixtures/schema-v5 and schema-v6), write rows into every table its migrations made, then open it
//! with today's code and compare its `sqlite_schema` rows (type, name, table and SQL, sorted;
//! the root page is where a table happens to sit, so it is left out) with a fresh file's, before
//! and after a `Scheduler` is built on both.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::path::Path;

use durably_journal::{APPLICATION_ID, Error as JournalError, Journal, SCHEMA_VERSION};
use durably_runtime::Client;
use durably_scheduler::{Error, Scheduler};
use rusqlite::{Connection, params};
use support::{Scratch, query_pairs, runtime};

/// The journal migrations of the builds that wrote schema version 5, as they applied them:
/// migration 5 ran `0004_views.sql` again after its own file, in the same transaction.
const SCHEMA_V5: [&[&str]; 5] = [
    &[include_str!("../fixtures/schema-v5/0001_locks.sql")],
    &[include_str!("../fixtures/schema-v5/0002_journal.sql")],
    &[include_str!("../fixtures/schema-v5/0003_scheduler.sql")],
    &[include_str!("../fixtures/schema-v5/0004_views.sql")],
    &[
        include_str!("../fixtures/schema-v5/0005_steps_in_commit_order.sql"),
        include_str!("../fixtures/schema-v5/0004_views.sql"),
    ],
];

/// What the builds that wrote schema version 6 applied after version 5: migration 6, then the
/// journal's views; a scheduler built on the file added its own view and its version row.
const SCHEMA_V6: [&str; 3] = [
    include_str!("../fixtures/schema-v6/0006_schema_versions.sql"),
    include_str!("../fixtures/schema-v6/views.sql"),
    include_str!("../fixtures/schema-v6/scheduler_views.sql"),
];

/// How many schema versions earlier builds wrote (0 to 6): one old file is built for each.
const OLD_VERSIONS: usize = 7;

const AT: &str = "2026-11-01T10:00:00.000Z";
const EXECUTION: &str = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";

/// One `sqlite_schema` row without its root page.
type SchemaRow = (String, String, String, Option<String>);

/// A scheduler on `journal`, over a runtime client (which brings the runtime's tables).
async fn scheduler(journal: Journal) -> Result<Scheduler, Error> {
    Scheduler::new(Client::new(journal).await?).await
}

fn schema(path: &Path) -> BTreeSet<SchemaRow> {
    let conn = Connection::open(path).unwrap();
    let mut statement = conn
        .prepare("SELECT type, name, tbl_name, sql FROM sqlite_schema")
        .unwrap();
    statement
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn foreign_key_orphans(path: &Path) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |row| {
        row.get(0)
    })
    .unwrap()
}

fn pragma(path: &Path, name: &str) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))
        .unwrap()
}

fn count(path: &Path, table: &str) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
        row.get(0)
    })
    .unwrap()
}

fn schema_versions(path: &Path) -> Vec<(String, i64)> {
    query_pairs(
        path,
        "SELECT owner, version FROM schema_versions ORDER BY owner",
    )
}

/// The scheduler's row of `schema_versions` (the runtime below it keeps its own).
fn scheduler_version(path: &Path) -> Option<i64> {
    schema_versions(path)
        .into_iter()
        .find(|(owner, _)| owner == "scheduler")
        .map(|(_, version)| version)
}

/// The tables an old file at `version` holds, with the rows written into each.
fn tables_at(version: usize) -> Vec<(&'static str, i64)> {
    let mut tables = Vec::new();
    if version >= 1 {
        tables.push(("locks", 1));
    }
    if version >= 2 {
        tables.extend([("executions", 1), ("steps", 2), ("events", 1)]);
    }
    if version >= 3 {
        tables.extend([("jobs", 1), ("fires", 1), ("skipped_slots", 1)]);
    }
    tables
}

/// Writes the file an earlier build left after its first `version` migrations, with a
/// finished execution, its free lock, steps and event, and a job with a fire and skipped slots.
fn write_old_file(path: &Path, version: usize) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL").unwrap();
    if version == 0 {
        return;
    }
    for sql in SCHEMA_V5[..version.min(5)]
        .iter()
        .flat_map(|files| files.iter())
    {
        conn.execute_batch(sql).unwrap();
    }
    if version >= 6 {
        for sql in SCHEMA_V6 {
            conn.execute_batch(sql).unwrap();
        }
        conn.execute_batch("INSERT INTO schema_versions (owner, version) VALUES ('scheduler', 1)")
            .unwrap();
    }
    conn.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {version};"
    ))
    .unwrap();
    conn.execute(
        "INSERT INTO locks (resource, epoch, released_at) VALUES (?1, 1, ?2)",
        params![EXECUTION, AT],
    )
    .unwrap();
    if version < 2 {
        return;
    }
    conn.execute(
        "INSERT INTO executions (execution_id, kind, name, status, input, output, created_at,
                                 updated_at, finalized_at)
         VALUES (?1, 'scheduled', 'nightly', 'completed', '{}', '{\"fire\":\"completed\"}',
                 ?2, ?2, ?2)",
        params![EXECUTION, AT],
    )
    .unwrap();
    for (seq, state) in [(0, "failed"), (1, "completed")] {
        conn.execute(
            "INSERT INTO steps (execution_id, seq, name, effect, policy, state, idempotency_key,
                                attempts, intent_at, result_at)
             VALUES (?1, ?2, 'fire', 'guarded', 'skip', ?3, 'key', 1, ?4, ?4)",
            params![EXECUTION, seq, state, AT],
        )
        .unwrap();
    }
    conn.execute(
        "INSERT INTO events (at, execution_id, seq, kind, detail)
         VALUES (?1, ?2, 0, 'attempt_failed', '{}')",
        params![AT, EXECUTION],
    )
    .unwrap();
    if version < 3 {
        return;
    }
    conn.execute_batch(&format!(
        "INSERT INTO jobs (job, definition, definition_hash, registered_at, updated_at,
                           last_slot, last_slot_ms)
         VALUES ('nightly', '{{}}', 'hash', '{AT}', '{AT}', '{AT}', 1793527200000);
         INSERT INTO fires (job, slot, slot_ms, execution_id, state, attempts, registered_at,
                            started_at, finished_at)
         VALUES ('nightly', '{AT}', 1793527200000, '{EXECUTION}', 'completed', 2, '{AT}', '{AT}',
                 '{AT}');
         INSERT INTO skipped_slots (job, first_slot, first_slot_ms, last_slot, last_slot_ms,
                                    slot_count, count_exact, reason, recorded_at)
         VALUES ('nightly', '{AT}', 1793440800000, '{AT}', 1793440800000, 1, 1, 'missed',
                 '{AT}');"
    ))
    .unwrap();
}

/// The schema of a new file: after the journal's open, and after a `Scheduler` was built too.
struct Fresh {
    journal: BTreeSet<SchemaRow>,
    /// With the runtime's tables too, which a scheduler needs below it.
    with_runtime: BTreeSet<SchemaRow>,
    with_scheduler: BTreeSet<SchemaRow>,
}

fn fresh() -> Fresh {
    let scratch = Scratch::new();
    let journal = Journal::open(&scratch.database).unwrap();
    let journal_only = schema(&scratch.database);
    let client = runtime().block_on(Client::new(journal)).unwrap();
    let with_runtime = schema(&scratch.database);
    runtime().block_on(Scheduler::new(client)).unwrap();
    Fresh {
        journal: journal_only,
        with_runtime,
        with_scheduler: schema(&scratch.database),
    }
}

#[test]
fn a_file_at_every_older_version_reaches_a_fresh_files_schema_with_its_rows() {
    let fresh = fresh();
    let scheduler_objects: BTreeSet<&str> = fresh
        .with_scheduler
        .difference(&fresh.with_runtime)
        .map(|(_, name, _, _)| name.as_str())
        .collect();
    assert_eq!(
        scheduler_objects,
        BTreeSet::from([
            "fire_ledger",
            "fires",
            "fires_by_job_state",
            "jobs",
            "skipped_slots",
            "sqlite_autoindex_fires_1",
            "sqlite_autoindex_fires_2",
            "sqlite_autoindex_jobs_1",
            "sqlite_autoindex_skipped_slots_1",
        ]),
        "a journal no scheduler used holds none of the scheduler's tables"
    );

    for version in 0..OLD_VERSIONS {
        let scratch = Scratch::new();
        write_old_file(&scratch.database, version);

        let journal = Journal::open(&scratch.database).unwrap();
        let opened = schema(&scratch.database);
        assert_eq!(
            foreign_key_orphans(&scratch.database),
            0,
            "version {version}"
        );
        if version == 6 {
            assert!(
                opened.iter().any(|row| row.1 == "fire_ledger"),
                "the rebuild keeps the views of crates built on the journal"
            );
        }
        assert!(
            opened.is_superset(&fresh.journal),
            "version {version}: the journal's objects after open differ from a fresh file's: \
             missing {:#?}",
            fresh.journal.difference(&opened).collect::<Vec<_>>()
        );
        // By name: the scheduler's tables in an old file keep their old shape until the
        // scheduler's own migrations run (below, compared in full).
        let names = |rows: &BTreeSet<SchemaRow>| -> BTreeSet<(String, String)> {
            rows.iter()
                .map(|row| (row.0.clone(), row.1.clone()))
                .collect()
        };
        let unknown: Vec<_> = names(&opened)
            .difference(&names(&fresh.with_scheduler))
            .cloned()
            .collect();
        assert!(
            unknown.is_empty(),
            "version {version}: objects a fresh file never has: {unknown:#?}"
        );
        assert_eq!(pragma(&scratch.database, "user_version"), SCHEMA_VERSION);
        assert_eq!(pragma(&scratch.database, "application_id"), APPLICATION_ID);

        runtime().block_on(scheduler(journal)).unwrap();
        let built = schema(&scratch.database);
        assert_eq!(
            built,
            fresh.with_scheduler,
            "version {version}: after the scheduler's migrations, extra {:#?}, missing {:#?}",
            built.difference(&fresh.with_scheduler).collect::<Vec<_>>(),
            fresh.with_scheduler.difference(&built).collect::<Vec<_>>()
        );
        assert_eq!(scheduler_version(&scratch.database), Some(2));
        for (table, rows) in tables_at(version) {
            assert_eq!(
                count(&scratch.database, table),
                rows,
                "version {version}: rows of {table}"
            );
        }
        assert_eq!(support::integrity(&scratch.database), "ok");
    }
}

#[test]
fn a_scheduler_schema_from_a_newer_build_is_refused_and_left_untouched() {
    let scratch = Scratch::new();
    let journal = Journal::open(&scratch.database).unwrap();
    runtime().block_on(scheduler(journal.clone())).unwrap();
    {
        let conn = Connection::open(&scratch.database).unwrap();
        conn.execute_batch(
            "UPDATE schema_versions SET version = 3 WHERE owner = 'scheduler';
             DROP VIEW fire_ledger;",
        )
        .unwrap();
    }
    let before = schema(&scratch.database);

    let refused = runtime().block_on(scheduler(journal)).unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Journal(JournalError::ExtensionSchemaTooNew {
                owner: "scheduler",
                found: 3,
                supported: 2,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(schema(&scratch.database), before, "not even its views");
}

#[test]
fn dropped_views_come_back_with_their_owners_migrations() {
    let scratch = Scratch::new();
    let journal = Journal::open(&scratch.database).unwrap();
    runtime().block_on(scheduler(journal)).unwrap();
    let complete = schema(&scratch.database);
    {
        let conn = Connection::open(&scratch.database).unwrap();
        conn.execute_batch("DROP VIEW execution_summary; DROP VIEW fire_ledger;")
            .unwrap();
    }

    let journal = Journal::open(&scratch.database).unwrap();
    let reopened = schema(&scratch.database);
    assert!(
        reopened.iter().any(|row| row.1 == "execution_summary"),
        "every writer open recreates the journal's views"
    );
    assert!(
        !reopened.iter().any(|row| row.1 == "fire_ledger"),
        "the journal never creates the scheduler's views"
    );
    runtime().block_on(scheduler(journal)).unwrap();
    assert_eq!(schema(&scratch.database), complete);
}

#[test]
fn opening_a_current_file_leaves_its_schema_untouched() {
    let scratch = Scratch::new();
    let journal = Journal::open(&scratch.database).unwrap();
    runtime().block_on(scheduler(journal)).unwrap();
    let cookie = pragma(&scratch.database, "schema_version");

    let journal = Journal::open(&scratch.database).unwrap();
    runtime().block_on(scheduler(journal)).unwrap();
    assert_eq!(
        pragma(&scratch.database, "schema_version"),
        cookie,
        "current views are not recreated, so other connections keep their statements"
    );
}

#[test]
fn schedulers_migrating_a_new_file_at_once_both_succeed() {
    let scratch = Scratch::new();
    let first = Journal::open(&scratch.database).unwrap();
    let second = Journal::open(&scratch.database).unwrap();
    let (a, b) = runtime().block_on(async { tokio::join!(scheduler(first), scheduler(second)) });
    a.unwrap();
    b.unwrap();
    assert_eq!(scheduler_version(&scratch.database), Some(2));
    assert_eq!(schema(&scratch.database), fresh().with_scheduler);
}

/// The rows of `executions` a version-6 file held reach the rebuilt table as they were, with the
/// new columns at their defaults and ids in creation order; the parked statuses are allowed.
#[test]
fn the_rebuilt_executions_table_keeps_its_rows_and_takes_the_new_statuses() {
    let scratch = Scratch::new();
    write_old_file(&scratch.database, 6);
    {
        let conn = Connection::open(&scratch.database).unwrap();
        conn.execute(
            "INSERT INTO executions (execution_id, kind, name, status, input, created_at,
                                     updated_at)
             VALUES ('0190a1b2-0000-7000-8000-000000000000', 'k', 'older', 'interrupted', '1',
                     '2026-10-01T10:00:00.000Z', ?1)",
            params![AT],
        )
        .unwrap();
    }
    drop(Journal::open(&scratch.database).unwrap());
    let conn = Connection::open(&scratch.database).unwrap();
    let rows: Vec<String> = conn
        .prepare(
            "SELECT json_array(id, name, status, opens, queue, priority, status_detail)
             FROM executions ORDER BY id",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        rows,
        [
            r#"[1,"older","interrupted",1,null,0,null]"#,
            r#"[2,"nightly","completed",1,null,0,null]"#,
        ]
    );
    for status in ["queued", "waiting", "stuck", "awaiting_operator"] {
        conn.execute(
            "UPDATE executions SET status = ?1, finalized_at = NULL WHERE name = 'older'",
            params![status],
        )
        .unwrap();
    }
    let refused = conn.execute(
        "UPDATE executions SET status = 'sleeping' WHERE name = 'older'",
        [],
    );
    assert!(refused.is_err(), "the CHECK still refuses unknown statuses");
    let refused = conn.execute(
        "UPDATE executions SET due_at = ?1 WHERE name = 'nightly'",
        params![AT],
    );
    assert!(
        refused.is_err(),
        "only queued and waiting executions wait for a time"
    );
}

/// A crash inside the rebuild, before its commit, leaves the file at version 6 with every row,
/// and the next open migrates it.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_before_the_rebuild_commits_leaves_version_6() {
    use std::os::unix::process::ExitStatusExt;

    let scratch = Scratch::new();
    write_old_file(&scratch.database, 6);
    let before = schema(&scratch.database);
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_journal_worker"))
        .arg("open")
        .arg(&scratch.database)
        .env("FAILPOINTS", "journal::migration-before-commit=return")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status}");
    assert_eq!(pragma(&scratch.database, "user_version"), 6);
    assert_eq!(
        schema(&scratch.database),
        before,
        "the whole rebuild rolled back"
    );
    assert_eq!(count(&scratch.database, "steps"), 2);

    drop(Journal::open(&scratch.database).unwrap());
    assert_eq!(pragma(&scratch.database, "user_version"), SCHEMA_VERSION);
    assert_eq!(count(&scratch.database, "steps"), 2);
    assert_eq!(count(&scratch.database, "events"), 1);
    assert_eq!(foreign_key_orphans(&scratch.database), 0);
}

/// The reading commands read a journal no writer has migrated yet: its executions read with the
/// runtime's columns unset, and the file stays at version 6.
#[test]
fn an_inspector_reads_a_version_6_journal_without_migrating_it() {
    let scratch = Scratch::new();
    write_old_file(&scratch.database, 6);
    let inspector = Journal::builder(&scratch.database).inspect().unwrap();
    let listed = inspector
        .list(&durably_journal::ListFilter::default())
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, durably_journal::Status::Completed);
    assert_eq!((listed[0].queue.as_deref(), listed[0].priority), (None, 0));
    let found = inspector.get(listed[0].execution_id).unwrap().unwrap();
    assert_eq!(found, listed[0]);
    assert_eq!(pragma(&scratch.database, "user_version"), 6);
}
