//! The torture driver: keeps worker processes (hand-driven executions), scheduler processes
//! (fires), runtime workers, message senders and cancellers running against one journal,
//! SIGKILLs one at a seeded random moment per iteration and restarts it, then stops them all,
//! drives everything to completion in a final worker, and runs the checker. Every process is a
//! [`worker`] subcommand of the binary that runs the driver.

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::BoxError;
use super::checker::{Report, check};
use super::plan::SeededRng;
use super::runtime_workflow::CODE_ENV;
use super::worker;

/// How long the final worker may take to drive everything to completion.
const FINISH_TIMEOUT_MS: u64 = 300_000;
/// How often the driver looks at its children while it waits for a kill moment.
const POLL_INTERVAL_MS: u64 = 1;
/// Worker error logs kept in the report, at most.
const WORKER_ERRORS_SHOWN_MAX: usize = 5;

/// The settings of one torture run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Kill-and-restart iterations.
    pub iterations: u64,
    /// The seed of every random choice.
    pub seed: u64,
    /// `full` or `process-crash`.
    pub durability: String,
    /// Worker processes running executions at once.
    pub workers: u64,
    /// Scheduler processes firing the same slots at once.
    pub schedulers: u64,
    /// Runtime worker processes (each runs a runtime and starts executions through it).
    pub runtimes: u64,
    /// Processes sending messages to runtime executions.
    pub senders: u64,
    /// Processes cancelling runtime executions.
    pub cancellers: u64,
    /// The longest wait before a kill, in milliseconds.
    pub kill_delay_ms_max: u64,
    /// The run directory (journal, ledger, logs). It must be empty or not exist.
    pub dir: PathBuf,
}

/// What a run did and what the checker found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The checker's report.
    pub report: Report,
    /// SIGKILLs delivered to running workers.
    pub kills: u64,
    /// Workers that exited on their own with a failure (an engine error they never expect).
    pub worker_errors: Vec<String>,
    /// Whether the final worker drove everything to completion.
    pub finished: bool,
}

impl Outcome {
    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.report.passed() && self.worker_errors.is_empty() && self.finished
    }
}

impl Options {
    /// Every process slot of the run, of every role.
    fn processes(&self) -> u64 {
        self.workers + self.schedulers + self.runtimes + self.senders + self.cancellers
    }

    /// The worker arguments of process slot `slot`: hand-driven workers first, then scheduler
    /// processes, runtime workers, senders and cancellers.
    fn role_args(&self, slot: u64) -> Vec<String> {
        let numbered = |mode: &str, slot: u64, slots: u64| {
            vec![
                mode.to_owned(),
                "--slot".to_owned(),
                slot.to_string(),
                "--slots".to_owned(),
                slots.to_string(),
            ]
        };
        let mut first = 0;
        if slot < first + self.workers {
            return numbered("run", slot - first, self.workers);
        }
        first += self.workers;
        if slot < first + self.schedulers {
            return vec!["sched".to_owned()];
        }
        first += self.schedulers;
        if slot < first + self.runtimes {
            return numbered("runtime", slot - first, self.runtimes);
        }
        first += self.runtimes;
        if slot < first + self.senders {
            return vec!["send".to_owned()];
        }
        vec!["cancel".to_owned()]
    }
}

struct Worker {
    slot: u64,
    child: Child,
    log: PathBuf,
}

struct Fleet<'a> {
    options: &'a Options,
    workers: Vec<Worker>,
    started: u64,
    kills: u64,
    errors: Vec<String>,
}

impl Fleet<'_> {
    fn spawn(&mut self, slot: u64) -> Result<Worker, BoxError> {
        self.started += 1;
        let log = self
            .options
            .dir
            .join("logs")
            .join(format!("worker-{slot}-{}.log", self.started));
        let args = self.options.role_args(slot);
        let mut command = worker_command(self.options, &args, &log)?;
        // Runtime workers are upgraded and downgraded at every restart, so executions started
        // on one code are resumed on the other.
        if args[0] == "runtime" && self.started.is_multiple_of(2) {
            command.env(CODE_ENV, "old");
        }
        let child = command.spawn()?;
        Ok(Worker { slot, child, log })
    }

    /// Notes workers that exited on their own, and restarts them.
    fn reap_exited(&mut self) -> Result<(), BoxError> {
        for index in 0..self.workers.len() {
            if let Some(status) = self.workers[index].child.try_wait()? {
                self.note_exit(index, status);
                let slot = self.workers[index].slot;
                self.workers[index] = self.spawn(slot)?;
            }
        }
        Ok(())
    }

    fn note_exit(&mut self, index: usize, status: ExitStatus) {
        if !status.success() {
            let log = &self.workers[index].log;
            let text = std::fs::read_to_string(log).unwrap_or_default();
            self.errors.push(format!(
                "worker {} exited with {status}: {}",
                log.display(),
                text.trim()
            ));
        }
    }

    /// SIGKILLs worker `index` and waits for it; counts the kill if it was still running.
    fn kill(&mut self, index: usize) -> Result<(), BoxError> {
        let worker = &mut self.workers[index];
        if let Some(status) = worker.child.try_wait()? {
            self.note_exit(index, status);
            return Ok(());
        }
        worker.child.kill()?;
        let status = worker.child.wait()?;
        if status.signal() == Some(libc::SIGKILL) {
            self.kills += 1;
        } else {
            // It exited on its own just before the signal.
            self.note_exit(index, status);
        }
        Ok(())
    }
}

