//! Helpers for the `journal_*` tests and `faults.rs`: the `journal_worker` helper process, run
//! with bounded waits, and the independent ledger its closures append to.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

use serde_json::Value;

use super::{Driven, Scratch, read_lines, wait_exit};

pub fn worker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_journal_worker"))
}

/// The worker, run as `nobody`; this process must be root. The build directory may sit below a
/// folder only root can enter (a fresh clone in a private temporary directory), so `nobody`
/// runs a copy of the worker kept in `dir`; spawn it with [`super::spawn`].
pub fn worker_as_nobody(dir: &Path) -> Command {
    let copy = dir.join("journal_worker");
    std::fs::copy(env!("CARGO_BIN_EXE_journal_worker"), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut command = Command::new(copy);
    // std drops root's supplementary groups when it switches the uid.
    command.uid(super::NOBODY).gid(super::NOBODY);
    command
}

impl Scratch {
    /// The ledger lines of closure `step` for execution `id`: one per call, each `<step> <id>
    /// <key>`.
    pub fn ledger_lines(&self, step: &str, id: &str) -> Vec<String> {
        let prefix = format!("{step} {id} ");
        read_lines(&self.ledger)
            .into_iter()
            .filter(|line| line.starts_with(&prefix))
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

/// Waits for `child` to exit, at most [`super::WAIT_MAX`], and collects its output.
pub fn finish(mut child: Child) -> Run {
    let status = wait_exit(&mut child, "the worker");
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    Run {
        status,
        lines: stdout.lines().map(json).collect(),
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

/// A worker that keeps running until its stdin closes, answering with JSON lines.
pub struct Held(Driven);

impl Held {
    pub fn spawn(args: &[&str]) -> Self {
        Self::start(worker().args(args))
    }

    /// Starts `command`, a worker with its arguments.
    pub fn start(command: &mut Command) -> Self {
        Self(Driven::start(command))
    }

    /// The next line the worker prints, waiting at most [`super::WAIT_MAX`].
    pub fn next_line(&mut self) -> Value {
        json(&self.0.line())
    }

    pub fn pid(&self) -> i64 {
        i64::from(self.0.pid())
    }

    /// Writes `line` to the worker's stdin.
    pub fn send(&mut self, line: &str) {
        self.0.send(line);
    }

    /// SIGKILL, then reap it so it is not a zombie.
    pub fn kill(mut self) {
        self.0.kill();
    }

    /// Closes stdin and waits for a clean exit, returning the last line.
    pub fn close(mut self) -> Value {
        self.0.close();
        self.next_line()
    }
}

fn json(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}"))
}
