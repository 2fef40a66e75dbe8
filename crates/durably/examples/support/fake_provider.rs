//! A fake outside service for the examples (a model API, a payment provider, a mailer): it
//! records every request it serves in a ledger file next to the journal, one line per request
//! (`KEY<TAB>ANSWER`), and can be asked what it answered for an idempotency key, as real
//! providers that take idempotency keys can. The examples' tests read the same files to check
//! that each effect happened once.
//!
//! The ledger outlives a killed caller, as a real provider's records would: each line reaches
//! the kernel in one `write` before `serve` returns, and a SIGKILL of the caller does not undo
//! that (a power cut could; a real provider keeps its own records durable).

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use durably::{IdempotencyKey, Policy, StepError};

/// One fake provider: its ledger file.
#[derive(Debug, Clone)]
pub struct FakeProvider {
    ledger: PathBuf,
}

impl FakeProvider {
    /// The provider `name` of the journal at `db`; its ledger is the file `DB.NAME.ledger`, or,
    /// for a journal in PostgreSQL (`db` is a URL, which names no directory), `NAME.ledger` in
    /// the current directory.
    pub fn next_to(db: &Path, name: &str) -> Self {
        let ledger = match durably::db::Target::from(db).sqlite_path() {
            Some(path) => {
                let mut ledger = path.as_os_str().to_owned();
                ledger.push(format!(".{name}.ledger"));
                PathBuf::from(ledger)
            }
            None => PathBuf::from(format!("{name}.ledger")),
        };
        Self { ledger }
    }

    /// Serves one request made with `key`: records it with `answer` and returns the answer.
    /// Every call is a new request, as on a provider that does not deduplicate: the ledger
    /// counts them. A failed write means the request was not served, which a retry may fix.
    ///
    /// # Errors
    /// A retryable [`StepError`] when the ledger cannot be written, or a fatal one for an
    /// answer with a tab or a line break (the ledger's separators).
    pub fn serve(&self, key: IdempotencyKey, answer: &str) -> Result<String, StepError> {
        if answer.contains(['\t', '\n', '\r']) {
            return Err(StepError::fatal(
                "a fake provider's answer holds a tab or a line break",
            ));
        }
        let line = format!("{key}\t{answer}\n");
        let written = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.ledger)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        written.map_err(|error| self.step_error(&error))?;
        Ok(answer.to_owned())
    }

    /// What the provider answered for `key`, if it served a request with it: what a reconcile
    /// probe, or an operator, asks after a crash.
    ///
    /// # Errors
    /// A retryable [`StepError`] when the ledger exists but cannot be read.
    pub fn find(&self, key: IdempotencyKey) -> Result<Option<String>, StepError> {
        let key = key.to_string();
        let lines = self.lines().map_err(|error| self.step_error(&error))?;
        Ok(lines
            .into_iter()
            .find(|(served, _)| *served == key)
            .map(|(_, answer)| answer))
    }

    /// The [`Policy::reconcile`] of a guarded step that calls this provider: after a crash in
    /// the step's window, the journal asks the provider whether it served the step's key. Its
    /// answer becomes the step's result without a second request; no answer means the
    /// request never arrived, and the step runs (with the same key).
    #[allow(
        dead_code,
        reason = "the operator example resolves its step by hand instead"
    )]
    pub fn reconcile(&self) -> Policy {
        let provider = self.clone();
        Policy::reconcile(move |key| {
            let found = provider.find(key);
            async move { Ok(found?.map(serde_json::Value::String)) }
        })
    }

    /// How many requests it served with `key`.
    ///
    /// # Errors
    /// When the ledger exists but cannot be read.
    pub fn served(&self, key: IdempotencyKey) -> io::Result<usize> {
        let key = key.to_string();
        Ok(self
            .lines()?
            .iter()
            .filter(|(served, _)| *served == key)
            .count())
    }

    /// The ledger's lines as (key, answer); none before the first request.
    fn lines(&self) -> io::Result<Vec<(String, String)>> {
        let text = match std::fs::read_to_string(&self.ledger) {
            Ok(text) => text,
            Err(error) if error.kind() == io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error),
        };
        Ok(text
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .map(|(key, answer)| (key.to_owned(), answer.to_owned()))
            .collect())
    }

    fn step_error(&self, error: &io::Error) -> StepError {
        StepError::retryable(format!("ledger {}: {error}", self.ledger.display()))
    }
}
