//! Shared helpers of the `scheduler_*` tests: `scheduler_worker` children, the effect ledger
//! they append to, and bounded polling.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long any wait for a child or a condition may take before the test fails.
pub const WAIT_MAX: Duration = Duration::from_secs(20);

/// One line of the effect ledger: a body call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub slot_ms: i64,
    pub key: String,
    pub pid: u32,
}

pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn database(&self) -> PathBuf {
        self.dir.path().join("journal.db")
    }

    pub fn ledger(&self) -> PathBuf {
        self.dir.path().join("effects.log")
    }

    /// Starts a worker; closing its stdin (dropping the handle) asks it to shut down.
    pub fn worker(&self, every_ms: u64, policy: &str, block_first: bool, overlap: &str) -> Child {
        Command::new(env!("CARGO_BIN_EXE_scheduler_worker"))
            .arg(self.database())
            .arg(self.ledger())
            .arg(every_ms.to_string())
            .arg(policy)
            .arg(if block_first { "1" } else { "0" })
            .arg(overlap)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Every line of the effect ledger so far.
    pub fn effects(&self) -> Vec<Effect> {
        read_lines(&self.ledger())
            .iter()
            .map(|line| {
                let words: Vec<&str> = line.split(' ').collect();
                assert_eq!(words.len(), 4, "torn ledger line {line:?}");
                Effect {
                    slot_ms: words[1].parse().unwrap(),
                    key: words[2].to_owned(),
                    pid: words[3].parse().unwrap(),
                }
            })
            .collect()
    }

    /// The effects grouped by slot.
    pub fn effects_by_slot(&self) -> BTreeMap<i64, Vec<Effect>> {
        let mut by_slot: BTreeMap<i64, Vec<Effect>> = BTreeMap::new();
        for effect in self.effects() {
            by_slot.entry(effect.slot_ms).or_default().push(effect);
        }
        by_slot
    }

    /// The slots a worker blocked in.
    pub fn blocked(&self) -> Vec<i64> {
        let path = PathBuf::from(format!("{}.blocked", self.ledger().display()));
        read_lines(&path)
            .iter()
            .map(|line| line.parse().unwrap())
            .collect()
    }

    pub fn query<T: rusqlite::types::FromSql>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> T {
        let conn = rusqlite::Connection::open(self.database()).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.query_row(sql, params, |row| row.get(0)).unwrap()
    }
}

fn read_lines(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => panic!("cannot read {}: {error}", path.display()),
    }
}

/// Polls `condition` every 10 ms until it holds; fails the test after [`WAIT_MAX`].
pub fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Closes the worker's stdin and waits (bounded) for it to exit successfully.
pub fn stop(mut child: Child) {
    drop(child.stdin.take());
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "worker exited with {status}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("worker did not shut down");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILLs the worker and reaps it.
pub fn kill(mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}
