//! Opening the journal a command names, a SQLite file or a PostgreSQL database (`--db
//! postgres://…`): to read it only, or to change it after an integrity check. Neither ever
//! creates a journal file that does not exist. A URL is only ever shown through
//! [`durably::db::PgUrl`]'s `Display`, which hides its password.

use std::path::{Path, PathBuf};
use std::time::Duration;

use durably::db::Target as Place;
use durably::runtime::Client;
use durably::{Inspector, Journal};

use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::error_fields;
use crate::escape::escape;

/// The journal a command works on, and how long one of its reads may take.
#[derive(Debug)]
pub struct Target {
    /// The SQLite file or the PostgreSQL database; its `Debug` and `Display` hide a password.
    place: Place,
    read_timeout: Duration,
}

impl Target {
    /// The journal of `--db`, or else of `DURABLY_DB`.
    ///
    /// # Errors
    /// A usage error when neither names one (an empty `DURABLY_DB` names none).
    pub fn chosen(db: Option<&Path>, read_timeout: Duration) -> Result<Self> {
        let path = match db {
            Some(path) => path.to_owned(),
            None => match std::env::var_os("DURABLY_DB") {
                Some(path) if path.is_empty() => {
                    return Err(
                        CliError::new(ErrorCode::BadInput, "DURABLY_DB is set but empty").hint(
                            "set it to the journal's path or PostgreSQL URL, or unset it and \
                                 pass --db PATH",
                        ),
                    );
                }
                Some(path) => PathBuf::from(path),
                None => {
                    return Err(CliError::new(ErrorCode::BadInput, "no database given")
                        .hint("pass --db PATH (or --db postgres://…), or set DURABLY_DB=PATH"));
                }
            },
        };
        Ok(Self {
            place: Place::from(path),
            read_timeout,
        })
    }

    /// Opens the journal to read it and nothing else: see `durably::Inspector`. It creates no
    /// file, migrates nothing and needs only read access.
    ///
    /// # Errors
    /// The file is missing or is a directory, or the inspector refused it.
    pub fn inspect(&self) -> Result<Inspector> {
        self.check_exists()?;
        let timeout_ms = u64::try_from(self.read_timeout.as_millis()).unwrap_or(u64::MAX);
        Journal::builder(&self.place)
            .read_timeout_ms(timeout_ms)
            .inspect()
            .map_err(|error| self.refused(error))
    }

    /// Opens the journal to change it. It never runs the crash-orphan sweep on open (only
    /// `durably sweep` does), and never touches a file that is not a durably journal: the
    /// journal refuses foreign and garbage files before writing anything. A durably file of an
    /// older schema is migrated, as any writer's open would.
    ///
    /// # Errors
    /// The file is missing or is a directory, or the journal refused it.
    pub fn open(&self) -> Result<Journal> {
        self.check_exists()?;
        Journal::builder(&self.place)
            .sweep_on_open(false)
            .open()
            .map_err(|error| self.refused(error))
    }

    /// The journal's refusal to open, as this tool reports it. On PostgreSQL, a database that
    /// cannot be opened is a server that cannot be reached or that refused the connection, and
    /// the hint says so instead of speaking of files.
    fn refused(&self, error: durably::Error) -> CliError {
        match (&self.place, &error) {
            (Place::Postgres(_), durably::Error::CannotOpen { .. }) => {
                CliError::new(ErrorCode::CannotConnect, error.to_string())
                    .with(error_fields::database(&self.place))
                    .hint(
                        "start the PostgreSQL server, or fix the URL: its host and port (or \
                         `?host=` socket directory), user, password and database; `pg_isready -d \
                         URL` checks the server",
                    )
            }
            _ => error.into(),
        }
    }

    /// As [`Target::open`], after SQLite's integrity check (read-only) has passed; `force`
    /// skips the check. A command that changes a damaged file can damage it further.
    ///
    /// # Errors
    /// The check found problems, or as [`Target::inspect`] and [`Target::open`].
    pub fn open_checked(&self, force: bool) -> Result<Journal> {
        if !force {
            let problems = self.inspect()?.integrity_check()?;
            if let Some(first) = problems.first() {
                let more = if problems.len() > 1 {
                    " (and more)"
                } else {
                    ""
                };
                return Err(CliError::new(
                    ErrorCode::IntegrityCheckFailed,
                    format!(
                        "{} fails SQLite's integrity check: {first}{more}",
                        self.shown()
                    ),
                )
                .with(error_fields::database(&self.place))
                .hint(
                    "this command changes the journal, and could damage a damaged file further: \
                     keep a copy, see what is wrong with `sqlite3 PATH 'PRAGMA integrity_check'`, \
                     and pass --force to run the command all the same",
                ));
            }
        }
        self.open()
    }

    /// Opens the journal, as [`Target::open`], to work through the runtime: `start`, `send`
    /// and `resume`. A journal no runtime has used has none of the runtime's tables, so there
    /// is nothing to start, send to or resume in it: that is refused with `refusal`'s error,
    /// without adding the tables (building a client would).
    ///
    /// # Errors
    /// As [`Target::open`]; `refusal`'s error; a storage error.
    pub fn client(
        &self,
        runtime: &tokio::runtime::Runtime,
        refusal: impl FnOnce(&Journal) -> Result<CliError>,
    ) -> Result<Client> {
        let journal = self.open()?;
        if !journal.read(crate::runtime_rows::runtime_present)? {
            return Err(refusal(&journal)?);
        }
        Ok(runtime.block_on(Client::new(journal))?)
    }

    fn shown(&self) -> String {
        escape(&self.place.to_string())
    }

    /// A SQLite file must exist: this tool never creates one. A PostgreSQL database is the
    /// server's to check, when the journal connects.
    fn check_exists(&self) -> Result<()> {
        let Some(path) = self.place.sqlite_path() else {
            return Ok(());
        };
        let shown = self.shown();
        let refused = |code, message: String| {
            CliError::new(code, message).with(error_fields::database(&self.place))
        };
        match std::fs::metadata(path) {
            Ok(metadata) if metadata.is_file() => Ok(()),
            Ok(_) => Err(
                refused(ErrorCode::DatabaseMissing, format!("{shown} is not a file"))
                    .hint("pass the journal's database file with --db"),
            ),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(refused(
                ErrorCode::DatabaseMissing,
                format!("no database at {shown}"),
            )
            .hint(
                "check --db or DURABLY_DB; this command never creates a journal (`durably demo` \
                 makes a sample)",
            )),
            Err(error) => Err(refused(
                ErrorCode::CannotOpen,
                format!("cannot read {shown}: {error}"),
            )),
        }
    }
}

/// A tokio runtime for the journal's async calls.
///
/// # Errors
/// When the runtime cannot start (out of threads or memory).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|error| {
            CliError::new(
                ErrorCode::IoError,
                format!("cannot start the async runtime: {error}"),
            )
        })
}
