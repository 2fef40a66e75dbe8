//! A scratch schema in the PostgreSQL database `DURABLY_POSTGRES_URL` names.
//!
//! The schema is made and dropped with tokio-postgres directly, on a current-thread runtime of
//! its own on a thread of its own, so that a `TestDb` can be made and dropped inside any test,
//! async ones (already inside a tokio runtime) included.

use std::env;
use std::error::Error;
use std::thread;
use std::time::Duration;

use durably_db::Target;
use tokio_postgres::{Config, NoTls, SimpleQueryMessage};
use uuid::Uuid;

use crate::backend::POSTGRES_URL_VAR;

/// How long making or dropping a schema waits for the server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long dropping a schema waits for a lock another session holds on something in it (a
/// journal the test did not drop).
const DROP_LOCK_TIMEOUT_MS: u32 = 10_000;

/// How often dropping a schema is tried when the server aborts it to break a deadlock.
const DROP_TRIES_MAX: u32 = 5;

/// Whether `error` is the server's abort of a transaction to break a deadlock.
fn is_deadlock(error: &(dyn Error + Send + Sync + 'static)) -> bool {
    error
        .downcast_ref::<tokio_postgres::Error>()
        .and_then(tokio_postgres::Error::code)
        == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
}

/// What to do when no server answers, for every panic that says so.
const START_A_SERVER: &str = "start a private server with `eval \"$(.ci/pg start)\"` (stop it \
    with `.ci/pg stop \"$DURABLY_PG_DIR\"`), or run the tests under `.ci/pg run cargo test ...`";

type BoxError = Box<dyn Error + Send + Sync>;

/// A schema `t_<uuid>` of one test, dropped with everything in it when this drops.
pub(crate) struct Schema {
    /// `DURABLY_POSTGRES_URL`: where the schema is made and dropped.
    server: String,
    name: String,
    /// `server` with the schema as its `search_path`: what journals open.
    target: String,
}

impl Schema {
    /// A new schema in the database `DURABLY_POSTGRES_URL` names.
    pub(crate) fn create() -> Self {
        Self::create_in(server_url(env::var(POSTGRES_URL_VAR).ok()))
    }

    fn create_in(server: String) -> Self {
        let name = format!("t_{}", Uuid::new_v4().simple());
        if let Err(error) = simple_query(&server, &format!("CREATE SCHEMA {name}")) {
            panic!(
                "cannot make a scratch schema in the PostgreSQL server {POSTGRES_URL_VAR} names \
                 ({}): {error}; if it is not running, {START_A_SERVER}",
                Target::from(server.as_str())
            );
        }
        let target = with_search_path(&server, &name);
        Self {
            server,
            name,
            target,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn target(&self) -> &str {
        &self.target
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let sql = format!(
            "SET lock_timeout = {DROP_LOCK_TIMEOUT_MS}; DROP SCHEMA IF EXISTS {} CASCADE",
            self.name
        );
        // A journal's writer may still be finishing a transaction (tasks of the test's runtime
        // outlive its locals): the drop, taking each table's lock in turn, can deadlock with
        // it, and the server then aborts the drop, not the writer. Tried again; the writer
        // ends with its runtime.
        let mut dropped = simple_query(&self.server, &sql);
        for _ in 1..DROP_TRIES_MAX {
            match &dropped {
                Err(error) if is_deadlock(error.as_ref()) => {
                    dropped = simple_query(&self.server, &sql);
                }
                _ => break,
            }
        }
        if let Err(error) = dropped {
            let message = format!("cannot drop the scratch schema {}: {error}", self.name);
            // A second panic while the test's own unwinds would abort and hide the first.
            if thread::panicking() {
                eprintln!("{message}");
            } else {
                panic!("{message}");
            }
        }
    }
}

/// The server URL from `DURABLY_POSTGRES_URL`'s value.
fn server_url(value: Option<String>) -> String {
    let Some(url) = value.filter(|url| !url.is_empty()) else {
        panic!(
            "the PostgreSQL tests need a server in {POSTGRES_URL_VAR}, which is not set: \
             {START_A_SERVER}"
        );
    };
    // Not shown: a connection string may hold a password.
    assert!(
        matches!(Target::from(url.as_str()), Target::Postgres(_)),
        "{POSTGRES_URL_VAR} must be a postgresql:// URL, as `.ci/pg start` prints; it holds \
         something else"
    );
    url
}

/// `url` with `search_path` set to `schema` ([`durably_db::PgUrl::with_search_path`]); `url`
/// is a PostgreSQL URL, as `server_url` checked.
fn with_search_path(url: &str, schema: &str) -> String {
    match Target::from(url) {
        Target::Postgres(url) => url.with_search_path(schema).expose().to_owned(),
        Target::Sqlite(_) => panic!("a scratch schema needs a postgresql:// URL"),
    }
}

/// Runs `sql` (one or more statements, no parameters) on a connection of its own to `url`, and
/// returns the rows as text.
fn simple_query(url: &str, sql: &str) -> Result<Vec<Vec<Option<String>>>, BoxError> {
    let mut config: Config = url.parse()?;
    config.connect_timeout(CONNECT_TIMEOUT);
    let sql = sql.to_owned();
    let worker = thread::spawn(move || -> Result<_, BoxError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async move {
            let (client, connection) = config.connect(NoTls).await?;
            let driver = tokio::spawn(connection);
            let messages = client.simple_query(&sql).await?;
            drop(client);
            driver.await??;
            Ok(messages
                .iter()
                .filter_map(|message| match message {
                    SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|at| row.get(at).map(str::to_owned))
                            .collect(),
                    ),
                    _ => None,
                })
                .collect())
        })
    });
    worker
        .join()
        .map_err(|_| BoxError::from("the thread talking to the server panicked"))?
}

