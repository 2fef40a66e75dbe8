//! Errors of the PostgreSQL side, classified by what a caller can do about them.
//!
//! A `PgError` keeps the SQLSTATE, the server's primary message and the first line of the SQL.
//! It never keeps the driver's error: that one prints the server's DETAIL, which quotes row
//! values (`Key (id)=(…) already exists`), and parameter values are payloads.

use std::fmt;

/// The longest excerpt of the SQL an error keeps (its first line, cut at this many characters).
const STATEMENT_EXCERPT_CHARS_MAX: usize = 120;

/// What went wrong, told apart by what the caller does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PgErrorKind {
    /// The URL is invalid, or the server refused or could not be reached at connect.
    Connect,
    /// The connection is closed or was lost (including `pg_terminate_backend` and a server
    /// shutdown): an open transaction did not commit. Reconnect.
    ConnectionLost,
    /// The connection was lost while its `COMMIT` was in flight: the transaction may or may not
    /// have committed. Only reading the data again tells.
    CommitUnknown,
    /// A `COMMIT` found its transaction aborted by an earlier error, so the server rolled it
    /// back: nothing committed. (PostgreSQL reports such a `COMMIT` as a success.)
    RolledBack,
    /// 40P01 `deadlock_detected`: this transaction was rolled back; nothing committed.
    Deadlock,
    /// 40001 `serialization_failure`: this transaction was rolled back; nothing committed.
    SerializationFailure,
    /// 55P03 `lock_not_available`: a row lock was not granted within `lock_timeout` (busy).
    LockNotAvailable,
    /// 23505 `unique_violation`. The transaction is aborted: only `ROLLBACK` works next.
    UniqueViolation,
    /// 57014 `query_canceled`: a `statement_timeout` or a cancel request.
    QueryCanceled,
    /// SQLSTATE class 53 (out of memory, disk full, too many connections).
    InsufficientResources,
    /// Any other error the server reported.
    Server,
    /// A parameter's value cannot be bound to the type the server inferred for it.
    Parameter,
    /// An integer parameter does not fit the server's integer type.
    OutOfRange,
    /// A result column has a type this adapter does not read (such as `numeric`): cast it.
    UnsupportedType,
    /// A result value could not be decoded as its column type says.
    Column,
    /// The driver's private runtime could not start.
    Runtime,
}

impl PgErrorKind {
    fn describe(self) -> &'static str {
        match self {
            Self::Connect => "cannot connect to PostgreSQL",
            Self::ConnectionLost => "PostgreSQL connection lost",
            Self::CommitUnknown => "PostgreSQL connection lost during COMMIT, outcome unknown",
            Self::RolledBack => "transaction rolled back at COMMIT",
            Self::Deadlock => "deadlock detected, transaction rolled back",
            Self::SerializationFailure => "serialization failure, transaction rolled back",
            Self::LockNotAvailable => "lock not available",
            Self::UniqueViolation => "unique violation",
            Self::QueryCanceled => "statement canceled",
            Self::InsufficientResources => "PostgreSQL lacks resources",
            Self::Server => "PostgreSQL error",
            Self::Parameter => "parameter type mismatch",
            Self::OutOfRange => "parameter out of range",
            Self::UnsupportedType => "unsupported column type",
            Self::Column => "unreadable column value",
            Self::Runtime => "PostgreSQL driver runtime",
        }
    }
}

/// An error of the PostgreSQL side. It carries no parameter or row values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgError {
    kind: PgErrorKind,
    sqlstate: Option<String>,
    message: String,
    statement: Option<String>,
}

impl PgError {
    /// Builds an error of this adapter's own (not the server's).
    pub(super) fn new(kind: PgErrorKind, message: impl Into<String>, sql: Option<&str>) -> Self {
        Self {
            kind,
            sqlstate: None,
            message: message.into(),
            statement: sql.map(excerpt),
        }
    }

    /// Classifies a driver error. `commit_sent`: the statement that failed contains a `COMMIT`
    /// and had been sent, so a lost connection leaves its outcome unknown.
    pub(super) fn from_driver(
        error: &tokio_postgres::Error,
        sql: Option<&str>,
        commit_sent: bool,
    ) -> Self {
        let statement = sql.map(excerpt);
        let Some(db) = error.as_db_error() else {
            let lost = error.is_closed() || io_error(error);
            let kind = match (lost, commit_sent) {
                (true, true) => PgErrorKind::CommitUnknown,
                (true, false) => PgErrorKind::ConnectionLost,
                (false, _) => PgErrorKind::Server,
            };
            return Self {
                kind,
                sqlstate: None,
                message: chain(error),
                statement,
            };
        };
        let code = db.code().code();
        let kind = match classify(code) {
            PgErrorKind::ConnectionLost if commit_sent => PgErrorKind::CommitUnknown,
            kind => kind,
        };
        Self {
            kind,
            sqlstate: Some(code.to_owned()),
            message: redact(code, db.message()),
            statement,
        }
    }

    /// A failed connect: the URL, the socket or the server's refusal (its SQLSTATE kept).
    pub(super) fn connect(error: &tokio_postgres::Error) -> Self {
        Self {
            kind: PgErrorKind::Connect,
            ..Self::from_driver(error, None, false)
        }
    }

