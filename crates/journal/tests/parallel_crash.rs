//! Guarantee: several guarded steps of one execution in their ambiguous windows at once, left
//! there by a real crash, are each resolved by their own policy when their call replays:
//! Retry runs its closure again (same idempotency key), Skip is skipped, Fail leaves the
//! execution `awaiting_operator`. No effect is lost, and none is doubled beyond what its
//! policy allows (Retry's at-least-once).
//!
//! Method: this test binary re-executes itself as the child (`PARALLEL_CRASH_CHILD` set),
//! which runs three guarded steps (Retry, Skip, Fail) joined, whose closures append a line
//! with their step name and idempotency key to a ledger file the engine never writes, then
//! never return. The parent waits until the ledger holds all three lines (so all three intents
//! committed and no result can have been written), checks the three intents with SQL, and
//! kills the child with SIGKILL. It then reopens the execution and calls the same three steps,
//! joined, and counts the ledger's lines per step.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use durably_journal::{Error, Guarded, Journal, Policy, Status, StepError, StepKey};
use support::start;
use uuid::Uuid;

const CHILD: &str = "PARALLEL_CRASH_CHILD";
const TEST_NAME: &str =
    "three_parallel_guarded_steps_killed_in_their_windows_follow_their_policies";
/// How long the parent waits for the child's three effects before it gives up.
const EFFECTS_WAIT_MAX: Duration = Duration::from_mins(1);

/// A step's name and how to make its policy.
type Step = (&'static str, fn() -> Policy);

const STEPS: [Step; 3] = [
    ("retry", || Policy::Retry),
    ("skip", || Policy::Skip),
    ("fail", || Policy::Fail),
];

/// The effect: one ledger line per call, with the step's name and key.
fn effect(ledger: &Path, name: &str, key: StepKey) -> Result<(), StepError> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .map_err(|error| StepError::fatal(error.to_string()))?;
    writeln!(file, "{name} {}", key.idempotency_key())
        .map_err(|error| StepError::fatal(error.to_string()))
}

fn ledger_lines(ledger: &Path) -> Vec<String> {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs the three guarded steps joined; `hang` makes each closure never return after its
/// effect (the child, to be killed in the window).
async fn three_steps(
    execution: &durably_journal::Execution,
    ledger: &Path,
    hang: bool,
) -> Vec<durably_journal::Result<Guarded<u32>>> {
    let step = |index: usize| {
        let (name, policy) = STEPS[index];
        let ledger = ledger.to_owned();
        execution.guarded(name, policy(), move |key| {
            let written = effect(&ledger, name, key);
            async move {
                written?;
                if hang {
                    std::future::pending::<()>().await;
                }
                Ok(u32::try_from(index).unwrap())
            }
        })
    };
    let (retry, skip, fail) = tokio::join!(step(0), step(1), step(2));
    vec![retry, skip, fail]
}

fn spawn_child(database: &Path, ledger: &Path, id: Uuid) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(
            CHILD,
            format!("{}\n{}\n{id}", database.display(), ledger.display()),
        )
        .spawn()
        .unwrap()
}

async fn child(spec: &str) {
    let mut parts = spec.lines();
    let database = PathBuf::from(parts.next().unwrap());
    let ledger = PathBuf::from(parts.next().unwrap());
    let id: Uuid = parts.next().unwrap().parse().unwrap();
    let journal = Journal::open(&database).unwrap();
    let execution = start(&journal, id).await;
    three_steps(&execution, &ledger, true).await;
    unreachable!("the hanging steps returned");
}

#[tokio::test]
async fn three_parallel_guarded_steps_killed_in_their_windows_follow_their_policies() {
    if let Ok(spec) = std::env::var(CHILD) {
        return child(&spec).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let (database, ledger) = (dir.path().join("journal.db"), dir.path().join("ledger"));
    let id = Uuid::new_v4();
    drop(Journal::open(&database).unwrap());

    let mut child = spawn_child(&database, &ledger, id);
    let started = Instant::now();
    while ledger_lines(&ledger).len() < 3 {
        assert!(
            started.elapsed() < EFFECTS_WAIT_MAX,
            "the child's effects did not all run"
        );
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child ended before its effects: {status}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let journal = Journal::open(&database).unwrap();
    let steps = journal.steps(id).unwrap();
    let states: Vec<_> = steps
        .iter()
        .map(|step| (step.seq, step.name.as_str(), step.state.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            (0, "retry", "intent"),
            (1, "skip", "intent"),
            (2, "fail", "intent")
        ]
    );

    let execution = start(&journal, id).await;
    let outcomes = three_steps(&execution, &ledger, false).await;
    let mut outcomes = outcomes.into_iter();
    let retried = outcomes.next().unwrap();
    assert!(matches!(retried, Ok(Guarded::Done(0))), "{retried:?}");
    let skipped = outcomes.next().unwrap();
    assert!(matches!(skipped, Ok(Guarded::Skipped(_))), "{skipped:?}");
    let failed = outcomes.next().unwrap();
    assert!(
        matches!(failed, Err(Error::Ambiguous { seq: 2, .. })),
        "{failed:?}"
    );
    drop(execution);
    let record = journal.get(id).unwrap().unwrap();
    assert_eq!(record.status, Status::AwaitingOperator);

    // The ledger: Retry ran twice under one key (at-least-once), Skip and Fail once each.
    let lines = ledger_lines(&ledger);
    let of = |name: &str| -> Vec<&String> {
        lines
            .iter()
            .filter(|line| line.starts_with(&format!("{name} ")))
            .collect()
    };
    assert_eq!(of("retry").len(), 2, "{lines:?}");
    assert_eq!(of("retry")[0], of("retry")[1], "Retry changed its key");
    assert_eq!(of("skip").len(), 1, "{lines:?}");
    assert_eq!(of("fail").len(), 1, "{lines:?}");
}
