//! The tool's one error type, its exit codes, and how errors are printed.
//!
//! Errors come in layers: the library's error says what happened, naming the path and the ids;
//! this module adds what to do about it (the hint), and [`ErrorCode`] the stable code and the
//! exit code. Every error, a usage error included, is printed the same way (docs/cli.md,
//! "Errors"):
//!
//! ```text
//! durably: error: <what happened>
//! durably: hint: <what to do>
//! ```
//!
//! or, with `--json`, as one JSON object on standard error: `{"code", "message", "hint",
//! "exit_code"}`, then the ids and paths the error concerns (see [`crate::error_fields`]).

use std::fmt;
use std::io::Write;
use std::process::ExitCode;

use crate::error_code::ErrorCode;
use crate::error_fields::{self, Fields};
use crate::escape::escape;
use durably::UnsafeFileReason;
use durably::lock::Refusal;
use serde_json::Value;

/// Exit code of a command that failed: the database, the journal or the world said no.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a command line that cannot be run as written.
pub const EXIT_USAGE: u8 = 2;

/// The keys every `--json` error has; an error's own fields never take one of them.
const JSON_KEYS: [&str; 4] = ["code", "message", "hint", "exit_code"];

/// A failed command: what went wrong, what to do about it, its code and what it concerns.
#[derive(Debug)]
pub struct CliError {
    /// What went wrong.
    pub message: String,
    /// What to do about it, when there is something to say.
    pub hint: Option<String>,
    /// What kind of error it is; it decides the exit code.
    pub code: ErrorCode,
    /// The ids and paths it concerns, for `--json`.
    pub fields: Fields,
}

