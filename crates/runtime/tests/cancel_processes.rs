//! Cancellation across processes (plan §4.6, R5): `cancel` from this process reaches an
//! execution that a runtime in another, live process is running. That process stops the run
//! and ends it `cancelled`; a guarded step already in flight finishes first; and no step row
//! is committed after the request (the `cancel_requested` event names the newest step row at
//! its commit, and no row of the execution is newer). If the holder is SIGKILLed with the
//! request pending, the next runtime's recovery cancels the execution instead of running it.
//!
//! With the `failpoints` feature, each new write of cancellation, deadlines, resume and step
//! timeouts is crashed right after its commit (`abort()` at its failpoint), and what survives
//! is checked: the commit stands, and the next process goes on from it.
//!
//! Method: the other process is this test binary run again with `CHILD_ENV` set, which runs
//! only the `child` test in a role: a runtime serving the workflows below until the execution
//! named ends, or one cancel, or one resume. Its workflows print `EVENT <what>` lines the
//! parent reads from the child's stdout, and a step that must hold reads a line from the
//! child's stdin, which the parent writes: every cancel lands at a known point without
//! sleeping.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use durably_journal::{Journal, Policy, Status, StepError};
use durably_runtime::{
    CancelOutcome, Client, Error, ResumeOptions, Runtime, StartOptions, WorkflowContext,
    WorkflowError,
};
use support::request_and_newest_row;
use uuid::Uuid;

/// Set in the child: `<role> <database path> <execution id>`, the role `serve` (until the
/// execution ends), `idle` (serving until killed), `cancel` or `resume`.
const CHILD_ENV: &str = "DURABLY_RUNTIME_CANCEL_CHILD";

/// The most steps `counter` takes: far more than any cancel needs to land in.
const COUNTER_STEPS_MAX: u32 = 100_000;

/// How long a wait for the other process may take before the test fails instead of hanging.
const WAIT_MAX: Duration = Duration::from_mins(1);

fn event(what: &str) {
    println!("EVENT {what}");
}

/// Idempotent steps, one after another, announcing the third.
async fn counter(context: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    for step in 0..COUNTER_STEPS_MAX {
        context
            .idempotent(&format!("count {step}"), |_key| async move {
                Ok::<_, StepError>(step)
            })
            .await?;
        if step == 2 {
            event("counting");
        }
    }
    Ok(COUNTER_STEPS_MAX)
}

/// A pure step, a guarded step that holds until the parent writes a line, and a last step.
async fn charge(context: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    context.pure("quote", || async { Ok(1250_u32) }).await?;
    let _receipt = context
        .guarded("charge", Policy::Fail, |_key| async {
            event("charging");
            let line = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).map(|_| line)
            })
            .await
            .map_err(|error| StepError::fatal(error.to_string()))?
            .map_err(|error| StepError::fatal(error.to_string()))?;
            Ok(line.trim().to_owned())
        })
        .await?;
    context
        .pure("receipt", || async { Ok("sent".to_owned()) })
        .await?;
    Ok("charged".to_owned())
}

/// A pure step that announces itself and never ends.
async fn hang(context: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    context
        .pure("hang", || async {
            event("hanging");
            std::future::pending::<Result<(), StepError>>().await
        })
        .await?;
    Ok(())
}

/// A pure step that never ends, under a short timeout.
async fn slow(context: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    context
        .step("slow")
        .timeout(Duration::from_millis(20))
        .pure(std::future::pending::<Result<(), StepError>>)
        .await?;
    Ok(())
}

fn serving(journal: Journal) -> durably_runtime::RuntimeBuilder {
    Runtime::builder(journal)
        .register("counter", 1, counter)
        .register("charge", 1, charge)
        .register("hang", 1, hang)
        .register("slow", 1, slow)
}