#[cfg(test)]
mod tests {
    //! The PostgreSQL side, against the server in `DURABLY_POSTGRES_URL` (`.ci/pg run`): a
    //! `TestDb` is a schema that sessions opening its target work in, and it is gone after the
    //! drop; a missing or unreachable server panics with the command that starts one.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::{Backend, TestDb};

    fn one_value(url: &str, sql: &str) -> Option<String> {
        simple_query(url, sql).unwrap()[0][0].clone()
    }

    /// Whether the server holds a schema named `name`, asked outside any `TestDb`.
    fn schema_exists(name: &str) -> bool {
        let server = server_url(env::var(POSTGRES_URL_VAR).ok());
        let sql = format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{name}'");
        one_value(&server, &sql) == Some("1".to_owned())
    }

    #[test]
    fn a_postgres_test_db_is_a_schema_its_target_works_in_and_dropped_after() {
        let db = TestDb::on(Backend::Postgres);
        assert_eq!(db.backend(), Backend::Postgres);
        assert_eq!(db.dir(), None);
        let schema = db.schema().unwrap().to_owned();
        assert!(schema.starts_with("t_") && schema.len() == 34, "{schema}");
        assert!(schema_exists(&schema));

        // A session opened on the target works in the schema without naming it.
        let target = db.target();
        assert!(matches!(Target::from(target.as_str()), Target::Postgres(_)));
        let setup = "CREATE TABLE probe (x integer); INSERT INTO probe VALUES (7)";
        simple_query(&target, setup).unwrap();
        assert_eq!(
            one_value(&target, "SELECT current_schema()"),
            Some(schema.clone())
        );
        let server = server_url(env::var(POSTGRES_URL_VAR).ok());
        let qualified = format!("SELECT x FROM {schema}.probe");
        assert_eq!(one_value(&server, &qualified), Some("7".to_owned()));

        let other = TestDb::on(Backend::Postgres);
        let other_schema = other.schema().unwrap().to_owned();
        assert_ne!(other_schema, schema, "each TestDb has a schema of its own");
        drop(db);
        assert!(!schema_exists(&schema), "{schema} outlived its TestDb");
        assert!(
            schema_exists(&other_schema),
            "dropping one TestDb dropped another's"
        );
        drop(other);
        assert!(!schema_exists(&other_schema));
    }

    /// Most of the suite's tests are async: making and dropping a schema there must not start
    /// a runtime inside theirs.
    #[tokio::test]
    async fn a_test_db_is_made_and_dropped_inside_an_async_test() {
        let db = TestDb::on(Backend::Postgres);
        let schema = db.schema().unwrap().to_owned();
        assert!(schema_exists(&schema));
        drop(db);
        assert!(!schema_exists(&schema));
    }

    #[test]
    fn the_schema_joins_options_the_url_already_has() {
        assert_eq!(
            with_search_path("postgresql://u@/d?host=/tmp/x", "t_1"),
            "postgresql://u@/d?host=/tmp/x&options=-csearch_path%3Dt_1"
        );
        assert_eq!(
            with_search_path("postgresql://u@h/d", "t_1"),
            "postgresql://u@h/d?options=-csearch_path%3Dt_1"
        );
        assert_eq!(
            with_search_path(
                "postgresql://u@h/d?options=-cwork_mem%3D8MB&sslmode=disable",
                "t_1"
            ),
            "postgresql://u@h/d?options=-cwork_mem%3D8MB%20-csearch_path%3Dt_1&sslmode=disable"
        );
        let config: Config = with_search_path("postgresql://u@h/d?options=-cx%3D1", "t_1")
            .parse()
            .unwrap();
        assert_eq!(config.get_options(), Some("-cx=1 -csearch_path=t_1"));
    }

    #[test]
    #[should_panic(expected = "eval \"$(.ci/pg start)\"")]
    fn no_url_panics_with_the_command_that_starts_a_server() {
        server_url(None);
    }

    #[test]
    #[should_panic(expected = "if it is not running, start a private server with")]
    fn an_unreachable_server_panics_with_the_command_that_starts_one() {
        Schema::create_in("postgresql://durably@/durably?host=/nonexistent-durably-pg".to_owned());
    }
}
