//! [`Backend`]: which database a test run's scratch journals live on.

use std::env::{self, VarError};

/// The environment variable that picks the backend: `sqlite` (the default) or `postgres`.
pub const BACKEND_VAR: &str = "DURABLY_TEST_BACKEND";

/// The environment variable holding the PostgreSQL server's URL, as `.ci/pg start` prints it.
pub const POSTGRES_URL_VAR: &str = "DURABLY_POSTGRES_URL";

/// A storage backend the suite runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A journal file in a temporary directory.
    Sqlite,
    /// A schema of its own in the database `DURABLY_POSTGRES_URL` names.
    Postgres,
}

impl Backend {
    /// The backend `DURABLY_TEST_BACKEND` names; SQLite when it is unset or empty.
    ///
    /// # Panics
    /// When the variable names no backend, with the values it takes: a typo must not quietly
    /// run the suite on SQLite again.
    pub fn from_env() -> Self {
        match env::var(BACKEND_VAR) {
            Ok(value) => Self::named(&value),
            Err(VarError::NotPresent) => Self::Sqlite,
            Err(VarError::NotUnicode(value)) => Self::named(&value.to_string_lossy()),
        }
    }

    fn named(value: &str) -> Self {
        match value {
            "" | "sqlite" => Self::Sqlite,
            "postgres" => Self::Postgres,
            other => panic!(
                "{BACKEND_VAR}={other:?} names no backend: set it to `sqlite` (the default) or \
                 `postgres`, or unset it"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_the_variable_takes() {
        assert_eq!(Backend::named(""), Backend::Sqlite);
        assert_eq!(Backend::named("sqlite"), Backend::Sqlite);
        assert_eq!(Backend::named("postgres"), Backend::Postgres);
    }

    #[test]
    #[should_panic(expected = "set it to `sqlite` (the default) or `postgres`")]
    fn an_unknown_name_panics_with_the_names_it_takes() {
        Backend::named("mysql");
    }
}