    /// What went wrong, by what the caller does next.
    pub fn kind(&self) -> PgErrorKind {
        self.kind
    }

    /// The server's SQLSTATE, when the server reported the error.
    pub fn sqlstate(&self) -> Option<&str> {
        self.sqlstate.as_deref()
    }

    /// The server's primary message (values it quotes removed), or the adapter's.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The first line of the SQL that failed, if a statement was running.
    pub fn statement(&self) -> Option<&str> {
        self.statement.as_deref()
    }

    /// A deadlock or a serialization failure: the transaction rolled back, nothing committed.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self.kind,
            PgErrorKind::Deadlock | PgErrorKind::SerializationFailure
        )
    }

    /// A lock was not granted in time (`lock_timeout`).
    pub fn is_busy(&self) -> bool {
        self.kind == PgErrorKind::LockNotAvailable
    }

    /// The connection is gone (whether or not a `COMMIT` was in flight).
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self.kind,
            PgErrorKind::ConnectionLost | PgErrorKind::CommitUnknown
        )
    }

    /// The connection was lost while a `COMMIT` was in flight.
    pub fn is_commit_unknown(&self) -> bool {
        self.kind == PgErrorKind::CommitUnknown
    }
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.describe(), self.message)?;
        if let Some(code) = &self.sqlstate {
            write!(f, " (SQLSTATE {code})")?;
        }
        if let Some(statement) = &self.statement {
            write!(f, " in `{statement}`")?;
        }
        Ok(())
    }
}

impl std::error::Error for PgError {}

/// The kind a SQLSTATE belongs to.
fn classify(code: &str) -> PgErrorKind {
    match code {
        "40P01" => PgErrorKind::Deadlock,
        "40001" => PgErrorKind::SerializationFailure,
        "55P03" => PgErrorKind::LockNotAvailable,
        "23505" => PgErrorKind::UniqueViolation,
        "57014" => PgErrorKind::QueryCanceled,
        // admin_shutdown (pg_terminate_backend), crash_shutdown, cannot_connect_now.
        "57P01" | "57P02" | "57P03" => PgErrorKind::ConnectionLost,
        _ if code.starts_with("08") => PgErrorKind::ConnectionLost,
        _ if code.starts_with("53") => PgErrorKind::InsufficientResources,
        _ => PgErrorKind::Server,
    }
}

/// The server's message, safe to show: data exceptions (class 22) quote the value they reject
/// after a colon (`invalid input syntax for type integer: "…"`), so only the part before it stays.
fn redact(code: &str, message: &str) -> String {
    match message.split_once(':') {
        Some((head, _)) if code.starts_with("22") => head.to_owned(),
        _ => message.to_owned(),
    }
}

/// A driver error that is not the server's, with its causes (I/O errors name no values).
fn chain(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether the driver failed on the socket itself.
fn io_error(error: &tokio_postgres::Error) -> bool {
    std::error::Error::source(error).is_some_and(<dyn std::error::Error>::is::<std::io::Error>)
}

/// The SQL's first non-blank line, cut to `STATEMENT_EXCERPT_CHARS_MAX` characters.
fn excerpt(sql: &str) -> String {
    let line = sql
        .trim_start()
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end();
    match line.char_indices().nth(STATEMENT_EXCERPT_CHARS_MAX) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_are_classified() {
        assert_eq!(classify("40P01"), PgErrorKind::Deadlock);
        assert_eq!(classify("40001"), PgErrorKind::SerializationFailure);
        assert_eq!(classify("55P03"), PgErrorKind::LockNotAvailable);
        assert_eq!(classify("23505"), PgErrorKind::UniqueViolation);
        assert_eq!(classify("57014"), PgErrorKind::QueryCanceled);
        assert_eq!(classify("57P01"), PgErrorKind::ConnectionLost);
        assert_eq!(classify("08006"), PgErrorKind::ConnectionLost);
        assert_eq!(classify("53300"), PgErrorKind::InsufficientResources);
        assert_eq!(classify("42601"), PgErrorKind::Server);
    }

    #[test]
    fn data_exceptions_lose_the_value_they_quote() {
        assert_eq!(
            redact("22P02", "invalid input syntax for type integer: \"secret\""),
            "invalid input syntax for type integer"
        );
        assert_eq!(
            redact(
                "23505",
                "duplicate key value violates unique constraint \"t_pkey\""
            ),
            "duplicate key value violates unique constraint \"t_pkey\""
        );
    }

    #[test]
    fn the_statement_excerpt_is_its_first_line_cut_short() {
        assert_eq!(excerpt("\n  SELECT a,\n b FROM t"), "SELECT a,");
        let long = "é".repeat(STATEMENT_EXCERPT_CHARS_MAX + 5);
        assert_eq!(
            excerpt(&long).chars().count(),
            STATEMENT_EXCERPT_CHARS_MAX + 1
        );
        let error = PgError::new(PgErrorKind::Parameter, "p", Some("SELECT 1\nFROM t"));
        assert_eq!(
            error.to_string(),
            "parameter type mismatch: p in `SELECT 1`"
        );
    }
}
