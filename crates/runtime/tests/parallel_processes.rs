//! Guarantee: a registered workflow that joins a guarded step, a pure step, a receive and a
//! timer (`tokio::join!`) numbers its steps in call order, survives a SIGKILL while its
//! guarded step is in the ambiguous window and its receive has consumed its message, and
//! finishes in another process with the same results: the guarded step's policy (Retry) runs
//! its effect once more under the same key, and the receive replays the message it consumed,
//! consuming no other.
//!
//! Method: this test binary run again as a child (`CHILD_ENV`) serves the workflow with
//! `HANG_ENV` set, which makes the guarded closure never return after its effect (a ledger
//! line with its key). The parent sends the message first, waits until the ledger holds the
//! effect and the journal holds the recv step, kills the child with SIGKILL, then serves the
//! execution itself and checks the output, the step rows, the message's consumption and the
//! ledger.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::{Journal, Policy, Status, StepError};
use durably_runtime::{Runtime, WorkflowContext, WorkflowError};
use support::{assert_steps_in_order, child_command, consumption, start_queued, wait_until};

/// Set in the child: `serve <database path> <execution id>`.
const CHILD_ENV: &str = "DURABLY_RUNTIME_PARALLEL_TEST_CHILD";
/// Set in the child: the guarded closure hangs after its effect.
const HANG_ENV: &str = "DURABLY_RUNTIME_PARALLEL_TEST_HANG";

type Output = (u32, u32, Option<bool>);

/// Four steps at once: a guarded charge (its effect a ledger line), a pure computation, a
/// receive (two steps) and a short timer.
async fn fanout(context: WorkflowContext, ledger: String) -> Result<Output, WorkflowError> {
    let charge = context.guarded("charge", Policy::Retry, |key| {
        let ledger = ledger.clone();
        async move {
            append(&ledger, &format!("charge {}", key.idempotency_key()))?;
            if std::env::var(HANG_ENV).is_ok() {
                std::future::pending::<()>().await;
            }
            Ok(1_u32)
        }
    });
    let compute = context.pure("compute", || async { Ok(2_u32) });
    let answer = context.recv::<bool>("approval", Duration::from_mins(10));
    let pause = context.sleep("pause", Duration::from_millis(1));
    let (charged, computed, answer, paused) = tokio::join!(charge, compute, answer, pause);
    paused?;
    let charged = charged?
        .into_result()
        .map_err(|skipped| WorkflowError::new(format!("skipped: {skipped:?}")))?;
    Ok((charged, computed?, answer?))
}

fn append(ledger: &str, line: &str) -> Result<(), StepError> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .map_err(|error| StepError::fatal(error.to_string()))?;
    writeln!(file, "{line}").map_err(|error| StepError::fatal(error.to_string()))
}

fn ledger_lines(ledger: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The child: serves the workflow until it is killed. Does nothing as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Some((_role, db, id)) = support::child_spec(CHILD_ENV) else {
        return;
    };
    let runtime = Runtime::builder(Journal::open(db).unwrap())
        .register("fanout", 1, fanout)
        .start()
        .await
        .unwrap();
    runtime.handle::<Output>(id).result().await.unwrap();
    panic!("the child's workflow was to hang in its guarded step");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_workflow_killed_mid_step_finishes_in_another_process_with_the_same_results() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, ledger) = (dir.path().join("journal.db"), dir.path().join("ledger"));
    let journal = Journal::open(&db).unwrap();
    let input = ledger.to_str().unwrap().to_owned();
    let (client, id) = start_queued(&journal, "fanout", &input).await;
    client.send(id, "approval", &true, None).await.unwrap();

    let mut child = child_command(CHILD_ENV, &format!("serve {} {id}", db.display()))
        .env(HANG_ENV, "1")
        .spawn()
        .unwrap();
    wait_until(
        &journal,
        "the charge's effect and the recv step",
        |journal| {
            let recorded = journal.steps(id).unwrap();
            ledger_lines(&ledger).len() == 1
                && recorded
                    .iter()
                    .any(|step| step.name == "durably:recv/approval")
        },
    )
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let charge = journal
        .steps(id)
        .unwrap()
        .into_iter()
        .find(|step| step.name == "charge")
        .unwrap();
    assert_eq!((charge.seq, charge.state.as_str()), (0, "intent"));

    let runtime = Runtime::builder(journal.clone())
        .register("fanout", 1, fanout)
        .start()
        .await
        .unwrap();
    let output = runtime.handle::<Output>(id).result().await.unwrap();
    assert_eq!(output, (1, 2, Some(true)));
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Completed);

    assert_steps_in_order(
        &journal,
        id,
        &[
            "charge",
            "compute",
            "durably:recv-deadline/approval",
            "durably:recv/approval",
            "durably:sleep/pause",
        ],
    );
    assert_eq!(
        consumption(&journal, id),
        [("approval".to_owned(), Some(3))],
        "the message was not consumed exactly once, by the recv step"
    );
    let lines = ledger_lines(&ledger);
    assert_eq!(lines.len(), 2, "Retry runs the effect once more: {lines:?}");
    assert_eq!(lines[0], lines[1], "Retry changed the idempotency key");
}
