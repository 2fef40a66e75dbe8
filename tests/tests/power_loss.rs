//! Guarantee: after a power loss, the journal recovers a prefix of its commits: no later commit
//! is visible while an earlier one is missing, no transaction is visible in part, every step
//! row is consistent, and `PRAGMA integrity_check` is ok. With `Durability::Full`, every
//! acknowledged commit is present.
//!
//! Method: a child process (`power_loss_writer`) writes a deterministic workload (executions
//! with pure, failing, idempotent and guarded steps under every policy; finalized completed or
//! failed; the last left running) one commit at a time, and prints `ack i` after commit `i` was
//! acknowledged. The WAL is never checkpointed during the run (`wal_autocheckpoint` is raised
//! and the writer is killed, never closed), so every commit of the workload is a run of frames
//! in the WAL, the last of them a commit frame. After SIGKILL the test copies the database file
//! and the WAL and builds damaged copies:
//!
//! - the WAL cut at every frame boundary (and no WAL at all);
//! - the WAL torn inside each frame (in the frame header and in the page);
//! - the full WAL with one byte of one frame's page flipped, for every frame.
//!
//! Each copy is opened with the journal, in its own temporary directory (never the original),
//! without the orphan sweep, so the state read is exactly what SQLite recovered. The checker
//! knows the commit order from the plan and the frame layout from the WAL, so it asserts that
//! the state is *exactly* the first k commits, where k is the number of intact commit frames
//! before the cut; then it runs the orphan sweep on the copy and checks that nothing stays
//! locked or running.
//!
//! What this models, honestly: with `synchronous=NORMAL` (`Durability::ProcessCrash`), SQLite
//! does not fsync the WAL on commit, so a power loss can lose the tail of the WAL that the OS
//! had not written back. Cutting the WAL at frame boundaries, tearing its last frame and
//! corrupting a frame model exactly that loss of an unsynced tail (SQLite's checksums stop
//! recovery at the first bad frame). They do not model a disk that reorders or loses sectors
//! *before* an fsync returned, nor damage to the database file itself: SQLite's own crash
//! tests cover its file layer, and a disk that lies about fsync defeats every database.
//! With `synchronous=FULL`, each commit's frames are fsynced before the commit is
//! acknowledged, so at most the unacknowledged in-flight commit can be torn: the test checks
//! that the WAL as written holds every acknowledged commit, and that cuts are prefixes too.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use durably_journal::{Durability, Journal};
use durably_tests::power_loss::{
    self, Commit, ExecutionPlan, Finish, StepPlan, step_error, step_name, step_value,
};

const WAL_HEADER_BYTES: usize = 32;
const FRAME_HEADER_BYTES: usize = 24;

/// What the writer left behind, and what it acknowledged.
struct Written {
    plan: Vec<ExecutionPlan>,
    commits: Vec<Commit>,
    acked: usize,
    database: Vec<u8>,
    wal: Vec<u8>,
}