/// The child's side; does nothing when run as an ordinary test.
#[tokio::test]
async fn child() {
    let Some((role, db, id)) = support::child_spec(CHILD_ENV) else {
        return;
    };
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let journal = Journal::open(db).unwrap();
    match role.as_str() {
        "serve" => {
            let runtime = serving(journal).start().await.unwrap();
            let ended = runtime.handle::<serde_json::Value>(id).result().await;
            let cancelled = matches!(ended, Err(Error::Cancelled { .. }));
            event(&format!("ended {cancelled}"));
        }
        "idle" => {
            // Runs until killed, or aborted by a failpoint: a child that ended once it saw the
            // execution end could exit before its own task reached the failpoint.
            let _runtime = serving(journal).start().await.unwrap();
            std::future::pending::<()>().await;
        }
        "cancel" => {
            let client = Client::new(journal).await.unwrap();
            client.cancel(id, "from a child").await.unwrap();
        }
        "resume" => {
            let client = Client::new(journal).await.unwrap();
            client.resume(id, ResumeOptions::default()).await.unwrap();
        }
        other => panic!("unknown child role {other}"),
    }
}

/// The child running a runtime until execution `id` ends, and its standard streams.
struct Holder {
    child: Child,
    stdin: ChildStdin,
    stdout: Option<BufReader<ChildStdout>>,
}

/// The child process running `role` on execution `id`, with `failpoints` when given.
fn child_command(role: &str, db: &std::path::Path, id: Uuid, failpoints: Option<&str>) -> Command {
    let mut command = support::child_command(CHILD_ENV, &format!("{role} {} {id}", db.display()));
    command.env_remove("FAILPOINTS");
    if let Some(failpoints) = failpoints {
        command.env("FAILPOINTS", failpoints);
    }
    command
}

impl Holder {
    fn spawn(db: &std::path::Path, id: Uuid) -> Self {
        Self::spawn_with(db, id, None)
    }

    fn spawn_with(db: &std::path::Path, id: Uuid, failpoints: Option<&str>) -> Self {
        let mut child = child_command("serve", db, id, failpoints)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = Some(BufReader::new(child.stdout.take().unwrap()));
        Self {
            child,
            stdin,
            stdout,
        }
    }

    fn pid(&self) -> i64 {
        i64::from(self.child.id())
    }

    /// Reads the child's output until `EVENT <what>`.
    async fn wait_for(&mut self, what: &str) {
        let mut stdout = self.stdout.take().unwrap();
        let wanted = format!("EVENT {what}");
        let read = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            loop {
                line.clear();
                assert!(
                    stdout.read_line(&mut line).unwrap() > 0,
                    "the child ended before {wanted:?}"
                );
                // The test harness's "test child ... " has no newline of its own.
                if line.trim_end().ends_with(&wanted) {
                    return stdout;
                }
            }
        });
        self.stdout = Some(tokio::time::timeout(WAIT_MAX, read).await.unwrap().unwrap());
    }

    fn wait_success(mut self) {
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the child failed: {status}");
    }
}

/// A journal in a temporary directory, a client on it, and a started execution of `kind`.
async fn started(kind: &str) -> (tempfile::TempDir, Journal, Client, Uuid) {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path().join("journal.db")).unwrap();
    let client = Client::new(journal.clone()).await.unwrap();
    let id = durably_journal::new_execution_id();
    client
        .start::<_, serde_json::Value>(
            kind,
            id,
            &(),
            StartOptions::default().allow_unregistered_kind(),
        )
        .await
        .unwrap();
    (dir, journal, client, id)
}

async fn cancelled_reason(client: &Client, id: Uuid) -> String {
    support::cancelled_reason(&client.handle::<serde_json::Value>(id)).await
}

/// A run in another process stops after the request, and ends cancelled with its reason; no
/// step row is newer than the request.
#[tokio::test]
async fn a_run_in_another_process_ends_cancelled_with_no_step_after_the_request() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let (dir, journal, client, id) = started("counter").await;
    let mut holder = Holder::spawn(&dir.path().join("journal.db"), id);
    holder.wait_for("counting").await;

    let outcome = client.cancel(id, "stop counting").await.unwrap();
    assert_eq!(outcome, CancelOutcome::Requested { pid: holder.pid() });
    assert_eq!(cancelled_reason(&client, id).await, "stop counting");
    holder.wait_for("ended true").await;
    holder.wait_success();

    let (named, newest) = request_and_newest_row(&journal, id);
    assert_eq!(named, newest, "a step row was committed after the request");
    // The third step announced itself; the two before it are durable (an idempotent closure
    // runs only once what came before is), its own result may have been dropped with the run.
    let steps = journal.steps(id).unwrap().len();
    assert!((2..COUNTER_STEPS_MAX as usize).contains(&steps), "{steps}");
    assert!(journal.lock_holders().unwrap().is_empty());
}

