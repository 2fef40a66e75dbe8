//! Guarantee: a journal is opened at a target, a SQLite file's path or a PostgreSQL URL. A path
//! opens the file as it always did, and the journal reports it both as its path and as its
//! target. A PostgreSQL URL given to a build without the PostgreSQL backend is refused with
//! `Error::BackendNotCompiled`, whose message names the feature to build with and never the
//! URL's password, and nothing is created.
//!
//! Method: real opens and inspections, through every form a target takes (`&str`, `String`,
//! `&Path`, `PathBuf`); the refusal's variant and message are checked, and that the URL left
//! nothing in the working directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use durably_journal::Journal;
use durably_journal::durably_db::Target;

// With the backend built in, tests/pg_open.rs checks what a URL does instead.
#[cfg(not(feature = "postgres"))]
mod without_the_backend {
    use std::path::{Path, PathBuf};

    use durably_journal::{Error, Journal};

    const URL: &str = "postgresql://agent:s3cret@db.invalid:5432/journal?sslmode=require";

    fn assert_not_compiled(error: &Error) {
        assert!(
            matches!(
                error,
                Error::BackendNotCompiled {
                    backend: "postgres",
                    feature: "postgres"
                }
            ),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains("`postgres` feature"), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
        assert!(!error.is_retryable());
    }

    #[test]
    fn a_postgres_url_is_refused_without_the_backend_and_nothing_is_created() {
        assert_not_compiled(&Journal::open(URL).unwrap_err());
        assert_not_compiled(&Journal::open(URL.to_owned()).unwrap_err());
        // A URL that reached the program as a path (a `PathBuf` argument) is still a URL.
        assert_not_compiled(&Journal::open(PathBuf::from(URL)).unwrap_err());
        assert_not_compiled(&Journal::builder(Path::new(URL)).open().unwrap_err());
        assert_not_compiled(&Journal::inspect(URL).unwrap_err());
        assert_not_compiled(&Journal::builder(URL).inspect().unwrap_err());

        // Read as a relative path, the URL would have made a `postgresql:` directory here (with
        // the file's liveness directory under it): it was never taken for a path.
        assert!(!Path::new("postgresql:").exists());
    }
}

#[test]
fn a_path_opens_the_sqlite_file_and_is_the_journals_target() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let journal = Journal::open(path.to_str().unwrap()).unwrap();
    let canonical = path.canonicalize().unwrap();
    assert_eq!(journal.path(), canonical);
    assert_eq!(journal.target(), &Target::Sqlite(canonical.clone()));
    drop(journal);

    let journal = Journal::open(&path).unwrap();
    assert_eq!(journal.target().sqlite_path(), Some(canonical.as_path()));
    drop(journal);
    let inspector = Journal::inspect(path).unwrap();
    assert_eq!(inspector.path(), canonical);
}
