//! [`TestDb`]: one test's scratch database, removed when it drops.

use std::path::{Path, PathBuf};

use durably_db::Target;
use durably_journal::{Journal, JournalBuilder};
use tempfile::TempDir;

use crate::backend::{BACKEND_VAR, Backend};

/// One test's own database: a journal file path in a temporary directory (SQLite), or a schema
/// of its own in the server's database (PostgreSQL). Dropping it removes the directory or drops
/// the schema, with everything in it; drop the journals opened on it first.
pub struct TestDb {
    place: Place,
}

enum Place {
    /// The journal file is created when a journal first opens `path`; `dir` is removed, with it,
    /// when the `TestDb` drops.
    Sqlite { dir: TempDir, path: PathBuf },
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::Schema),
}

impl TestDb {
    /// A scratch database on the backend `DURABLY_TEST_BACKEND` names ([`Backend::from_env`]).
    ///
    /// # Panics
    /// As [`TestDb::on`].
    pub fn new() -> Self {
        Self::on(Backend::from_env())
    }

    /// A scratch database on `backend`.
    ///
    /// # Panics
    /// When the temporary directory cannot be made; for PostgreSQL, when `DURABLY_POSTGRES_URL`
    /// is unset or its server cannot be reached (the message says how to start one), or when
    /// this crate was built without its `postgres` feature.
    pub fn on(backend: Backend) -> Self {
        let place = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir()
                    .unwrap_or_else(|error| panic!("cannot make a temporary directory: {error}"));
                let path = dir.path().join("journal.db");
                Place::Sqlite { dir, path }
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => Place::Postgres(crate::postgres::Schema::create()),
            #[cfg(not(feature = "postgres"))]
            Backend::Postgres => panic!(
                "{BACKEND_VAR}=postgres, but this test binary was built without PostgreSQL \
                 support: build it with `--features postgres` (or `--all-features`)"
            ),
        };
        Self { place }
    }

    /// The backend this database is on.
    pub fn backend(&self) -> Backend {
        match &self.place {
            Place::Sqlite { .. } => Backend::Sqlite,
            #[cfg(feature = "postgres")]
            Place::Postgres(_) => Backend::Postgres,
        }
    }

    /// What a journal opens: the SQLite file's path, or the PostgreSQL URL whose
    /// `search_path` is this database's schema.
    pub fn target(&self) -> String {
        match &self.place {
            Place::Sqlite { path, .. } => path.display().to_string(),
            #[cfg(feature = "postgres")]
            Place::Postgres(schema) => schema.target().to_owned(),
        }
    }

    /// The SQLite journal file's path, for the tests that only SQLite can run (its files,
    /// locks and raw SQL).
    ///
    /// # Panics
    /// On PostgreSQL, which has no file: such a test belongs to the SQLite-only list.
    pub fn path(&self) -> &Path {
        match &self.place {
            Place::Sqlite { path, .. } => path,
            #[cfg(feature = "postgres")]
            Place::Postgres(schema) => panic!(
                "this test asked for a SQLite file, but its database is the PostgreSQL schema \
                 {} ({BACKEND_VAR}=postgres): run it on SQLite only",
                schema.name()
            ),
        }
    }

    /// The directory holding the SQLite journal file (and whatever else the test puts beside
    /// it); `None` on PostgreSQL.
    pub fn dir(&self) -> Option<&Path> {
        match &self.place {
            Place::Sqlite { dir, .. } => Some(dir.path()),
            #[cfg(feature = "postgres")]
            Place::Postgres(_) => None,
        }
    }

    /// The PostgreSQL schema this database is; `None` on SQLite.
    pub fn schema(&self) -> Option<&str> {
        match &self.place {
            Place::Sqlite { .. } => None,
            #[cfg(feature = "postgres")]
            Place::Postgres(schema) => Some(schema.name()),
        }
    }

    /// A journal builder for this database, with the default settings.
    pub fn builder(&self) -> JournalBuilder {
        Journal::builder(self.target())
    }

    /// The journal on this database, opened with the default settings.
    ///
    /// # Panics
    /// When it cannot be opened, with the journal's error.
    pub fn open(&self) -> Journal {
        self.builder().open().unwrap_or_else(|error| {
            // Through `Target`, which hides a URL's password.
            let target = Target::from(self.target());
            panic!("cannot open the test journal at {target}: {error}")
        })
    }
}