fn spawn_writer(database: &Path, seed: u64, executions: usize, durability: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_power_loss_writer"))
        .arg(database)
        .arg(seed.to_string())
        .arg(executions.to_string())
        .arg(durability)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Runs the writer and SIGKILLs it after `kill_after_acks` acks, or once it is done.
fn write(
    seed: u64,
    executions: usize,
    durability: &str,
    kill_after_acks: Option<usize>,
) -> Written {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("journal.db");
    let mut child = spawn_writer(&database, seed, executions, durability);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acked = 0;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(index) = line.strip_prefix("ack ") {
            assert_eq!(index.parse::<usize>().unwrap(), acked, "acks out of order");
            acked += 1;
        }
        if line == "done" || kill_after_acks == Some(acked) {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Acks printed before the kill landed still count: they were acknowledged.
    for line in lines {
        if let Some(index) = line.unwrap().strip_prefix("ack ") {
            assert_eq!(index.parse::<usize>().unwrap(), acked);
            acked += 1;
        }
    }
    let plan = power_loss::plan(seed, executions);
    let commits = power_loss::commits(&plan);
    // The writer is dead and nothing else has the file open: reading it by hand is safe.
    let database_bytes = std::fs::read(&database).unwrap();
    let wal = std::fs::read(dir.path().join("journal.db-wal")).unwrap();
    Written {
        plan,
        commits,
        acked,
        database: database_bytes,
        wal,
    }
}

/// The frame layout of a WAL file.
struct Frames {
    frame_bytes: usize,
    count: usize,
    /// `commits_before[f]`: commit frames among the first `f` frames.
    commits_before: Vec<usize>,
}

fn frames(wal: &[u8]) -> Frames {
    let magic = u32::from_be_bytes(wal[0..4].try_into().unwrap());
    assert!(
        magic == 0x377f_0682 || magic == 0x377f_0683,
        "not a WAL: {magic:#x}"
    );
    let page_bytes = u32::from_be_bytes(wal[8..12].try_into().unwrap()) as usize;
    let frame_bytes = FRAME_HEADER_BYTES + page_bytes;
    let count = (wal.len() - WAL_HEADER_BYTES) / frame_bytes;
    let mut commits_before = vec![0];
    for frame in 0..count {
        let start = WAL_HEADER_BYTES + frame * frame_bytes;
        let database_pages = u32::from_be_bytes(wal[start + 4..start + 8].try_into().unwrap());
        commits_before.push(commits_before[frame] + usize::from(database_pages != 0));
    }
    Frames {
        frame_bytes,
        count,
        commits_before,
    }
}

/// What a recovered copy holds, as plain rows.
#[derive(Debug, Default)]
struct Recovered {
    /// execution id -> (status, output, error)
    executions: BTreeMap<String, (String, Option<String>, Option<String>)>,
    /// (execution id, seq) -> the step row's columns that matter here
    steps: BTreeMap<(String, u32), StepRow>,
    /// resource -> whether the lock is held
    locks: BTreeMap<String, bool>,
    integrity: String,
}

#[derive(Debug, Clone)]
struct StepRow {
    name: String,
    effect: String,
    policy: Option<String>,
    state: String,
    result: Option<String>,
    error: Option<String>,
    intent_at: Option<String>,
    result_at: Option<String>,
}

fn read_state(journal: &Journal) -> Recovered {
    journal
        .read(|conn| {
            let mut state = Recovered::default();
            let mut statement =
                conn.prepare("SELECT execution_id, status, output, error FROM executions")?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                state
                    .executions
                    .insert(row.get(0)?, (row.get(1)?, row.get(2)?, row.get(3)?));
            }
            let mut statement = conn.prepare(
                "SELECT execution_id, seq, name, effect, policy, state, result, error, intent_at,
                        result_at FROM steps",
            )?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let step = StepRow {
                    name: row.get(2)?,
                    effect: row.get(3)?,
                    policy: row.get(4)?,
                    state: row.get(5)?,
                    result: row.get(6)?,
                    error: row.get(7)?,
                    intent_at: row.get(8)?,
                    result_at: row.get(9)?,
                };
                state.steps.insert((row.get(0)?, row.get(1)?), step);
            }
            let mut statement =
                conn.prepare("SELECT resource, instance_id IS NOT NULL FROM locks")?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                state.locks.insert(row.get(0)?, row.get(1)?);
            }
            state.integrity = conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))?;
            Ok(state)
        })
        .unwrap()
}

/// Whether `commit`'s effect is visible in `state`.
fn visible(plan: &[ExecutionPlan], state: &Recovered, commit: Commit) -> bool {
    let id = |execution: usize| plan[execution].id.to_string();
    let step = |execution: usize, seq: u32| state.steps.get(&(id(execution), seq));
    match commit {
        Commit::Open { execution } => state.executions.contains_key(&id(execution)),
        Commit::Result { execution, seq, .. } | Commit::Intent { execution, seq } => {
            step(execution, seq).is_some()
        }
        Commit::GuardedResult { execution, seq } => {
            step(execution, seq).is_some_and(|step| step.state != "intent")
        }
        Commit::Finalize { execution, .. } => state
            .executions
            .get(&id(execution))
            .is_some_and(|(status, _, _)| status != "running"),
    }
}

/// How many leading commits are visible; panics if the visible commits are not a prefix.
fn visible_prefix(written: &Written, state: &Recovered, label: &str) -> usize {
    let seen: Vec<bool> = written
        .commits
        .iter()
        .map(|commit| visible(&written.plan, state, *commit))
        .collect();
    let prefix = seen.iter().take_while(|seen| **seen).count();
    if let Some(later) = seen[prefix..].iter().position(|seen| *seen) {
        panic!(
            "{label}: commit {} ({:?}) is visible but commit {prefix} ({:?}) is not",
            prefix + later,
            written.commits[prefix + later],
            written.commits[prefix]
        );
    }
    prefix
}

