//! `durably send ID TOPIC JSON [--key K]`: a message to an execution, kept until a `recv` of
//! the topic in it consumes it. Every refusal writes nothing.

use durably::runtime::{Error, SendOutcome};
use serde::Serialize;

use crate::cli::SendArgs;
use crate::db::Target;
use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;
use crate::escape::escape;
use crate::output::{print, print_json};
use crate::runtime_errors::not_the_runtimes;

/// `send --json`. Stable fields.
#[derive(Debug, Serialize)]
struct Sent {
    execution_id: String,
    topic: String,
    message_id: i64,
    /// `sent`, or `already_sent` when the key was used before with the same message.
    outcome: &'static str,
}

/// Sends the message.
pub fn run(target: &Target, args: &SendArgs, json: bool) -> Result<()> {
    let runtime = crate::db::runtime()?;
    let id = args.id;
    let client = target.client(&runtime, |journal| {
        not_the_runtimes(journal, id, Error::ReceiverNotFound { execution_id: id })
    })?;
    let outcome =
        runtime.block_on(client.send(id, &args.topic, &args.message, args.key.as_deref()))?;
    let (word, message_id) = match outcome {
        SendOutcome::Sent { message_id } => ("sent", message_id),
        SendOutcome::AlreadySent { message_id } => ("already_sent", message_id),
        _ => {
            return Err(CliError::new(
                ErrorCode::Internal,
                format!(
                    "the message to {id} was handled as {outcome:?}, which this tool does not know"
                ),
            )
            .hint("use the `durably` of the same release as the library"));
        }
    };
    if json {
        return print_json(&Sent {
            execution_id: id.to_string(),
            topic: escape(&args.topic),
            message_id,
            outcome: word,
        });
    }
    print(&match outcome {
        SendOutcome::AlreadySent { .. } => format!("already sent (message {message_id})\n"),
        _ => format!("sent message {message_id}\n"),
    })
}