/// A guarded step whose closure runs when the request commits records its result; the step
/// after it never runs.
#[tokio::test]
async fn a_guarded_step_in_flight_finishes_before_the_run_stops() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let (dir, journal, client, id) = started("charge").await;
    let mut holder = Holder::spawn(&dir.path().join("journal.db"), id);
    holder.wait_for("charging").await;

    let outcome = client.cancel(id, "customer left").await.unwrap();
    assert_eq!(outcome, CancelOutcome::Requested { pid: holder.pid() });
    writeln!(holder.stdin, "receipt 42").unwrap();
    assert_eq!(cancelled_reason(&client, id).await, "customer left");
    holder.wait_for("ended true").await;
    holder.wait_success();

    let steps = journal.steps(id).unwrap();
    let names: Vec<_> = steps.iter().map(|step| step.name.as_str()).collect();
    assert_eq!(names, ["quote", "charge"], "receipt never ran");
    assert_eq!(
        steps[1].result.as_ref().unwrap().as_json(),
        "\"receipt 42\""
    );
    let (named, newest) = request_and_newest_row(&journal, id);
    assert_eq!(named, newest, "the guarded result updated its intent's row");
}

/// A holder SIGKILLed with a request pending leaves a running execution with no live holder;
/// the next runtime's recovery cancels it with the request's reason instead of running it.
#[tokio::test]
async fn a_holder_killed_with_a_request_pending_is_cancelled_by_recovery() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let (dir, journal, client, id) = started("hang").await;
    let mut holder = Holder::spawn(&dir.path().join("journal.db"), id);
    holder.wait_for("hanging").await;
    let outcome = client.cancel(id, "operator gave up").await.unwrap();
    assert_eq!(outcome, CancelOutcome::Requested { pid: holder.pid() });
    holder.child.kill().unwrap();
    holder.child.wait().unwrap();
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Running);

    let runtime = serving(journal.clone()).start().await.unwrap();
    assert_eq!(runtime.recovery_report().requeued, 0);
    assert_eq!(cancelled_reason(&client, id).await, "operator gave up");
    let cancelled = journal
        .events(id)
        .unwrap()
        .into_iter()
        .find(|event| event.kind == "cancelled")
        .unwrap();
    assert_eq!(cancelled.detail.to_value().unwrap()["was"], "interrupted");
}

/// Crashes right after each new commit of cancellation, deadlines, resume and step timeouts:
/// the commit stands, and the next process goes on from it.
#[cfg(feature = "failpoints")]
mod crashes {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    /// The signal `abort()` raises.
    const SIGABRT: i32 = 6;

