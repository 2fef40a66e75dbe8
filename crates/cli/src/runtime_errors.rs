//! The runtime's errors as this tool reports them: the runtime's message, its code (see
//! [`crate::error_code`]; exit code 2 for a name or option the command line gave wrong, 1 for
//! everything else, §9 of the runtime plan), and what to do about it. The journal's own errors keep the hints of
//! [`crate::error`].

use durably::runtime::{Error, ForkRefusal};
use durably::{Journal, Status};
use uuid::Uuid;

use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::error_fields;

/// The refusal of a command on execution `id` in a journal no runtime has used (see
/// [`crate::db::Target::client`]): `unknown` when no execution has this id, and otherwise
/// [`Error::NotRuntimeExecution`], as the runtime itself would answer.
///
/// # Errors
/// A storage error.
pub fn not_the_runtimes(journal: &Journal, id: Uuid, unknown: Error) -> Result<CliError> {
    let hand_driven = Error::NotRuntimeExecution { execution_id: id };
    refused_without_runtime(journal, id, unknown, hand_driven)
}

/// As [`not_the_runtimes`], with `hand_driven` as the refusal of an execution that exists.
///
/// # Errors
/// A storage error.
pub fn refused_without_runtime(
    journal: &Journal,
    id: Uuid,
    unknown: Error,
    hand_driven: Error,
) -> Result<CliError> {
    let known = journal.read(|conn| durably::sqlite::execution_status(conn, id))?;
    Ok(match known {
        None => unknown,
        Some(_) => hand_driven,
    }
    .into())
}

impl From<Error> for CliError {
    fn from(error: Error) -> Self {
        if let Error::Journal(journal) = error {
            return journal.into();
        }
        Self {
            hint: hint(&error),
            fields: error_fields::of_runtime(&error),
            ..Self::new(ErrorCode::of_runtime(&error), error.to_string())
        }
    }
}

/// What the operator can do about a runtime error; `None` where the message says all there is.
fn hint(error: &Error) -> Option<String> {
    Some(match error {
        Error::InvalidName { .. } => "names are 1 to 256 bytes (kinds and queues 1 to 128) \
                                      with no control characters"
            .to_owned(),
        Error::InvalidOption(_) => "give a deadline in the future (`--deadline 2h`)".to_owned(),
        Error::UnknownKind { kind } => format!(
            "a program must register {kind:?} with a durably runtime and start it on this \
             journal once before executions of it can be started; check the spelling (`durably \
             ls` shows the kinds started so far)"
        ),
        Error::UnknownQueue { queue } => format!(
            "a program's runtime must configure the queue {queue:?} on this journal first; \
             check the spelling, or leave --queue out"
        ),
        Error::IdConflict { .. } => "leave --id out to start a new execution".to_owned(),
        Error::Duplicate { existing, .. } => format!(
            "`durably show {existing}` shows the execution that holds the key; pass \
             --dedup-return to get it instead of this error"
        ),
        Error::PayloadTooLarge { max, .. } => {
            format!("give a value of at most {max} bytes of JSON")
        }
        Error::NotFound(_) | Error::ReceiverNotFound { .. } => {
            "check the id: `durably ls` lists the executions of this journal".to_owned()
        }
        Error::ReceiverFinished { execution_id, .. } => format!(
            "nothing in it will receive the message; `durably show {execution_id}` shows how \
             it ended"
        ),
        Error::NotRuntimeExecution { .. } => "only executions started through the runtime \
                                              (`durably start`, or a program's runtime) receive \
                                              messages and can be resumed"
            .to_owned(),
        Error::IdempotencyKeyReused { message_id, .. } => format!(
            "message {message_id} was sent with this key: send another payload under a new \
             key, or this one again to be told it was sent"
        ),
        Error::NotResumable {
            execution_id,
            status,
        } => not_resumable_hint(*execution_id, *status),
        Error::Watcher(_) => "the system may be out of threads; run this again".to_owned(),
        Error::ForkRefused {
            execution_id,
            refusal,
        } => fork_refused_hint(*execution_id, refusal),
        _ => return None,
    })
}

/// What to do about a refused fork of execution `id`.
fn fork_refused_hint(id: Uuid, refusal: &ForkRefusal) -> String {
    match refusal {
        ForkRefusal::Unfinished { .. } => format!(
            "a process may still run it: wait for it to end, or `durably cancel {id}` it \
             first, then fork it"
        ),
        ForkRefusal::SeqPastEnd { recorded, .. } => format!(
            "give --from-seq {recorded} or less: `durably show {id}` lists its recorded steps"
        ),
        ForkRefusal::Ambiguous { seq, .. } => format!(
            "its effect may or may not have happened: give --from-seq {seq} or less to run the \
             step again in the fork, or `durably resolve` it first if it is still awaiting an \
             operator"
        ),
        ForkRefusal::HandDriven => "only executions started through the runtime (`durably \
                                    start`, or a program's runtime) can be forked"
            .to_owned(),
        ForkRefusal::ChildRunning { seq, child_id, .. } => format!(
            "wait for child {child_id} to end (`durably show {child_id}`), or give --from-seq \
             {seq} or less so that the fork starts a child of its own"
        ),
        ForkRefusal::UnknownVersion { kind, .. } => format!(
            "leave --version out to keep the original's, or give a version of {kind:?} that a \
             program has registered on this journal"
        ),
        _ => format!("`durably show {id}` shows where it is"),
    }
}

