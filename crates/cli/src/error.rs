//! The tool's one error type and its exit codes.

use std::fmt;
use std::process::ExitCode;

/// Exit code of a command that failed: the database, the journal or the world said no.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a command line that cannot be run as written (clap uses it too).
pub const EXIT_USAGE: u8 = 2;

/// A failed command: a message for people that says what to do, and the exit code.
#[derive(Debug)]
pub struct CliError {
    /// What went wrong and what to do about it.
    pub message: String,
    /// [`EXIT_FAILURE`] or [`EXIT_USAGE`].
    pub code: u8,
}

impl CliError {
    /// A failure (exit code 1).
    pub fn failure(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: EXIT_FAILURE,
        }
    }

    /// A usage error (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: EXIT_USAGE,
        }
    }

    /// The process exit code.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<durably::Error> for CliError {
    fn from(error: durably::Error) -> Self {
        Self::failure(error.to_string())
    }
}

impl From<durably::scheduler::Error> for CliError {
    /// The scheduler's message says what was wrong; for the input a command line gives (a job
    /// id, a slot) this adds what to pass instead.
    fn from(error: durably::scheduler::Error) -> Self {
        use durably::scheduler::Error;
        let advice = match &error {
            Error::InvalidJobId { .. } => "; pass the job id as the program registers it",
            Error::SlotOutOfRange { .. } => "; pass a slot from year 1970 to 9999",
            _ => "",
        };
        Self::usage(format!("{error}{advice}"))
    }
}

/// `Result` with [`CliError`].
pub type Result<T, E = CliError> = std::result::Result<T, E>;
