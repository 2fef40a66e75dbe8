//! The runtime scenarios' child processes: this binary run again with a hidden worker
//! subcommand on a journal file, reporting on stdout in `key=value` words.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::context::Context;
use crate::error::{BenchError, Result};

/// Starts this binary with `subcommand` on the journal at `db`, with this run's durability,
/// `extra` arguments after it, and its stdout piped to the harness.
pub fn spawn(context: &Context, subcommand: &str, db: &Path, extra: &[String]) -> Result<Child> {
    let program = std::env::current_exe()
        .map_err(|source| BenchError::io("find the benchmark binary", "current_exe", source))?;
    Command::new(&program)
        .args([
            "--durability",
            context.durability.as_str(),
            subcommand,
            "--db",
        ])
        .arg(db)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| BenchError::io("start a worker", &program, source))
}

/// Waits for `child` to exit and returns what it printed; an error if it failed.
pub async fn finish(child: Child) -> Result<String> {
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await?
        .map_err(|source| BenchError::io("wait for a worker", "the worker", source))?;
    if !output.status.success() {
        return Err(BenchError::Worker(format!("exited with {}", output.status)));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The number after `key=` among the words of `printed`.
pub fn field(printed: &str, key: &str) -> Result<u64> {
    printed
        .split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
        .and_then(|value| value.parse().ok())
        .ok_or_else(|| BenchError::Worker(format!("no {key}= in {printed:.200}")))
}