/// Every row belongs to the plan, holds the planned values, and obeys the step rules; a
/// finalized execution released its lock in the same transaction, a running one holds it.
fn check_rows(written: &Written, state: &Recovered, label: &str) {
    assert_eq!(state.integrity, "ok", "{label}: integrity_check");
    let by_id: BTreeMap<String, (usize, &ExecutionPlan)> = written
        .plan
        .iter()
        .enumerate()
        .map(|(index, planned)| (planned.id.to_string(), (index, planned)))
        .collect();
    for (id, (status, output, error)) in &state.executions {
        let (index, planned) = by_id[id];
        let held = state.locks.get(id).copied();
        let finished = match planned.finish {
            Finish::Complete => "completed",
            Finish::Fail => "failed",
            Finish::LeaveOpen => "running",
        };
        assert!(
            status == "running" || status == finished,
            "{label}: {id} is {status}"
        );
        assert_eq!(
            held,
            Some(status == "running"),
            "{label}: lock of {id} ({status})"
        );
        let json = |text: String| serde_json::to_string(&text).unwrap();
        if status == "completed" {
            assert_eq!(
                output.clone(),
                Some(json(step_value(index, u32::MAX))),
                "{label}"
            );
        }
        if status == "failed" {
            assert_eq!(
                error.clone(),
                Some(json(step_error(index, u32::MAX))),
                "{label}"
            );
        }
    }
    assert_eq!(
        state.locks.len(),
        state.executions.len(),
        "{label}: stray lock rows"
    );
    for ((id, seq), step) in &state.steps {
        let (index, planned) = by_id[id];
        assert!(
            state.executions.contains_key(id),
            "{label}: step of a missing execution"
        );
        if *seq > 0 {
            assert!(
                state.steps.contains_key(&(id.clone(), seq - 1)),
                "{label}: gap at {seq}"
            );
        }
        check_step(index, *seq, planned.steps[*seq as usize], step, label);
    }
}

fn check_step(index: usize, seq: u32, planned: StepPlan, step: &StepRow, label: &str) {
    let at = format!("{label}: execution {index} step {seq}");
    assert_eq!(step.name, step_name(seq), "{at}");
    let value = serde_json::to_string(&step_value(index, seq)).unwrap();
    let (effect, policy) = match planned {
        StepPlan::Pure { .. } => ("pure", None),
        StepPlan::Idempotent => ("idempotent", None),
        StepPlan::Guarded { policy } => ("guarded", Some(policy.to_owned())),
    };
    assert_eq!(
        (step.effect.as_str(), &step.policy),
        (effect, &policy),
        "{at}"
    );
    assert_eq!(
        step.intent_at.is_some(),
        effect == "guarded",
        "{at}: intent_at"
    );
    assert_eq!(
        step.result_at.is_none(),
        step.state == "intent",
        "{at}: result_at"
    );
    match (planned, step.state.as_str()) {
        (StepPlan::Guarded { .. }, "intent") => {
            assert_eq!(
                (&step.result, &step.error),
                (&None, &None),
                "{at}: intent with a result"
            );
        }
        (StepPlan::Pure { fails: true }, "failed") => {
            let error: serde_json::Value =
                serde_json::from_str(step.error.as_deref().unwrap()).unwrap();
            assert_eq!(error["message"], step_error(index, seq), "{at}");
            assert_eq!(step.result, None, "{at}");
        }
        (
            StepPlan::Pure { fails: false } | StepPlan::Idempotent | StepPlan::Guarded { .. },
            "completed",
        ) => {
            assert_eq!(step.result.as_deref(), Some(value.as_str()), "{at}");
            assert_eq!(step.error, None, "{at}");
        }
        (planned, state) => panic!("{at}: a {planned:?} step in state {state}"),
    }
}

/// Opens a copy of the database with this WAL, checks it, and returns how many commits it holds.
fn recover(written: &Written, wal: Option<&[u8]>, durability: Durability, label: &str) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    std::fs::write(&path, &written.database).unwrap();
    if let Some(wal) = wal {
        std::fs::write(dir.path().join("journal.db-wal"), wal).unwrap();
    }
    let journal = Journal::builder(&path)
        .durability(durability)
        .sweep_on_open(false)
        .open()
        .unwrap_or_else(|error| panic!("{label}: the copy does not open: {error}"));
    let state = read_state(&journal);
    check_rows(written, &state, label);
    visible_prefix(written, &state, label)
}

