//! The fixture of durably's conformance suite: a scratch database on the backend the
//! environment picks, so that one test binary runs against SQLite or PostgreSQL unchanged.
//!
//! `DURABLY_TEST_BACKEND` picks the backend ([`Backend::from_env`]): `sqlite` (the default) or
//! `postgres`. A [`TestDb`] is then a journal file in a temporary directory, or a new schema in
//! the PostgreSQL database `DURABLY_POSTGRES_URL` names (the `postgres` feature), and either is
//! removed when the `TestDb` drops. A PostgreSQL run without a reachable server panics with the
//! command that starts one: such a test never skips.
//!
//! ```no_run
//! let db = durably_testkit::TestDb::new();
//! let journal = db.open();
//! assert!(journal.path().exists());
//! ```

mod backend;
#[cfg(feature = "postgres")]
mod postgres;
mod test_db;

pub use backend::{BACKEND_VAR, Backend, POSTGRES_URL_VAR};
pub use test_db::TestDb;
