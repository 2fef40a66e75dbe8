//! Opening a journal on PostgreSQL: two journals opening one fresh schema at once both
//! succeed, with the baseline applied once; a reopen changes nothing; a schema a newer build
//! migrated is refused by a writer's open and by an inspector, which creates nothing in an
//! empty schema; the sessions carry the journal's name, durability and busy timeout; a server
//! that cannot be reached is `CannotOpen`, whose message hides the URL's password, and so is
//! a `search_path` naming no schema, whose message says to create it; a crate's
//! schema (`migrate_extension`) gets its PostgreSQL baseline, its later migrations and its
//! views once, however many journals migrate it at once.
//!
//! Method: each test gets a scratch schema of the server `DURABLY_POSTGRES_URL` names
//! (`durably_testkit::TestDb`, which fails loudly without one), and reads the catalog through
//! the journal's own connections.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Barrier};

use durably_journal::{
    Durability, Error, ExtensionSchema, Journal, ListFilter, Migration, PgSchema, SCHEMA_VERSION,
};
use durably_testkit::{Backend, TestDb};

/// A text the catalog gives for `sql`, read through `journal`'s read pool.
fn read_text(journal: &Journal, sql: &'static str) -> String {
    journal
        .read(move |conn| Ok(conn.query_row(sql, [], |row| row.get(0))?))
        .unwrap()
}

/// The schema's tables, views and functions with their object ids: what a migration that ran
/// again would change.
const OBJECTS: &str = "SELECT string_agg(name, ',' ORDER BY name) FROM (
       SELECT relname || '=' || oid AS name FROM pg_class
       WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'v')
       UNION ALL
       SELECT proname || '=' || oid FROM pg_proc WHERE pronamespace = current_schema()::regnamespace
     ) AS objects";

#[test]
fn two_journals_opening_one_new_schema_at_once_both_succeed() {
    let db = Arc::new(TestDb::on(Backend::Postgres));
    let start = Arc::new(Barrier::new(2));
    let openers: Vec<_> = (0..2)
        .map(|_| {
            let (db, start) = (Arc::clone(&db), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                db.builder().pg_writers(2).open()
            })
        })
        .collect();
    let journals: Vec<Journal> = openers
        .into_iter()
        .map(|opener| opener.join().unwrap().unwrap())
        .collect();
    let versions = read_text(
        &journals[0],
        "SELECT string_agg(owner || '=' || version, ',') FROM schema_versions",
    );
    assert_eq!(versions, format!("journal={SCHEMA_VERSION}"));
}

#[test]
fn a_reopen_changes_nothing_and_a_newer_schema_is_refused() {
    let db = TestDb::on(Backend::Postgres);
    let journal = db.open();
    let before = read_text(&journal, OBJECTS);
    assert!(before.contains("executions="), "{before}");
    assert!(before.contains("octet_length="), "{before}");
    drop(journal);

    let journal = db.open();
    assert_eq!(
        read_text(&journal, OBJECTS),
        before,
        "a reopen recreated something"
    );
    assert_eq!(journal.path().to_str(), Some(db.target().as_str()));
    let inspector = Journal::inspect(db.target()).unwrap();
    assert!(inspector.list(&ListFilter::default()).unwrap().is_empty());

    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(journal.write(|conn| {
            conn.execute(
                "UPDATE schema_versions SET version = ?1 WHERE owner = 'journal'",
                [SCHEMA_VERSION + 1],
            )?;
            Ok(())
        }))
        .unwrap();
    drop(journal);
    let refused = db.builder().open().map(drop);
    assert!(
        matches!(refused, Err(Error::SchemaTooNew { found, supported, .. })
            if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION),
        "{refused:?}"
    );
    let refused = Journal::inspect(db.target()).map(drop);
    assert!(
        matches!(refused, Err(Error::SchemaTooNew { .. })),
        "{refused:?}"
    );
}

#[test]
fn an_inspector_refuses_an_empty_schema_and_creates_nothing_in_it() {
    let db = TestDb::on(Backend::Postgres);
    let refused = Journal::inspect(db.target()).map(drop);
    assert!(
        matches!(refused, Err(Error::NotAJournal { .. })),
        "{refused:?}"
    );
    // The journal opened afterwards finds the schema empty: it applies its baseline.
    let journal = db.open();
    assert_eq!(
        read_text(
            &journal,
            "SELECT CAST(version AS TEXT) FROM schema_versions"
        ),
        SCHEMA_VERSION.to_string()
    );
}

