//! The torture driver: keeps worker processes (hand-driven executions), scheduler processes
//! (fires), runtime workers, message senders and cancellers running against one journal,
//! SIGKILLs one at a seeded random moment per iteration and restarts it, then stops them all,
//! drives everything to completion in a final worker, and runs the checker. Every process is a
//! [`worker`] subcommand of the binary that runs the driver.
//!
//! On PostgreSQL ([`Backend::Postgres`]) an iteration may instead stop its victim (SIGSTOP) for
//! longer than the journals' lease, so that peers take its executions over while it exists,
//! and wake it (SIGCONT) later; or cut it off: end its sessions from the server side
//! (`pg_terminate_backend`), either its liveness session alone or every session of its
//! instance. A woken or cut-off worker may then exit with [`worker::EXIT_LOST`]
//! (`LockLost`, `InstanceLost`), which is expected of it and of no other worker; what it must
//! not do, write after losing its ownership, is for the checker to find.

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::BoxError;
use super::checker::{INTERRUPTED_FILE, Report, check};
use super::ledger::monotonic_ns;
use super::plan::SeededRng;
use super::runtime_workflow::CODE_ENV;
use super::store::{self, Backend};
use super::worker;

/// How long the final worker may take to drive everything to completion.
const FINISH_TIMEOUT_MS: u64 = 300_000;
/// How often the driver looks at its children while it waits for a kill moment.
const POLL_INTERVAL_MS: u64 = 1;
/// Worker error logs kept in the report, at most.
const WORKER_ERRORS_SHOWN_MAX: usize = 5;
/// A stopped worker stays stopped for the lease plus up to this long (at least a tenth of it).
const STOP_PAST_LEASE_MS_MAX: u64 = 1_500;

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
    /// Where the journal lives.
    pub backend: Backend,
    /// On PostgreSQL, the percentage of iterations that stop their victim past the lease
    /// instead of killing it.
    pub stop_percent: u64,
    /// On PostgreSQL, the percentage of iterations that end their victim's sessions instead of
    /// killing it.
    pub partition_percent: u64,
}

/// What a run did and what the checker found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The checker's report.
    pub report: Report,
    /// SIGKILLs delivered to running workers.
    pub kills: u64,
    /// Workers stopped past the lease and woken again.
    pub stops: u64,
    /// Workers whose sessions were ended from the server side.
    pub partitions: u64,
    /// Stopped or cut-off workers that then exited on a lost ownership, as they may.
    pub fenced: u64,
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
    /// When a stopped worker is to be woken.
    stopped_until: Option<Instant>,
    /// Whether it was stopped or cut off, so that it may exit on a lost ownership.
    may_lose: bool,
}

