//! Helper binaries run as children: driven by lines on stdin, answering with lines on stdout,
//! and never waited for without a bound.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Instant;

use super::{POLL_INTERVAL, WAIT_MAX};

/// Waits for `child` to exit, at most [`WAIT_MAX`]; past that it is killed and the test fails.
pub fn wait_exit(child: &mut Child, name: &str) -> ExitStatus {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} did not exit within {WAIT_MAX:?}");
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Spawns `command`, whose program may be a file this process has just written. Another test
/// thread that forks at that moment holds the copy's write descriptor until its child execs,
/// and the kernel refuses to run a file open for writing (`ETXTBSY`): a known Linux race, so
/// the spawn is tried again, a bounded number of times.
pub fn spawn(command: &mut Command) -> Child {
    const SPAWN_TRIES_MAX: u32 = 100;
    for _ in 1..SPAWN_TRIES_MAX {
        match command.spawn() {
            Err(error) if error.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            spawned => return spawned.unwrap(),
        }
    }
    command.spawn().unwrap()
}

/// A helper binary run as a child, driven by lines on stdin, answering with lines on stdout.
/// Dropping it kills the child, so a failing test leaves no stopped or running child behind.
pub struct Driven {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    name: String,
}

impl Driven {
    pub fn spawn(binary: &str, args: &[&str]) -> Self {
        Self::start(Command::new(binary).args(args))
    }

    /// Starts `command` with stdin and stdout piped to this process and stderr inherited.
    pub fn start(command: &mut Command) -> Self {
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = spawn(
            command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        );
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
        let stdin = child.stdin.take();
        let name = format!(
            "{} (pid {})",
            program.rsplit('/').next().unwrap_or(&program),
            child.id()
        );
        Self {
            child,
            stdin,
            lines,
            name,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn send(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line the child prints, waiting at most [`WAIT_MAX`].
    pub fn line(&mut self) -> String {
        match self.lines.recv_timeout(WAIT_MAX) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("{} printed nothing within {WAIT_MAX:?}", self.name)
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().unwrap();
                panic!(
                    "{} closed its stdout before answering ({status})",
                    self.name
                )
            }
        }
    }

    /// The next line, which must start with `word`; returns the words after it.
    pub fn expect(&mut self, word: &str) -> Vec<String> {
        let line = self.line();
        let mut words = line.split_whitespace().map(str::to_owned);
        assert_eq!(
            words.next().as_deref(),
            Some(word),
            "{} said {line:?}",
            self.name
        );
        words.collect()
    }

    /// SIGKILLs the child and reaps it.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Closes the child's stdin, which asks it to exit, and waits at most [`WAIT_MAX`] for it to
    /// exit successfully. Lines it printed before exiting can still be read.
    pub fn close(&mut self) {
        drop(self.stdin.take());
        let status = wait_exit(&mut self.child, &self.name);
        assert!(status.success(), "{} failed: {status}", self.name);
    }

    /// Asks the child to exit and waits for it, at most [`WAIT_MAX`].
    pub fn finish(mut self) {
        self.close();
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        // A failing test must not leave a stopped or running child behind.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