    /// Runs the child `role` with `failpoint` armed, and checks that it aborted there (within
    /// [`WAIT_MAX`]; an `idle` child that never reaches it is killed and the test fails).
    async fn run_aborting(role: &str, db: &std::path::Path, id: Uuid, failpoint: &str) {
        let mut child = child_command(role, db, id, Some(&format!("{failpoint}=return")))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let waited = tokio::time::timeout(WAIT_MAX, async {
            // Polls for the exit: std's `Child` has no asynchronous wait.
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let Ok(status) = waited else {
            child.kill().unwrap();
            panic!("{failpoint} was never reached");
        };
        assert_eq!(status.signal(), Some(SIGABRT), "{failpoint}: {status}");
    }

    fn path(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("journal.db")
    }

    /// `journal::after-cancel-request-commit`: the request stands; the live holder sees it and
    /// ends the run cancelled with no step after it.
    #[tokio::test]
    async fn a_request_stands_after_a_crash_right_after_it() {
        if std::env::var(CHILD_ENV).is_ok() {
            return;
        }
        let (dir, journal, client, id) = started("counter").await;
        let mut holder = Holder::spawn(&path(&dir), id);
        holder.wait_for("counting").await;
        run_aborting(
            "cancel",
            &path(&dir),
            id,
            "journal::after-cancel-request-commit",
        )
        .await;
        assert_eq!(cancelled_reason(&client, id).await, "from a child");
        holder.wait_for("ended true").await;
        holder.wait_success();
        let (named, newest) = request_and_newest_row(&journal, id);
        assert_eq!(named, newest);
    }

    /// `journal::after-cancel-commit`: a queued execution cancelled at once stays cancelled.
    #[tokio::test]
    async fn a_cancel_stands_after_a_crash_right_after_it() {
        if std::env::var(CHILD_ENV).is_ok() {
            return;
        }
        let (dir, _journal, client, id) = started("elsewhere").await;
        run_aborting("cancel", &path(&dir), id, "journal::after-cancel-commit").await;
        assert_eq!(cancelled_reason(&client, id).await, "from a child");
    }

    /// `runtime::after-cancel-observed`: a holder that dies as it observes the request, before
    /// `finish_cancelled`, leaves the request pending; recovery cancels the execution.
    #[tokio::test]
    async fn a_holder_dying_as_it_observes_a_request_is_cancelled_by_recovery() {
        if std::env::var(CHILD_ENV).is_ok() {
            return;
        }
        let (dir, journal, client, id) = started("counter").await;
        let failpoint = "runtime::after-cancel-observed=return";
        let mut holder = Holder::spawn_with(&path(&dir), id, Some(failpoint));
        holder.wait_for("counting").await;
        client.cancel(id, "stop counting").await.unwrap();
        let status = holder.child.wait().unwrap();
        assert_eq!(status.signal(), Some(SIGABRT), "{status}");

        let _runtime = serving(journal.clone()).start().await.unwrap();
        assert_eq!(cancelled_reason(&client, id).await, "stop counting");
        let (named, newest) = request_and_newest_row(&journal, id);
        assert_eq!(named, newest);
    }

    /// `runtime::after-deadline-commit`: a deadline's cancel stands.
    #[tokio::test]
    async fn a_deadline_cancel_stands_after_a_crash_right_after_it() {
        if std::env::var(CHILD_ENV).is_ok() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(path(&dir)).unwrap();
        let client = Client::new(journal.clone()).await.unwrap();
        let id = durably_journal::new_execution_id();
        let soon = durably_runtime::Deadline::In(Duration::from_millis(50));
        let options = StartOptions::default()
            .allow_unregistered_kind()
            .deadline(soon);
        client
            .start::<_, serde_json::Value>("elsewhere", id, &(), options)
            .await
            .unwrap();
        run_aborting("idle", &path(&dir), id, "runtime::after-deadline-commit").await;
        assert_eq!(cancelled_reason(&client, id).await, "timeout");
    }

    /// `runtime::after-step-timeout-commit`: a step timeout's failure stands, resumable.
    #[tokio::test]
    async fn a_step_timeout_failure_stands_after_a_crash_right_after_it() {
        if std::env::var(CHILD_ENV).is_ok() {
            return;
        }
        let (dir, journal, client, id) = started("slow").await;
        run_aborting(
            "idle",
            &path(&dir),
            id,
            "runtime::after-step-timeout-commit",
        )
        .await;
        let record = journal.get(id).unwrap().unwrap();
        assert_eq!(record.status, Status::Failed);
        assert_eq!(record.status_detail.unwrap()["reason"], "step_timeout");
        client.resume(id, ResumeOptions::default()).await.unwrap();
        assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Queued);
    }

    /// `runtime::after-resume-commit`: a resume stands; the execution is queued again.
    #[tokio::test]
    async fn a_resume_stands_after_a_crash_right_after_it() {
        if std::env::var(CHILD_ENV).is_ok() {
            return;
        }
        let (dir, journal, client, id) = started("elsewhere").await;
        client.cancel(id, "for now").await.unwrap();
        run_aborting("resume", &path(&dir), id, "runtime::after-resume-commit").await;
        let record = journal.get(id).unwrap().unwrap();
        assert_eq!((record.status, record.error), (Status::Queued, None));
    }
}