/// Opens a copy with the orphan sweep on: afterwards nothing is locked or running.
fn recover_and_sweep(written: &Written, wal: &[u8], durability: Durability, left_open: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    std::fs::write(&path, &written.database).unwrap();
    std::fs::write(dir.path().join("journal.db-wal"), wal).unwrap();
    let journal = Journal::builder(&path)
        .durability(durability)
        .open()
        .unwrap();
    let state = read_state(&journal);
    assert_eq!(state.integrity, "ok");
    assert!(
        state.locks.values().all(|held| !held),
        "a dead writer's lock survived the sweep"
    );
    assert!(
        state
            .executions
            .values()
            .all(|(status, _, _)| status != "running")
    );
    if left_open {
        assert!(
            !journal.recoverable().unwrap().is_empty(),
            "the open execution is recoverable"
        );
    }
}

fn cut(wal: &[u8], bytes: usize) -> &[u8] {
    &wal[..bytes.min(wal.len())]
}

/// Every cut, tear and flipped byte recovers exactly the commits before it. Returns the number
/// of copies checked.
fn check_every_cut(written: &Written, durability: Durability) -> usize {
    let layout = frames(&written.wal);
    let frame_start = |frame: usize| WAL_HEADER_BYTES + frame * layout.frame_bytes;
    let mut copies = 0;
    assert_eq!(recover(written, None, durability, "no WAL"), 0, "no WAL");
    copies += 1;
    for frame in 0..=layout.count {
        let expected = layout.commits_before[frame];
        let label = format!("cut before frame {frame}");
        let wal = cut(&written.wal, frame_start(frame));
        assert_eq!(
            recover(written, Some(wal), durability, &label),
            expected,
            "{label}"
        );
        copies += 1;
        if frame == layout.count {
            break;
        }
        for torn_at in [
            FRAME_HEADER_BYTES / 2,
            FRAME_HEADER_BYTES + layout.frame_bytes / 3,
        ] {
            let label = format!("frame {frame} torn after {torn_at} bytes");
            let wal = cut(&written.wal, frame_start(frame) + torn_at);
            assert_eq!(
                recover(written, Some(wal), durability, &label),
                expected,
                "{label}"
            );
            copies += 1;
        }
        let label = format!("frame {frame} corrupted");
        let mut corrupted = written.wal.clone();
        corrupted[frame_start(frame) + FRAME_HEADER_BYTES + 100] ^= 0x5a;
        assert_eq!(
            recover(written, Some(&corrupted), durability, &label),
            expected,
            "{label}"
        );
        copies += 1;
    }
    copies
}

#[test]
fn process_crash_durability_recovers_a_prefix_of_the_commits_at_every_wal_cut() {
    let written = write(0x5EED_0001, 10, "process-crash", None);
    let layout = frames(&written.wal);
    assert_eq!(
        written.acked,
        written.commits.len(),
        "the writer finished the plan"
    );
    assert_eq!(
        layout.commits_before[layout.count],
        written.commits.len(),
        "each planned commit is one commit frame in the WAL (no checkpoint, no other writes)"
    );
    let full = recover(
        &written,
        Some(&written.wal),
        Durability::ProcessCrash,
        "full WAL",
    );
    assert_eq!(
        full, written.acked,
        "the full WAL holds every acknowledged commit"
    );
    let copies = check_every_cut(&written, Durability::ProcessCrash);
    recover_and_sweep(&written, &written.wal, Durability::ProcessCrash, true);
    eprintln!(
        "power loss (process-crash): {} commits in {} WAL frames; {copies} damaged copies \
         recovered a prefix",
        written.commits.len(),
        layout.count
    );
}

#[test]
fn full_durability_keeps_every_acknowledged_commit_of_a_writer_killed_mid_run() {
    let total = power_loss::commits(&power_loss::plan(0x5EED_0002, 8)).len();
    let written = write(0x5EED_0002, 8, "full", Some(total / 2));
    let layout = frames(&written.wal);
    let in_wal = layout.commits_before[layout.count];
    assert!(
        written.acked >= total / 2 && written.acked < total,
        "killed mid-run"
    );
    // A commit can land between the ack the test saw last and the kill; never fewer.
    assert!(
        in_wal >= written.acked,
        "{in_wal} commits in the WAL, {} acked",
        written.acked
    );
    let full = recover(&written, Some(&written.wal), Durability::Full, "full WAL");
    assert_eq!(full, in_wal, "the WAL as written, all of it");
    assert!(full >= written.acked, "an acknowledged commit was lost");
    let copies = check_every_cut(&written, Durability::Full);
    recover_and_sweep(&written, &written.wal, Durability::Full, false);
    eprintln!(
        "power loss (full): killed after {} acks; {in_wal} commits in {} WAL frames; {copies} \
         damaged copies recovered a prefix",
        written.acked, layout.count
    );
}
