//! Guarantee: a crash at any durability boundary of the engine, at any point of a workload, loses
//! no acknowledged result, repeats no effect its policy forbids, and leaves nothing stuck or
//! locked once the workload is restarted to completion.
//!
//! Method, as SQLite's TH3 does it: for each failpoint and for K = 0, 1, 2, ..., a child process
//! runs the matrix workload (`torture worker matrix`, see `durably_tests::torture::matrix`)
//! with `FAILPOINTS=<name>=K*off->return`, so the failpoint's (K+1)-th hit aborts the process
//! (`std::process::abort`, never a panic). If the child aborted, it is restarted without
//! failpoints and must finish; then the torture checker compares the ledger with the journal.
//! The walk ends at the first K the workload finishes without reaching; every failpoint must
//! be reached at least once, and within `HITS_MAX` hits.
//!
//! The workload uses `Durability::ProcessCrash` for speed: an abort is a process crash, which
//! NORMAL synchronous mode survives; power loss is tested elsewhere. The runs of one walk are
//! independent, so a few run at once (see `walk`).
#![cfg(feature = "failpoints")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::collections::VecDeque;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, ScopedJoinHandle};

use durably_tests::torture::checker::check;

/// The most hits of one failpoint the walk tries before it declares the workload too big.
const HITS_MAX: u32 = 200;
/// K of one walk under way at once, at most: a run mostly waits (on its processes' start,
/// timers and aborts), so libtest's one test per core would leave the cores idle, and the
/// longest walk, one K after another, would set the binary's time.
const K_UNDER_WAY_MAX: usize = 3;
const TORTURE: &str = env!("CARGO_BIN_EXE_torture");
const SEED: u64 = 20_261_129;

fn worker(dir: &Path, failpoints: Option<&str>) -> Command {
    let mut command = Command::new(TORTURE);
    command
        .args(["worker", "matrix"])
        .arg("--dir")
        .arg(dir)
        .args(["--seed", &SEED.to_string(), "--durability", "process-crash"])
        .stdin(Stdio::null())
        .env_remove("FAILPOINTS");
    if let Some(failpoints) = failpoints {
        command.env("FAILPOINTS", failpoints);
    }
    command
}

fn run_worker(dir: &Path, failpoints: Option<&str>) -> ExitStatus {
    worker(dir, failpoints).status().expect("the worker starts")
}

fn assert_invariants(dir: &Path, context: &str) {
    let report = check(dir).expect("the checker reads the run");
    assert!(
        report.passed(),
        "{context}: {}\n{}",
        report.line(0, 0, SEED),
        report.violations.join("\n")
    );
}

/// How one K of a walk ended.
enum Ended {
    /// The run finished without reaching the failpoint's (K+1)-th hit: the walk ends at K.
    Unreached,
    /// The run crashed at that hit, and its restart finished with the invariants held.
    Crashed,
}

/// Lets a walk stop one of its K that it turned out not to need: the K's current process
/// group is killed, and it starts no other.
#[derive(Default)]
struct Stopper {
    state: Mutex<StopperState>,
}

#[derive(Default)]
struct StopperState {
    stopped: bool,
    /// The process group of the K's current process, while that process is unreaped (so the
    /// id cannot have been reused).
    group: Option<libc::pid_t>,
}

impl Stopper {
    /// Runs `command` to its end in a process group of its own (with the orphan makers it
    /// starts); `None` if the K was stopped.
    fn run(&self, command: &mut Command) -> Option<ExitStatus> {
        let mut child = {
            let mut state = self.state.lock().unwrap();
            if state.stopped {
                return None;
            }
            let child = command.process_group(0).spawn().expect("the worker starts");
            state.group = Some(child.id() as libc::pid_t);
            child
        };
        wait_without_reaping(&child);
        let stopped = {
            let mut state = self.state.lock().unwrap();
            state.group = None;
            state.stopped
        };
        let status = child.wait().expect("the worker is reaped");
        (!stopped).then_some(status)
    }

    fn stop(&self) {
        let mut state = self.state.lock().unwrap();
        state.stopped = true;
        if let Some(group) = state.group {
            // SAFETY: kill(2) on a process group whose leader is not reaped yet.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
    }
}

/// Waits until `child` has exited, leaving it to be reaped.
fn wait_without_reaping(child: &Child) {
    // SAFETY: an all-zero siginfo_t is a valid value of this plain C struct.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `info` is a valid siginfo_t to write to; WNOWAIT leaves the child unreaped.
        let result = unsafe {
            libc::waitid(
                libc::P_PID,
                child.id(),
                &raw mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if result == 0 {
            return;
        }
        let error = std::io::Error::last_os_error();
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::Interrupted,
            "waitid: {error}"
        );
    }
}

/// One K of the walk of `failpoint`: a run crashing at the (K+1)-th hit, K = `hits_before`,
/// and, if it crashed, its restart to completion; both leave the invariants held. `None` if
/// the walk stopped it.
fn walk_one(failpoint: &str, hits_before: u32, stopper: &Stopper) -> Option<Ended> {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let context = format!("{failpoint} after {hits_before} hits");
    let crashing = format!("{failpoint}={hits_before}*off->return");
    let status = stopper.run(&mut worker(dir.path(), Some(&crashing)))?;
    if status.success() {
        assert_invariants(dir.path(), &context);
        return Some(Ended::Unreached);
    }
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "{context}: the worker neither finished nor aborted: {status}"
    );
    let restart = stopper.run(&mut worker(dir.path(), None))?;
    assert!(
        restart.success(),
        "{context}: the restart failed: {restart}"
    );
    assert_invariants(dir.path(), &context);
    Some(Ended::Crashed)
}