struct Fleet<'a> {
    options: &'a Options,
    workers: Vec<Worker>,
    started: u64,
    kills: u64,
    stops: u64,
    partitions: u64,
    fenced: u64,
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
        Ok(Worker {
            slot,
            child,
            log,
            stopped_until: None,
            may_lose: false,
        })
    }

    /// Wakes stopped workers whose time has come.
    fn wake_due(&mut self) -> Result<(), BoxError> {
        let now = Instant::now();
        for worker in &mut self.workers {
            if worker.stopped_until.is_some_and(|until| until <= now) {
                signal(&worker.child, libc::SIGCONT)?;
                worker.stopped_until = None;
                self.stops += 1;
            }
        }
        Ok(())
    }

    /// SIGSTOPs worker `index` for `stop_ms`.
    fn stop(&mut self, index: usize, stop_ms: u64) -> Result<(), BoxError> {
        let worker = &mut self.workers[index];
        note_interrupted(&self.options.dir, worker.child.id())?;
        signal(&worker.child, libc::SIGSTOP)?;
        worker.stopped_until = Some(Instant::now() + Duration::from_millis(stop_ms));
        worker.may_lose = true;
        Ok(())
    }

    /// Ends worker `index`'s sessions from the server side: its liveness session alone, or
    /// every session of its instance. Returns whether it ended any (a worker that has not
    /// opened its journal yet has none to end).
    fn partition(&mut self, index: usize, liveness_only: bool) -> Result<bool, BoxError> {
        let worker = &mut self.workers[index];
        let file = worker::instance_file(&self.options.dir, worker.child.id());
        let Ok(text) = std::fs::read_to_string(&file) else {
            return Ok(false);
        };
        let instance: uuid::Uuid = text.trim().parse()?;
        let admin = store::admin()?;
        // The backends are found first and ended one by one: a condition that ends backends
        // inside the search could be evaluated before the others, on every row.
        let pids: Vec<i64> = if liveness_only {
            let key = durably_lock::session_key(&instance).cast_unsigned();
            let (high, low) = ((key >> 32).cast_signed(), (key & 0xFFFF_FFFF).cast_signed());
            let mut statement = admin.prepare(
                "SELECT CAST(pid AS BIGINT) FROM pg_locks
                 WHERE locktype = 'advisory' AND granted AND objsubid = 1
                   AND CAST(classid AS BIGINT) = ?1 AND CAST(objid AS BIGINT) = ?2",
            )?;
            statement
                .query_map(durably_db::params![high, low], |row| row.get(0))?
                .collect::<Result<_, _>>()?
        } else {
            let short = instance.simple().to_string();
            let mut statement = admin.prepare(
                "SELECT CAST(pid AS BIGINT) FROM pg_stat_activity WHERE application_name LIKE ?1",
            )?;
            statement
                .query_map([format!("durably:{}:%", &short[..8])], |row| row.get(0))?
                .collect::<Result<_, _>>()?
        };
        if !pids.is_empty() {
            note_interrupted(&self.options.dir, worker.child.id())?;
        }
        let mut ended = 0;
        for pid in pids {
            let done: bool = admin.query_row(
                "SELECT pg_terminate_backend(CAST(?1 AS INTEGER))",
                [pid],
                |row| row.get(0),
            )?;
            ended += u64::from(done);
        }
        if ended > 0 {
            worker.may_lose = true;
            self.partitions += 1;
        }
        Ok(ended > 0)
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
        if self.workers[index].may_lose && status.code() == Some(i32::from(worker::EXIT_LOST)) {
            self.fenced += 1;
        } else if !status.success() {
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
        worker.stopped_until = None;
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
    if options.backend == Backend::Postgres {
        store::create_schema(&options.dir)?;
    } else if options.stop_percent + options.partition_percent > 0 {
        return Err("stops and partitions need --backend postgres".into());
    }
    let mut rng = SeededRng::new(options.seed, 0x6b69_6c6c);
    // The choice between kill, stop and partition has a stream of its own, so SQLite runs keep
    // the kill schedule of their seed.
    let mut actions = SeededRng::new(options.seed, 0x7374_6f70);
    let mut fleet = Fleet {
        options,
        workers: Vec::new(),
        started: 0,
        kills: 0,
        stops: 0,
        partitions: 0,
        fenced: 0,
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
            fleet.wake_due()?;
            fleet.reap_exited()?;
            std::thread::sleep(Duration::from_millis(POLL_INTERVAL_MS));
        }
        // A stopped worker is left to wake: it is what its stop tests.
        let stopped = fleet.workers[victim].stopped_until.is_some();
        if options.backend == Backend::Postgres {
            if actions.percent(options.partition_percent) && !stopped {
                if fleet.partition(victim, actions.percent(50))? {
                    continue;
                }
            } else if actions.percent(options.stop_percent) && !stopped {
                let stop_ms =
                    store::LEASE_MS + actions.between(store::LEASE_MS / 10, STOP_PAST_LEASE_MS_MAX);
                fleet.stop(victim, stop_ms)?;
                continue;
            }
        }
        if stopped {
            continue;
        }
        fleet.kill(victim)?;
        fleet.workers[victim] = fleet.spawn(fleet.workers[victim].slot)?;
    }
    // Stopped workers are woken first, so that each wakes once past its lease, as planned.
    while fleet
        .workers
        .iter()
        .any(|worker| worker.stopped_until.is_some())
    {
        fleet.wake_due()?;
        fleet.reap_exited()?;
        std::thread::sleep(Duration::from_millis(POLL_INTERVAL_MS));
    }
    for index in 0..fleet.workers.len() {
        fleet.kill(index)?;
    }
    let finished = finish(options, &mut fleet.errors)?;
    let report = check(&options.dir)?;
    Ok(Outcome {
        report,
        kills: fleet.kills,
        stops: fleet.stops,
        partitions: fleet.partitions,
        fenced: fleet.fenced,
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
    let line = report.line(options.iterations, outcome.kills, options.seed);
    match options.backend {
        Backend::Sqlite => println!("{line}"),
        // The interruptions that are not kills follow the kills.
        Backend::Postgres => println!(
            "{}",
            line.replacen(
                &format!(" kills={} ", outcome.kills),
                &format!(
                    " kills={} stops={} partitions={} fenced={} stale={} ",
                    outcome.kills, outcome.stops, outcome.partitions, outcome.fenced, report.stale
                ),
                1
            )
        ),
    }
}

/// Sends `signal` to `child`.
fn signal(child: &Child, signal: libc::c_int) -> Result<(), BoxError> {
    let pid = libc::pid_t::try_from(child.id())?;
    // SAFETY: kill(2) with a valid signal number; `child` has not been waited for, so its pid
    // is still its own.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// Notes in the run directory that worker process `pid` is stopped or cut off from now on.
fn note_interrupted(dir: &Path, pid: u32) -> Result<(), BoxError> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(INTERRUPTED_FILE))?;
    file.write_all(format!("{pid} {}\n", monotonic_ns()).as_bytes())?;
    Ok(())
}
