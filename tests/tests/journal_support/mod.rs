//! Shared helpers for the `journal_*` integration tests and `faults.rs`: the `journal_worker`
//! helper process, run with bounded waits, the independent ledger its closures append to, and
//! an integrity check.

// Each test file uses a different subset of these helpers, and like the tests themselves they
// fail the test by panicking.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long any single wait for a child may take before the test fails.
pub const WAIT_MAX: Duration = Duration::from_secs(20);

pub fn worker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_journal_worker"))
}

/// A scratch directory with a database path and a ledger path in it.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    pub database: PathBuf,
    pub ledger: PathBuf,
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("journal.db");
        let ledger = dir.path().join("ledger.txt");
        Self {
            dir,
            database,
            ledger,
        }
    }

    /// The ledger lines of closure `step` for execution `id`: one per call, each `<step> <id>
    /// <key>`.
    pub fn ledger_lines(&self, step: &str, id: &str) -> Vec<String> {
        let text = match std::fs::read_to_string(&self.ledger) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => panic!("cannot read the ledger: {error}"),
        };
        text.lines()
            .filter(|line| line.starts_with(&format!("{step} {id} ")))
            .map(str::to_owned)
            .collect()
    }
}

/// A finished run of the worker: how it ended and the JSON lines it printed.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub lines: Vec<Value>,
    pub stderr: String,
}

impl Run {
    /// The last line printed, which is the command's answer.
    pub fn answer(&self) -> &Value {
        assert!(self.status.success(), "the worker failed: {self:?}");
        self.lines
            .last()
            .unwrap_or_else(|| panic!("the worker printed nothing: {self:?}"))
    }

    /// Whether the process died of SIGABRT, as a crashing failpoint makes it.
    pub fn aborted(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal() == Some(libc::SIGABRT)
    }
}

/// Waits for `child` to exit, at most `WAIT_MAX`, and collects its output.
pub fn finish(mut child: Child) -> Run {
    let deadline = Instant::now() + WAIT_MAX;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the worker did not exit within {WAIT_MAX:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    Run {
        status,
        lines: stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
            .collect(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs the worker to completion with `args` and extra environment.
pub fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = worker();
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    finish(command.spawn().unwrap())
}

/// A worker that keeps running until its stdin closes, with its stdout read line by line.
pub struct Held {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Held {
    pub fn spawn(args: &[&str]) -> Self {
        let mut child = worker()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
        }
    }

    /// The next line the worker prints, waiting at most `WAIT_MAX`.
    pub fn next_line(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(WAIT_MAX)
            .unwrap_or_else(|error| panic!("the worker printed nothing: {error}"));
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"))
    }

    pub fn pid(&self) -> i64 {
        i64::from(self.child.id())
    }

    /// SIGKILL, then reap it so it is not a zombie.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Closes stdin and waits for a clean exit, returning the last line.
    pub fn close(mut self) -> Value {
        drop(self.stdin.take());
        let deadline = Instant::now() + WAIT_MAX;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the worker failed: {status:?}");
                break;
            }
            assert!(Instant::now() < deadline, "the worker did not exit");
            std::thread::sleep(Duration::from_millis(2));
        }
        self.next_line()
    }
}

/// `PRAGMA integrity_check` on a fresh read-only connection.
pub fn integrity(path: &Path) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap()
}