/// The K of a walk that have started and are not judged yet, in K order. Dropping it stops
/// them, so a walk that ended or failed leaves no process behind.
#[derive(Default)]
struct InFlight<'scope> {
    ks: VecDeque<(Arc<Stopper>, ScopedJoinHandle<'scope, Option<Ended>>)>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        for (stopper, _) in &self.ks {
            stopper.stop();
        }
    }
}

/// Walks the hit index of `failpoint`; returns the first K the workload did not reach.
///
/// The K of a walk are independent (each has its own directory), so up to `K_UNDER_WAY_MAX` of
/// them run ahead, each in its own thread, while the earliest is judged. Judging stays in K
/// order, and the K past the first unreached one are stopped unjudged, so the walk checks
/// exactly what a walk of one K at a time checks.
fn walk(failpoint: &str) -> u32 {
    thread::scope(|scope| {
        let mut in_flight = InFlight::default();
        let mut next = 0;
        for hits_before in 0..=HITS_MAX {
            while next <= HITS_MAX && in_flight.ks.len() < K_UNDER_WAY_MAX {
                let stopper = Arc::new(Stopper::default());
                let running = Arc::clone(&stopper);
                let k = next;
                let handle = scope.spawn(move || walk_one(failpoint, k, &running));
                in_flight.ks.push_back((stopper, handle));
                next += 1;
            }
            let (_, handle) = in_flight.ks.pop_front().expect("this K started");
            let ended = handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                .expect("a K the walk judges is never stopped");
            if let Ended::Unreached = ended {
                eprintln!(
                    "failpoint_matrix: {failpoint}: {hits_before} hits (K = 0..{hits_before} \
                     walked, the last unreached)"
                );
                return hits_before;
            }
        }
        panic!("{failpoint} was still reached after {HITS_MAX} hits: the workload grew too big");
    })
}

macro_rules! failpoint_tests {
    ($($test:ident => $name:literal,)*) => {
        $(
            #[test]
            fn $test() {
                let reached = walk($name);
                assert!(reached >= 1, "the matrix workload never reached {}", $name);
            }
        )*
    };
}

failpoint_tests! {
    lock_between_judgement_and_takeover => "lock::between-judgement-and-takeover",
    journal_after_lock_commit => "journal::after-lock-commit",
    journal_after_intent_commit => "journal::after-intent-commit",
    journal_after_effect => "journal::after-effect",
    journal_after_result_commit => "journal::after-result-commit",
    journal_sweep_before_takeover => "journal::sweep-before-takeover",
    journal_sweep_between_reclaims => "journal::sweep-between-reclaims",
    journal_gc_between_batches => "journal::gc-between-batches",
    journal_migration_before_commit => "journal::migration-before-commit",
    journal_after_awaiting_operator_commit => "journal::after-awaiting-operator-commit",
    journal_after_deferred_flush_commit => "journal::after-deferred-flush-commit",
    runtime_after_finalize_commit => "runtime::after-finalize-commit",
    scheduler_after_fire_registered => "scheduler::after-fire-registered",
    scheduler_after_pause_commit => "scheduler::after-pause-commit",
    journal_before_hooked_result_commit => "journal::before-hooked-result-commit",
    journal_before_release_commit => "journal::before-release-commit",
    journal_after_release_commit => "journal::after-release-commit",
    runtime_before_park => "runtime::before-park",
    runtime_after_park_commit => "runtime::after-park-commit",
    runtime_after_wake_commit => "runtime::after-wake-commit",
    runtime_after_send_commit => "runtime::after-send-commit",
    runtime_after_consume_commit => "runtime::after-consume-commit",
    runtime_after_event_commit => "runtime::after-event-commit",
    runtime_after_recovery_batch => "runtime::after-recovery-batch",
    journal_after_cancel_request_commit => "journal::after-cancel-request-commit",
    journal_after_cancel_commit => "journal::after-cancel-commit",
    runtime_after_cancel_observed => "runtime::after-cancel-observed",
    runtime_after_deadline_commit => "runtime::after-deadline-commit",
    runtime_after_resume_commit => "runtime::after-resume-commit",
    runtime_after_step_timeout_commit => "runtime::after-step-timeout-commit",
    runtime_after_child_start => "runtime::after-child-start",
    runtime_after_child_end_commit => "runtime::after-child-end-commit",
    runtime_after_patch_answer_commit => "runtime::after-patch-answer-commit",
    runtime_after_fork_commit => "runtime::after-fork-commit",
}

#[test]
fn the_matrix_workload_passes_without_failpoints() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    assert!(run_worker(dir.path(), None).success());
    assert_invariants(dir.path(), "no failpoint");
}