impl CliError {
    /// An error of kind `code` that says `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: None,
            code,
            fields: Fields::new(),
        }
    }

    /// This error with `hint` as what to do about it.
    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// This error with `field` (an id or a path, from [`crate::error_fields`]) for `--json`.
    #[must_use]
    pub fn with(mut self, field: (&'static str, Value)) -> Self {
        debug_assert!(
            !JSON_KEYS.contains(&field.0),
            "{} is a key of every error",
            field.0
        );
        self.fields.push(field);
        self
    }

    /// The process exit code.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code.exit_code())
    }

    /// Prints the error on standard error: two lines of text, or one JSON object with `json`.
    /// Text that may come from a file or a path is escaped, as everything this tool prints.
    pub fn report(&self, json: bool) {
        let message = escape(&self.message);
        let hint = self.hint.as_deref().map(escape);
        let text = if json {
            format!("{}\n", self.json(message, hint))
        } else {
            let hint = hint.map(|hint| format!("durably: hint: {hint}\n"));
            format!("durably: error: {message}\n{}", hint.unwrap_or_default())
        };
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }

    /// The `--json` object, its keys in a fixed order: the code first, then the message, the
    /// hint (`null` when there is none), the exit code, and the error's own fields.
    fn json(&self, message: String, hint: Option<String>) -> String {
        let common = [
            ("code", Value::from(self.code.as_str())),
            ("message", Value::from(message)),
            ("hint", Value::from(hint)),
            ("exit_code", Value::from(self.code.exit_code())),
        ];
        let own = self.fields.iter().map(|(name, value)| match value {
            Value::String(text) => (*name, Value::from(escape(text))),
            other => (*name, other.clone()),
        });
        let members: Vec<String> = common
            .into_iter()
            .chain(own)
            .map(|(name, value)| format!("{}:{value}", Value::from(name)))
            .collect();
        format!("{{{}}}", members.join(","))
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<durably::Error> for CliError {
    fn from(error: durably::Error) -> Self {
        Self {
            hint: hint(&error),
            fields: error_fields::of_journal(&error),
            ..Self::new(ErrorCode::of_journal(&error), error.to_string())
        }
    }
}

impl From<durably::scheduler::Error> for CliError {
    /// The scheduler's message says what was wrong; for the input a command line gives (a job
    /// id, a slot) this adds what to pass instead.
    fn from(error: durably::scheduler::Error) -> Self {
        use durably::scheduler::Error;
        let error = match error {
            Error::Journal(journal) => return journal.into(),
            other => other,
        };
        let advice = match &error {
            Error::InvalidJobId { .. } => "; pass the job id as the program registers it",
            Error::SlotOutOfRange { .. } => "; pass a slot from year 1970 to 9999",
            _ => "",
        };
        Self {
            hint: scheduler_hint(&error),
            fields: error_fields::of_scheduler(&error),
            ..Self::new(ErrorCode::of_scheduler(&error), format!("{error}{advice}"))
        }
    }
}

/// What the operator can do about a scheduler error; `None` where the message says all there
/// is.
fn scheduler_hint(error: &durably::scheduler::Error) -> Option<String> {
    use durably::scheduler::Error;
    Some(match error {
        Error::UnknownJob { .. } => "`durably schedules` lists the jobs of this journal".to_owned(),
        Error::JobPaused { job } => format!("`durably schedules resume {}` first", escape(job)),
        Error::JobNeedsWorkflow { .. } => {
            "register the job again from its program, naming a workflow".to_owned()
        }
        Error::RangeReversed { .. } => "pass a --from at or before --to".to_owned(),
        Error::EmptyRange { .. } => {
            "widen the range to hold a slot (`durably schedules` shows the schedule)".to_owned()
        }
        Error::RangeInFuture { .. } => "end the range at or before now".to_owned(),
        Error::TooManySlots { .. } => "backfill the range in smaller pieces".to_owned(),
        Error::NoSlotsLeft { .. } => "give the job a schedule with slots to come".to_owned(),
        Error::Start(_) => "start a runtime that registers the job's workflow kind (and \
                            configures its queue) on this journal, then run this again"
            .to_owned(),
        _ => return None,
    })
}

/// What the operator can do about a library error; `None` where the message says all there is.
fn hint(error: &durably::Error) -> Option<String> {
    use durably::Error as E;
    Some(match error {
        E::Locked { pid, .. } => format!(
            "process {pid} is driving it; run this again once it has stopped (`durably locks` \
             shows every holder and whether it is alive)"
        ),
        E::LeaseExpiredHolderAlive {
            execution_id, pid, ..
        } => format!(
            "make sure process {pid} has stopped (its lease expired, but it may still perform \
             the effect), then run this again: `durably show {execution_id}` then gives the \
             token to check against"
        ),
        E::Ambiguous {
            execution_id, seq, ..
        }
        | E::AwaitingOperator { execution_id, seq } => format!(
            "check the outside world with the step's key (`durably show {execution_id}` prints \
             it and a token), then `durably resolve {execution_id} {seq} --seen TOKEN \
             --completed JSON` or `--not-done`"
        ),
        E::StaleSeenIntent { execution_id, .. } => format!(
            "`durably show {execution_id}` shows the step as it is now: if it is still \
             ambiguous, check the outside world again with its key and answer with the token \
             it prints now"
        ),
        E::Busy { .. } => {
            "another process held the journal's write lock; run this again in a moment".to_owned()
        }
        E::ReadOnly { .. } => "this command writes: run it as a user who may write the journal \
                               and its directory (ls, show, locks, fires and sweep --dry-run \
                               need only read access)"
            .to_owned(),
        E::SchemaTooNew { .. } | E::ExtensionSchemaTooNew { .. } => {
            "use the durably release that wrote this journal, or a newer one".to_owned()
        }
        E::SchemaTooOld { .. } => "a program linked with this durably migrates the journal when \
                                   it opens it; reading commands never migrate"
            .to_owned(),
        E::ForeignDatabase { .. } => "check --db: this file belongs to another program".to_owned(),
        E::NotAJournal { .. } => "check --db; a journal is made by a program that opens it with \
                                  durably (`durably demo` makes a sample)"
            .to_owned(),
        E::Corrupt { .. } => "check --db; if it is the journal, `sqlite3 PATH 'PRAGMA \
                              integrity_check'` shows the damage: restore the journal from a \
                              backup"
            .to_owned(),
        E::NotFound(_) => "`durably ls` lists the executions of this journal".to_owned(),
        E::Cancelled(_) => {
            "a cancelled execution never runs again; start a new one under a new id".to_owned()
        }
        E::PayloadTooLarge { max, .. } => format!("give a value of at most {max} bytes of JSON"),
        E::UnsafeFile { reason, .. } => unsafe_file_hint(*reason)?,
        E::DanglingSymlink { .. } => {
            "point the link at the journal, or pass the journal's own path with --db".to_owned()
        }
        E::Lock(durably::lock::Error::LivenessDirRefused { path, reason }) => {
            liveness_dir_hint(&path.display().to_string(), reason)?
        }
        E::ReadTimeout { .. } => "a journal durably wrote reads far faster, so this one may hold \
                                  a view or trigger that never ends; if it is only very large, \
                                  raise --read-timeout"
            .to_owned(),
        E::PathTooLong { max, .. } => format!(
            "move the journal, or name it by a path of at most {max} bytes once its links are \
             resolved"
        ),
        E::NeedsRecovery { .. } => "open the journal once with a program or a writing command, \
                                    as its owner, which recovers it; then run this again"
            .to_owned(),
        E::ChangedWhileReading { .. } => {
            "a writer kept opening and closing the journal; run this again".to_owned()
        }
        E::CannotOpen { .. } => {
            "check that this user may read the file and enter every directory above it".to_owned()
        }
        E::Conflict { .. } => "another session's write conflicted with this one, which was \
                               rolled back: run this again"
            .to_owned(),
        E::InstanceLost { .. } => CONNECTION_LOST_HINT.to_owned(),
        E::Storage(error) if crate::error_code::connection_lost(error) => {
            CONNECTION_LOST_HINT.to_owned()
        }
        E::CommitUnknown { .. } => "the change may or may not have been written: see what the \
                                    journal holds now (`durably ls`, `durably show ID`), and run \
                                    this again only if it was not"
            .to_owned(),
        E::BackendNotCompiled { .. } => BACKEND_NOT_COMPILED_HINT.to_owned(),
        _ => return None,
    })
}

/// What to do when the connection to PostgreSQL closed under a command.
const CONNECTION_LOST_HINT: &str = "check that the PostgreSQL server is up, see what the journal \
                                    holds now (`durably ls`, `durably show ID`), and run this \
                                    again";

/// What to do when `--db` names a PostgreSQL database and this build has no PostgreSQL.
pub const BACKEND_NOT_COMPILED_HINT: &str = "this `durably` was built without PostgreSQL support: \
                                             install it with `cargo install durably-cli \
                                             --features postgres`, or build it with `--features \
                                             postgres`";

fn unsafe_file_hint(reason: UnsafeFileReason) -> Option<String> {
    Some(
        match reason {
            UnsafeFileReason::EmptyNotPrivate => {
                "find out who made the empty file; remove it (or, if it is yours, `chmod 600` \
                 it) and run this again"
            }
            UnsafeFileReason::ForeignOwner => {
                "find out who made the file; with no durably process running, remove it and run \
                 this again"
            }
            UnsafeFileReason::NotRegular => {
                "remove or rename it: a journal's files are regular files"
            }
            _ => return None,
        }
        .to_owned(),
    )
}

fn liveness_dir_hint(path: &str, reason: &Refusal) -> Option<String> {
    Some(match reason {
        Refusal::Symlink => format!("remove the link {path}: durably makes the directory itself"),
        Refusal::Owner { .. } => {
            format!("find out who made {path}; remove it, or `chown` it to the journal's owner")
        }
        Refusal::Writable { .. } => format!("`chmod go-w {path}`, or remove it"),
        Refusal::ForeignJournal { .. } => "run this as the journal's owner, or as root".to_owned(),
        _ => return None,
    })
}

/// `Result` with [`CliError`].
pub type Result<T, E = CliError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    //! What these prove: the layers hold. Every library error an operator can meet gets a hint
    //! from this tool, a code of its own with exit code 1, and the library's own message
    //! unchanged, and no library message names a `durably` command: only the hint does.
    use std::path::PathBuf;

    use durably::lock::{Error as LockError, Refusal};
    use durably::{Error, UnsafeFileReason};
    use uuid::Uuid;

    use super::{CliError, EXIT_FAILURE};
    use crate::error_code::ErrorCode;

    fn errors() -> Vec<Error> {
        let (path, id) = (PathBuf::from("/srv/app.db"), Uuid::nil());
        let text = |words: &str| words.to_owned();
        let unsafe_file = |reason| Error::UnsafeFile {
            path: path.clone(),
            owner: 1000,
            mode: 0o644,
            reason,
        };
        let refused = |reason| {
            Error::Lock(LockError::LivenessDirRefused {
                path: path.with_extension("db.durably-live"),
                reason,
            })
        };
        vec![
            Error::Locked {
                execution_id: id,
                pid: 7,
                since: text("then"),
                in_this_process: false,
            },
            Error::LeaseExpiredHolderAlive {
                execution_id: id,
                seq: 2,
                pid: 7,
                heartbeat_at: text("then"),
                evidence: text("pid 7 runs"),
            },
            Error::Ambiguous {
                execution_id: id,
                seq: 2,
                name: text("charge"),
                reason: durably::AmbiguityReason::PolicyFail,
            },
            Error::AwaitingOperator {
                execution_id: id,
                seq: 2,
            },
            Error::StaleSeenIntent {
                execution_id: id,
                seq: 2,
                seen: "a1-r0".parse().unwrap(),
                now: Some("a2-r0".parse().unwrap()),
            },
            Error::Busy {
                busy_timeout_ms: 5_000,
            },
            Error::ReadOnly {
                path: path.clone(),
                reason: text("EROFS"),
            },
            Error::SchemaTooNew {
                path: path.clone(),
                found: 9,
                supported: 5,
            },
            Error::SchemaTooOld {
                path: path.clone(),
                found: 2,
                oldest: 4,
            },
            Error::ExtensionSchemaTooNew {
                path: path.clone(),
                owner: "runtime",
                found: 2,
                supported: 1,
            },
            Error::ForeignDatabase {
                path: path.clone(),
                reason: text("its id"),
            },
            Error::Corrupt {
                path: path.clone(),
                reason: text("malformed"),
            },
            Error::NotAJournal {
                path: path.clone(),
                reason: text("empty"),
            },
            Error::NotFound(id),
            Error::Cancelled(id),
            Error::PayloadTooLarge {
                what: text("the result"),
                bytes: 9,
                max: 8,
            },
            unsafe_file(UnsafeFileReason::EmptyNotPrivate),
            unsafe_file(UnsafeFileReason::ForeignOwner),
            unsafe_file(UnsafeFileReason::NotRegular),
            Error::DanglingSymlink {
                path: path.clone(),
                target: path.with_extension("gone"),
            },
            refused(Refusal::Symlink),
            refused(Refusal::Owner {
                owner: 1,
                euid: 0,
                journal_owner: Some(2),
            }),
            refused(Refusal::Writable { mode: 0o777 }),
            refused(Refusal::ForeignJournal {
                journal_owner: 2,
                euid: 1,
            }),
            Error::ReadTimeout {
                path: path.clone(),
                timeout_ms: 30_000,
            },
            Error::PathTooLong {
                path: path.clone(),
                bytes: 600,
                max: 504,
            },
            Error::NeedsRecovery {
                path: path.clone(),
                reason: text("no index"),
            },
            Error::ChangedWhileReading {
                path: path.clone(),
                attempts: 3,
            },
            Error::CannotOpen {
                path,
                reason: text("unable to open"),
            },
            Error::Conflict {
                reason: text("deadlock detected"),
            },
            Error::InstanceLost { instance: id },
            Error::CommitUnknown {
                reason: text("connection closed"),
            },
            Error::BackendNotCompiled {
                backend: "PostgreSQL",
                feature: "postgres",
            },
        ]
    }

    /// The PostgreSQL backend's own errors: a conflict is retried like a busy journal, a lost
    /// session or connection says nothing more was written, an unknown commit says to look
    /// before doing it again, and a build without PostgreSQL says how to get one.
    #[test]
    fn the_postgres_errors_have_codes_that_say_whether_to_retry() {
        let id = Uuid::nil();
        let cases = [
            (
                Error::Conflict {
                    reason: "deadlock detected".to_owned(),
                },
                ErrorCode::Busy,
                "run this again",
            ),
            (
                Error::InstanceLost { instance: id },
                ErrorCode::ConnectionLost,
                "check that the PostgreSQL server is up",
            ),
            (
                Error::CommitUnknown {
                    reason: "connection closed".to_owned(),
                },
                ErrorCode::CommitUnknown,
                "may or may not have been written",
            ),
            (
                Error::BackendNotCompiled {
                    backend: "PostgreSQL",
                    feature: "postgres",
                },
                ErrorCode::BackendNotCompiled,
                "cargo install durably-cli --features postgres",
            ),
        ];
        for (error, code, advice) in cases {
            let shown = CliError::from(error);
            assert_eq!(shown.code, code, "{}", shown.message);
            let hint = shown.hint.unwrap_or_default();
            assert!(hint.contains(advice), "{hint}");
        }
    }

    #[test]
    fn every_error_an_operator_meets_gets_a_hint_and_keeps_its_message() {
        for error in errors() {
            let message = error.to_string();
            assert!(
                !message.contains("`durably "),
                "the library gave advice: {message}"
            );
            let shown = CliError::from(error);
            assert_eq!(shown.message, message);
            assert_eq!(shown.code.exit_code(), EXIT_FAILURE);
            assert_ne!(
                shown.code,
                ErrorCode::Failed,
                "no code of its own: {message}"
            );
            assert!(shown.hint.is_some(), "no hint for: {message}");
        }
    }
}