fn worker_command(options: &Options, args: &[String], log: &Path) -> Result<Command, BoxError> {
    let mut command = worker::command()?;
    command
        .args(args)
        .arg("--dir")
        .arg(&options.dir)
        .args(["--seed", &options.seed.to_string()])
        .args(["--durability", &options.durability])
        .env_remove("FAILPOINTS")
        .env_remove(CODE_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(log)?);
    Ok(command)
}

/// Runs the torture loop and the checker.
///
/// # Errors
/// The run directory, a worker or the checker failed in a way that is not a finding.
pub fn run(options: &Options) -> Result<Outcome, BoxError> {
    std::fs::create_dir_all(options.dir.join("logs"))?;
    let mut rng = SeededRng::new(options.seed, 0x6b69_6c6c);
    let mut fleet = Fleet {
        options,
        workers: Vec::new(),
        started: 0,
        kills: 0,
        errors: Vec::new(),
    };
    let processes = options.processes();
    if processes == 0 {
        return Err("a torture run needs at least one process".into());
    }
    for slot in 0..processes {
        let worker = fleet.spawn(slot)?;
        fleet.workers.push(worker);
    }
    for _ in 0..options.iterations {
        let victim = rng.between(0, processes - 1) as usize;
        // One kill in five comes early, to land in start-up: the journal open and its sweep.
        let delay_ms = if rng.percent(20) {
            rng.between(0, 4)
        } else {
            rng.between(1, options.kill_delay_ms_max.max(1))
        };
        let deadline = Instant::now() + Duration::from_millis(delay_ms);
        while Instant::now() < deadline {
            fleet.reap_exited()?;
            std::thread::sleep(Duration::from_millis(POLL_INTERVAL_MS));
        }
        fleet.kill(victim)?;
        fleet.workers[victim] = fleet.spawn(fleet.workers[victim].slot)?;
    }
    for index in 0..fleet.workers.len() {
        fleet.kill(index)?;
    }
    let finished = finish(options, &mut fleet.errors)?;
    let report = check(&options.dir)?;
    Ok(Outcome {
        report,
        kills: fleet.kills,
        worker_errors: fleet.errors,
        finished,
    })
}

/// Runs the final worker: sweep, then drive every execution to completion.
fn finish(options: &Options, errors: &mut Vec<String>) -> Result<bool, BoxError> {
    let log = options.dir.join("logs").join("finish.log");
    let mut child = worker_command(options, &["finish".to_owned()], &log)?.spawn()?;
    let deadline = Instant::now() + Duration::from_millis(FINISH_TIMEOUT_MS);
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                errors.push(format!(
                    "the finishing worker exited with {status}: {}",
                    text.trim()
                ));
            }
            return Ok(status.success());
        }
        if Instant::now() >= deadline {
            child.kill()?;
            child.wait()?;
            errors.push(format!(
                "the finishing worker did not finish within {FINISH_TIMEOUT_MS} ms"
            ));
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Prints the outcome: worker errors and violations first, the summary line last.
pub fn print(outcome: &Outcome, options: &Options) {
    for error in outcome.worker_errors.iter().take(WORKER_ERRORS_SHOWN_MAX) {
        println!("torture: worker error: {error}");
    }
    for violation in &outcome.report.violations {
        println!("torture: violation: {violation}");
    }
    let report = &outcome.report;
    println!(
        "torture: detail reran={} abandoned={} skipped={} resolved={} runtime_executions={} \
         queue_peak={} parked={} sent={} received={} timed_out={} cancelled={} children={} \
         patched={} unpatched={} forks={} worker_errors={} finished={} dir={}",
        report.reran,
        report.abandoned,
        report.skipped,
        report.resolved,
        report.runtime_executions,
        report.queue_peak,
        report.parked,
        report.sent,
        report.received,
        report.timed_out,
        report.cancelled,
        report.children,
        report.patched,
        report.unpatched,
        report.forks,
        outcome.worker_errors.len(),
        outcome.finished,
        options.dir.display()
    );
    println!(
        "{}",
        report.line(options.iterations, outcome.kills, options.seed)
    );
}