impl TestDb {
    /// Runs `check`, which only SQLite can make (its files, its pragmas, its query plans), with
    /// the journal file's path. On PostgreSQL the check is skipped, and says so on stderr,
    /// naming `what`: the one way a conformance test holds a SQLite-only assertion.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub fn sqlite_only(&self, what: &str, check: impl FnOnce(&Path)) {
        match &self.place {
            Place::Sqlite { path, .. } => check(path),
            #[cfg(feature = "postgres")]
            Place::Postgres(schema) => eprintln!(
                "skipped, SQLite only: {what} (the database is the PostgreSQL schema {})",
                schema.name()
            ),
        }
    }

    /// Asserts, on SQLite only ([`TestDb::sqlite_only`]), that the journal file is sound: on a
    /// read-only connection of its own, `PRAGMA integrity_check` answers `ok` and
    /// `foreign_key_check` finds no row. PostgreSQL checks its pages and foreign keys itself.
    ///
    /// # Panics
    /// When the file cannot be read or a check reports damage, with its report.
    pub fn assert_sqlite_integrity(&self) {
        self.sqlite_only("PRAGMA integrity_check and foreign_key_check", |path| {
            let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
            let checked = rusqlite::Connection::open_with_flags(path, flags).and_then(|conn| {
                let report: String =
                    conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))?;
                let dangling: i64 =
                    conn.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |row| {
                        row.get(0)
                    })?;
                Ok((report, dangling))
            });
            let (report, dangling) = checked.unwrap_or_else(|error| {
                panic!("{} is damaged or unreadable: {error}", path.display())
            });
            assert_eq!(report, "ok", "{} is damaged", path.display());
            assert_eq!(
                dangling,
                0,
                "{} has rows whose foreign keys dangle",
                path.display()
            );
        });
    }
}

impl Default for TestDb {
    /// As [`TestDb::new`].
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    //! The SQLite side: the journal opens where `target` says, and the directory goes with
    //! the `TestDb`; PostgreSQL asked of a build without it says which flag builds it.
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_sqlite_test_db_is_a_journal_file_in_a_directory_of_its_own() {
        let db = TestDb::on(Backend::Sqlite);
        assert_eq!(db.backend(), Backend::Sqlite);
        assert_eq!(db.schema(), None);
        let dir = db.dir().unwrap().to_path_buf();
        assert_eq!(db.path(), dir.join("journal.db"));
        assert_eq!(db.target(), db.path().display().to_string());
        assert!(!db.path().exists(), "the file is made by the first open");

        let journal = db.open();
        assert_eq!(journal.path(), db.path());
        assert!(db.path().is_file());
        drop(journal);

        let other = TestDb::on(Backend::Sqlite);
        assert_ne!(
            other.dir(),
            db.dir(),
            "each TestDb has a directory of its own"
        );
        drop(db);
        assert!(!dir.exists(), "the directory goes with the TestDb");
    }

    #[test]
    fn sqlite_only_checks_run_on_sqlite_with_the_file() {
        let db = TestDb::on(Backend::Sqlite);
        drop(db.open());
        let mut checked = None;
        db.sqlite_only("the path", |path| checked = Some(path.to_path_buf()));
        assert_eq!(checked.as_deref(), Some(db.path()));
        db.assert_sqlite_integrity();
    }

    #[test]
    #[should_panic(expected = "is damaged")]
    fn a_damaged_file_fails_the_integrity_check() {
        let db = TestDb::on(Backend::Sqlite);
        drop(db.open());
        // Overwrites the pages after the header: the file still opens, but its b-trees are
        // garbage.
        let mut bytes = std::fs::read(db.path()).unwrap();
        let page_size = 4096;
        for byte in bytes.iter_mut().skip(page_size) {
            *byte = 0x5a;
        }
        std::fs::write(db.path(), bytes).unwrap();
        db.assert_sqlite_integrity();
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    #[should_panic(expected = "build it with `--features postgres`")]
    fn postgres_without_the_feature_panics_with_the_flag_that_builds_it() {
        TestDb::on(Backend::Postgres);
    }
}