#[test]
fn sessions_carry_the_journal_name_durability_and_busy_timeout() {
    let db = TestDb::on(Backend::Postgres);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (durability, synchronous_commit) in
        [(Durability::Full, "on"), (Durability::ProcessCrash, "off")]
    {
        let journal = db
            .builder()
            .durability(durability)
            .busy_timeout_ms(1234)
            .open()
            .unwrap();
        let settings = runtime
            .block_on(journal.write(|conn| {
                Ok(conn.query_row(
                    "SELECT current_setting('application_name') || ' '
                            || current_setting('synchronous_commit') || ' '
                            || current_setting('lock_timeout')",
                    [],
                    |row| row.get::<_, String>(0),
                )?)
            }))
            .unwrap();
        let instance = journal.locker().instance_id().simple().to_string();
        assert_eq!(
            settings,
            format!(
                "durably:{}:writer {synchronous_commit} 1234ms",
                &instance[..8]
            )
        );
        let read_only = read_text(
            &journal,
            "SELECT current_setting('transaction_read_only') || ' '
                    || current_setting('transaction_isolation')",
        );
        assert_eq!(read_only, "on repeatable read");
    }
}

#[test]
fn an_unreachable_server_cannot_be_opened_and_its_password_is_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "postgresql://agent:s3cret@/journal?host={}",
        dir.path().join("no-server").display()
    );
    for refused in [
        Journal::open(url.as_str()).map(drop),
        Journal::inspect(url.as_str()).map(drop),
    ] {
        let error = refused.unwrap_err();
        assert!(matches!(error, Error::CannotOpen { .. }), "{error:?}");
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("agent:***@"), "{shown}");
    }
}

#[test]
fn a_search_path_naming_no_schema_cannot_be_opened_and_the_error_says_so() {
    let server = std::env::var(durably_testkit::POSTGRES_URL_VAR)
        .expect("DURABLY_POSTGRES_URL names the test server (`.ci/pg run`)");
    let durably_db::Target::Postgres(server) = durably_db::Target::from(server) else {
        panic!("DURABLY_POSTGRES_URL is not a postgres:// URL");
    };
    let url = server.with_search_path("no_such_schema");
    let error = Journal::open(url.expose()).map(drop).unwrap_err();
    let Error::CannotOpen { reason, .. } = &error else {
        panic!("expected CannotOpen, got {error:?}");
    };
    assert!(
        reason.contains("no_such_schema") && reason.contains("CREATE SCHEMA"),
        "{reason}"
    );
}

/// A crate's schema whose PostgreSQL baseline folds its first migration, and whose second
/// migration has PostgreSQL SQL of its own.
static EXTENSION: ExtensionSchema = ExtensionSchema {
    owner: "pg_open_test",
    migrations: &[
        Migration {
            name: "0001_things",
            sql: "CREATE TABLE things (id INTEGER PRIMARY KEY)",
            postgres: None,
        },
        Migration {
            name: "0002_thing_names",
            sql: "ALTER TABLE things ADD COLUMN name TEXT",
            postgres: Some("ALTER TABLE things ADD COLUMN name text"),
        },
    ],
    views: "DROP VIEW IF EXISTS thing_names; CREATE VIEW thing_names AS SELECT name FROM things;",
    postgres: PgSchema {
        baseline: "CREATE TABLE things (id bigint PRIMARY KEY);
                   INSERT INTO schema_versions (owner, version) VALUES ('pg_open_test', 1);",
        baseline_version: 1,
        views: "DROP VIEW IF EXISTS thing_names CASCADE;
                CREATE VIEW thing_names AS SELECT name FROM things;",
    },
};

#[test]
fn an_extension_migrates_once_however_many_journals_migrate_it_at_once() {
    let db = TestDb::on(Backend::Postgres);
    let journals: Vec<Journal> = (0..3)
        .map(|_| db.builder().pg_writers(2).open().unwrap())
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let migrations: Vec<_> = journals
            .iter()
            .map(|journal| {
                let journal = journal.clone();
                tokio::spawn(async move { journal.migrate_extension(&EXTENSION).await })
            })
            .collect();
        for migration in migrations {
            migration.await.unwrap().unwrap();
        }
    });
    let version = read_text(
        &journals[0],
        "SELECT CAST(version AS TEXT) || ' ' || CAST(views_sha IS NOT NULL AS TEXT)
         FROM schema_versions WHERE owner = 'pg_open_test'",
    );
    assert_eq!(version, "2 true");
    let before = read_text(&journals[0], OBJECTS);
    assert!(before.contains("thing_names="), "{before}");
    runtime
        .block_on(journals[1].migrate_extension(&EXTENSION))
        .unwrap();
    assert_eq!(
        read_text(&journals[0], OBJECTS),
        before,
        "a second migration recreated something"
    );
}