/// What to do instead of resuming an execution in `status`.
fn not_resumable_hint(id: Uuid, status: Status) -> String {
    match status {
        Status::AwaitingOperator => format!(
            "a step waits for an operator's answer: `durably show {id}` prints it and its \
             token, then `durably resolve` it"
        ),
        Status::Queued | Status::Waiting | Status::Running | Status::Interrupted => format!(
            "it is not stuck: a runtime serving its kind runs it (`durably show {id}` shows \
             where it is)"
        ),
        Status::Completed | Status::Failed | Status::Stuck | Status::Cancelled => format!(
            "`durably show {id}` shows how it ended; start a new execution to run the work \
             again"
        ),
    }
}

#[cfg(test)]
mod tests {
    //! What these prove: the runtime's refusals of what a command line gives keep the
    //! runtime's message, get a code of their own with exit code 2 for a bad name or option and
    //! 1 for the rest, and a hint naming what to do; no runtime message names a `durably`
    //! command itself.
    use durably::Status;
    use durably::runtime::{Error, ForkRefusal};
    use uuid::Uuid;

    use crate::error::{CliError, EXIT_FAILURE, EXIT_USAGE};
    use crate::error_code::ErrorCode;

    fn errors() -> Vec<(Error, u8)> {
        let id = Uuid::nil();
        let text = |words: &str| words.to_owned();
        vec![
            (
                Error::InvalidName {
                    what: "topic",
                    name: text("a\u{1b}"),
                    reason: text("control character"),
                },
                EXIT_USAGE,
            ),
            (Error::InvalidOption(text("past")), EXIT_USAGE),
            (Error::UnknownKind { kind: text("k") }, EXIT_FAILURE),
            (Error::UnknownQueue { queue: text("q") }, EXIT_FAILURE),
            (
                Error::IdConflict {
                    execution_id: id,
                    existing_kind: text("a"),
                    kind: text("b"),
                },
                EXIT_FAILURE,
            ),
            (
                Error::Duplicate {
                    queue: text("q"),
                    key: text("k"),
                    existing: id,
                },
                EXIT_FAILURE,
            ),
            (
                Error::PayloadTooLarge {
                    what: text("the input"),
                    bytes: 9,
                    max: 8,
                },
                EXIT_FAILURE,
            ),
            (Error::NotFound(id), EXIT_FAILURE),
            (Error::ReceiverNotFound { execution_id: id }, EXIT_FAILURE),
            (
                Error::ReceiverFinished {
                    execution_id: id,
                    status: Status::Completed,
                },
                EXIT_FAILURE,
            ),
            (
                Error::NotRuntimeExecution { execution_id: id },
                EXIT_FAILURE,
            ),
            (
                Error::IdempotencyKeyReused {
                    execution_id: id,
                    key: text("k"),
                    message_id: 1,
                },
                EXIT_FAILURE,
            ),
            (
                Error::NotResumable {
                    execution_id: id,
                    status: Status::AwaitingOperator,
                },
                EXIT_FAILURE,
            ),
            (
                Error::NotResumable {
                    execution_id: id,
                    status: Status::Running,
                },
                EXIT_FAILURE,
            ),
            (
                Error::ForkRefused {
                    execution_id: id,
                    refusal: ForkRefusal::SeqPastEnd {
                        from_seq: 9,
                        recorded: 3,
                    },
                },
                EXIT_FAILURE,
            ),
            (
                Error::ForkRefused {
                    execution_id: id,
                    refusal: ForkRefusal::Unfinished {
                        status: Status::Running,
                    },
                },
                EXIT_FAILURE,
            ),
        ]
    }

    #[test]
    fn refusals_keep_their_message_and_get_a_hint_and_their_exit_code() {
        for (error, code) in errors() {
            let message = error.to_string();
            assert!(
                !message.contains("`durably "),
                "the runtime gave advice: {message}"
            );
            let shown = CliError::from(error);
            assert_eq!(shown.message, message);
            assert_eq!(shown.code.exit_code(), code, "{message}");
            assert_ne!(
                shown.code,
                ErrorCode::Failed,
                "no code of its own: {message}"
            );
            assert!(shown.hint.is_some(), "no hint for: {message}");
        }
    }
}
