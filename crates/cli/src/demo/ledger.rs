//! The demo's effect ledger: the "outside world" of the demo. Every effect (an order fetched, a
//! card charged, an email sent, a scheduled tick) appends one line here, with its idempotency
//! key, from the process that performed it. durably never writes this file, so counting its
//! lines is an independent check of what really ran.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::failed;
use crate::error::{CliError, Result};

/// One effect that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// What happened: `fetch`, `charge`, `email`, `tick`.
    pub effect: String,
    /// The idempotency key (or fire id) it happened under.
    pub key: String,
    /// The execution that did it.
    pub execution_id: String,
    /// The process that did it.
    pub pid: u32,
}

/// The ledger file.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
}

impl Ledger {
    /// The ledger at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one effect and syncs it, so a SIGKILL right after cannot lose it. One short
    /// `write` with `O_APPEND`, so lines of concurrent processes never interleave.
    ///
    /// # Errors
    /// The file cannot be opened, written or synced.
    pub fn append(&self, effect: &str, key: &str, execution_id: &str) -> Result<()> {
        let line = format!("{effect}\t{key}\t{execution_id}\t{}\n", std::process::id());
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|error| self.io_error("open", &error))?;
        file.write_all(line.as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|error| self.io_error("append to", &error))
    }

    /// Every effect so far, in order. A missing file is an empty ledger.
    ///
    /// # Errors
    /// The file exists but cannot be read.
    pub fn entries(&self) -> Result<Vec<Entry>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(self.io_error("read", &error)),
        };
        Ok(text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('\t');
                Some(Entry {
                    effect: fields.next()?.to_owned(),
                    key: fields.next()?.to_owned(),
                    execution_id: fields.next()?.to_owned(),
                    pid: fields.next()?.parse().ok()?,
                })
            })
            .collect())
    }

    /// The effects of one kind done under one key.
    ///
    /// # Errors
    /// As [`Ledger::entries`].
    pub fn find(&self, effect: &str, key: &str) -> Result<Vec<Entry>> {
        Ok(self
            .entries()?
            .into_iter()
            .filter(|entry| entry.effect == effect && entry.key == key)
            .collect())
    }

    fn io_error(&self, action: &str, error: &std::io::Error) -> CliError {
        failed(format!(
            "cannot {action} the demo's effect ledger {}: {error}",
            self.path.display()
        ))
    }
}
