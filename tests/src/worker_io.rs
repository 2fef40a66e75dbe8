//! What the helper binaries share: one JSON line per answer on stdout, a ledger of effects
//! appended one line per `write`, and waiting for the test's go-ahead on stdin.

use std::io::{BufRead, Write};
use std::path::Path;

use durably_journal::StepError;
use serde_json::Value;

/// Prints `value` as one line on stdout, flushed at once (the test reads it while this process
/// runs).
///
/// # Errors
/// Stdout is closed.
pub fn say(value: &Value) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{value}")?;
    out.flush()
}

/// Appends one line to the ledger in a single `write` on an `O_APPEND` file, so lines from
/// successive or concurrent processes never interleave, and a crash right after it keeps it.
///
/// # Errors
/// The ledger cannot be opened or written, as a fatal step error.
pub fn append(ledger: &Path, line: &str) -> Result<(), StepError> {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(ledger)
        .map_err(|error| StepError::fatal(format!("cannot open the ledger: {error}")))?;
    file.write_all(format!("{line}\n").as_bytes())
        .and_then(|()| file.flush())
        .map_err(|error| StepError::fatal(format!("cannot append to the ledger: {error}")))
}

/// Waits for a line on stdin, on a blocking thread (the runtime's other tasks go on).
///
/// # Errors
/// Stdin cannot be read, as a fatal step error.
pub async fn wait_for_a_line() -> Result<(), StepError> {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(drop)
    })
    .await
    .map_err(|error| StepError::fatal(error.to_string()))?
    .map_err(|error| StepError::fatal(error.to_string()))
}
