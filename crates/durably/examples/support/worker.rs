//! Crashing a workflow for real, for the examples: the example runs its workflow in a child
//! process of itself (the same program, started again with [`WORKER_ARG`] first), reads the
//! child's output until the workflow has reached the point to crash at, and kills it with
//! SIGKILL there. The child announces that point itself, with a line on its standard output,
//! and then waits to be killed ([`hang_until_killed`]): the kill lands exactly there, without
//! failpoints and without guessing with sleeps.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};

/// The first argument that makes the example a worker.
pub const WORKER_ARG: &str = "worker";

/// A worker process: this program, started again as a worker.
pub struct Worker {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    /// Starts this program again as `PROGRAM worker ARGS...`, its standard output piped here.
    ///
    /// # Errors
    /// When this program's path cannot be found or the process cannot start.
    pub fn spawn<S: AsRef<OsStr>>(args: &[S]) -> io::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(WORKER_ARG)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("the worker's standard output is not piped"))?;
        let lines = BufReader::new(stdout).lines();
        Ok(Self { child, lines })
    }

    /// The worker's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads the worker's lines, printing each as `worker: LINE`, until `count` of them have
    /// contained `needle`.
    ///
    /// # Errors
    /// When the worker ends first, or its output cannot be read.
    pub fn wait_for(&mut self, needle: &str, count: usize) -> io::Result<()> {
        let mut seen = 0;
        while seen < count {
            let Some(line) = self.lines.next() else {
                return Err(io::Error::other(format!(
                    "the worker ended after {seen} of {count} lines containing {needle:?}"
                )));
            };
            let line = line?;
            println!("worker: {line}");
            if line.contains(needle) {
                seen += 1;
            }
        }
        Ok(())
    }

    /// Kills the worker with SIGKILL (what `Child::kill` sends on Unix) and reaps it: no
    /// destructor, no flush, no lock released, as in a real crash.
    ///
    /// # Errors
    /// When the signal cannot be sent or the process cannot be reaped.
    pub fn kill(mut self) -> io::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

/// Prints `line` for the example that runs this worker, then never returns: the worker is
/// killed while it waits here.
pub async fn hang_until_killed(line: &str) {
    println!("{line}");
    std::future::pending::<()>().await;
}
