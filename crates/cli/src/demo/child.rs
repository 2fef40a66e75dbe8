//! Spawning the demo's child processes and relaying what they say.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};

use uuid::Uuid;

use super::failed;
use super::scenario::{CrashPoint, Scenario};
use crate::error::Result;

/// The most lines read from one child: a runaway child cannot make the demo loop forever.
const CHILD_LINES_MAX: usize = 200;

/// A running worker, reading its narration.
pub struct Worker {
    child: Child,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

/// How a worker stopped talking.
pub enum Stop {
    /// It reached its crash point and is blocked there, inside a guarded step.
    Ready,
    /// It exited.
    Exited(ExitStatus),
}

impl Worker {
    /// Starts `durably demo-worker` for one execution.
    ///
    /// # Errors
    /// The binary cannot be found or started.
    pub fn spawn(
        db: &Path,
        ledger: &Path,
        scenario: Scenario,
        execution: Uuid,
        crash: CrashPoint,
    ) -> Result<Self> {
        Self::spawn_order(db, ledger, scenario, scenario.order(), execution, crash)
    }

    /// As [`Worker::spawn`], with another order number.
    ///
    /// # Errors
    /// As [`Worker::spawn`].
    pub fn spawn_order(
        db: &Path,
        ledger: &Path,
        scenario: Scenario,
        order: u32,
        execution: Uuid,
        crash: CrashPoint,
    ) -> Result<Self> {
        let mut command = demo_child()?;
        command
            .arg("demo-worker")
            .arg("--journal")
            .arg(db)
            .arg("--ledger")
            .arg(ledger)
            .arg("--scenario")
            .arg(value_name(&scenario))
            .arg("--order")
            .arg(order.to_string())
            .arg("--execution")
            .arg(execution.to_string())
            .arg("--crash")
            .arg(value_name(&crash));
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| failed(format!("cannot start the demo worker: {error}")))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| failed("the demo worker's output could not be captured"))?;
        Ok(Self {
            child,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// The worker's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Relays the worker's `say` lines, indented, until it is ready to be killed or exits.
    ///
    /// # Errors
    /// Its output cannot be read, or it talks without end.
    pub fn relay(&mut self) -> Result<Stop> {
        for _ in 0..CHILD_LINES_MAX {
            let Some(line) = self.lines.next() else {
                let status = self
                    .child
                    .wait()
                    .map_err(|error| failed(format!("cannot wait for the demo worker: {error}")))?;
                return Ok(Stop::Exited(status));
            };
            let line = line.map_err(|error| {
                failed(format!("cannot read the demo worker's output: {error}"))
            })?;
            if line == "ready" {
                return Ok(Stop::Ready);
            }
            if let Some(text) = line.strip_prefix("say ") {
                super::narrate(&format!("   worker {}: {text}", self.pid()))?;
            }
        }
        Err(failed(
            "the demo worker printed more than expected; stopping the demo",
        ))
    }

    /// Sends SIGKILL and reaps the worker.
    ///
    /// # Errors
    /// The signal cannot be sent or the child reaped.
    pub fn kill(mut self) -> Result<()> {
        // `Child::kill` sends SIGKILL on Unix: no handler, no unwinding, no clean-up runs.
        self.child
            .kill()
            .and_then(|()| self.child.wait().map(drop))
            .map_err(|error| failed(format!("cannot kill the demo worker: {error}")))
    }
}

/// This very binary, to re-run as a child.
///
/// # Errors
/// The path of the running executable is unknown.
fn own_binary() -> Result<Command> {
    let exe = std::env::current_exe()
        .map_err(|error| failed(format!("cannot find the durably binary to re-run: {error}")))?;
    let mut command = Command::new(exe);
    command.env_remove("DURABLY_DB");
    Ok(command)
}

/// This very binary, to re-run as a demo child that lives only as long as the demo: its stdin
/// is a pipe the demo holds open and never writes to (see [`exit_with_parent`]). The
/// [`Child`]'s `stdin` must stay open until the child is done: `Child::wait` closes it first.
///
/// # Errors
/// As [`own_binary`].
pub fn demo_child() -> Result<Command> {
    let mut command = own_binary()?;
    command.stdin(Stdio::piped());
    Ok(command)
}

/// The exit status of a demo child whose demo is gone.
const PARENT_GONE_EXIT: i32 = 3;

/// In a demo child: ends the process as soon as the demo that started it is gone. The demo
/// holds the write end of this process's stdin and never writes to it, so the read below
/// returns only when the demo closes it, or dies (even by SIGKILL, the kernel closes it).
/// Without this, the children of a demo killed mid-run would live on, blocked inside a step
/// or still firing slots, and append to the effect ledger of the next run on the same path,
/// which would then report effects that ran twice.
pub fn exit_with_parent() {
    // If the thread cannot start, the child runs unwatched, as it would have without this.
    let _ = std::thread::Builder::new()
        .name("demo-lifeline".to_owned())
        .spawn(|| {
            let mut byte = [0_u8; 1];
            let _ = std::io::Read::read(&mut std::io::stdin(), &mut byte);
            std::process::exit(PARENT_GONE_EXIT);
        });
}

/// Runs `durably ARGS` to completion, relaying its output indented, and returns its status.
///
/// # Errors
/// It cannot be started.
pub fn run_tool(args: &[&str]) -> Result<ExitStatus> {
    let output = own_binary()?
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| failed(format!("cannot run durably {args:?}: {error}")))?;
    for line in String::from_utf8_lossy(&output.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&output.stderr).lines())
    {
        super::narrate(&format!("     | {line}"))?;
    }
    Ok(output.status)
}

fn value_name(value: &impl clap::ValueEnum) -> String {
    value
        .to_possible_value()
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default()
}
