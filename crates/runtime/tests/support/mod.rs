//! Fixtures shared by the runtime's integration tests: scratch journals on the testkit's
//! database, on the backend `DURABLY_TEST_BACKEND` names.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::time::Duration;

use durably_db::Value;
use durably_journal::{Execution, Journal, Opened};
use durably_runtime::{Error, WorkflowHandle};
use durably_testkit::TestDb;
use uuid::Uuid;

/// The payload cap of the scratch journals, in bytes of JSON.
pub const PAYLOAD_BYTES_MAX: usize = 4096;

/// A journal on a scratch database of its own, with a payload cap of [`PAYLOAD_BYTES_MAX`].
pub struct Scratch {
    /// Declared before `db`, so it is dropped first: a PostgreSQL schema is dropped only once
    /// no session of the journal works in it.
    pub journal: Journal,
    /// Where the journal lives: more journals open it with `scratch.db.open()`, child processes
    /// with `Journal::open(scratch.db.target())`.
    pub db: TestDb,
}

impl Scratch {
    pub fn new() -> Self {
        let db = TestDb::new();
        let journal = db
            .builder()
            .payload_bytes_max(PAYLOAD_BYTES_MAX)
            .open()
            .unwrap();
        Self { journal, db }
    }

    pub async fn runtime_execution(&self) -> (Uuid, Execution) {
        runtime_execution(&self.journal).await
    }

    pub fn snapshot(&self) -> Vec<(String, Vec<Vec<Value<'static>>>)> {
        snapshot(&self.journal)
    }

    pub async fn refused<T: std::fmt::Debug>(
        &self,
        call: impl Future<Output = durably_runtime::Result<T>>,
        expected: impl FnOnce(&Error) -> bool,
    ) -> Error {
        refused(&self.journal, call, expected).await
    }
}

/// A running execution with the `runtime_executions` row that starting it through the runtime
/// writes, inserted with SQL: a stand-in for a started execution that needs no dispatcher.
pub async fn runtime_execution(journal: &Journal) -> (Uuid, Execution) {
    let id = durably_journal::new_execution_id();
    let Opened::Running(execution) = journal
        .open_execution(id, "approval", "", &())
        .await
        .unwrap()
    else {
        unreachable!("a new execution is never finished");
    };
    journal
        .write(move |conn| {
            conn.execute(
                "INSERT INTO runtime_executions (execution_id, version) VALUES (?1, 1)",
                [id.to_string()],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    (id, execution)
}

/// The names of the journal's tables, in order, on either backend.
const TABLES: durably_db::Sql = durably_db::Sql {
    sqlite: "SELECT name FROM sqlite_schema WHERE type = 'table' \
             AND name NOT LIKE 'sqlite_%' ORDER BY name",
    postgres: "SELECT table_name FROM information_schema.tables \
               WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
               ORDER BY table_name",
};

/// Every row of every table, in a stable order.
pub fn snapshot(journal: &Journal) -> Vec<(String, Vec<Vec<Value<'static>>>)> {
    journal
        .read(|conn| {
            let tables: Vec<String> = conn
                .prepare(conn.pick(&TABLES))?
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            let mut all = Vec::new();
            for table in tables {
                let mut statement = conn.prepare(&format!("SELECT * FROM \"{table}\""))?;
                let columns = statement.column_count();
                let mut rows: Vec<Vec<Value<'static>>> = statement
                    .query_map([], |row| (0..columns).map(|i| row.get(i)).collect())?
                    .collect::<Result<_, _>>()?;
                rows.sort_by_key(|row| format!("{row:?}"));
                all.push((table, rows));
            }
            Ok(all)
        })
        .unwrap()
}

/// Runs `call`, asserts that it failed as `expected` says, that the failure is not
/// retryable, and that the journal is as it was before.
pub async fn refused<T: std::fmt::Debug>(
    journal: &Journal,
    call: impl Future<Output = durably_runtime::Result<T>>,
    expected: impl FnOnce(&Error) -> bool,
) -> Error {
    let before = snapshot(journal);
    let error = call.await.expect_err("the call must be refused");
    assert!(expected(&error), "unexpected error: {error:?}");
    assert!(
        !error.is_retryable(),
        "{error:?} is input, not a transient condition"
    );
    assert_eq!(
        snapshot(journal),
        before,
        "a refused call changed the journal"
    );
    error
}

/// The newest step row the `cancel_requested` event of `id` names (`last_step_id`), and the
/// newest step row of `id` now: equal when no step row was committed after the request.
pub fn request_and_newest_row(journal: &Journal, id: Uuid) -> (Option<i64>, Option<i64>) {
    let requested = journal
        .events(id)
        .unwrap()
        .into_iter()
        .find(|event| event.kind == "cancel_requested")
        .expect("a cancel_requested event");
    let named = requested.detail.to_value().unwrap()["last_step_id"].as_i64();
    let newest = journal
        .read(|conn| durably_journal::lifecycle::newest_step_row(conn, id))
        .unwrap();
    (named, newest)
}

/// Waits (at most a minute, so a broken test fails instead of hanging) until the execution
/// ends, which must be cancelled, and returns the reason.
pub async fn cancelled_reason<O: serde::de::DeserializeOwned + std::fmt::Debug>(
    handle: &WorkflowHandle<O>,
) -> String {
    let result = tokio::time::timeout(Duration::from_mins(1), handle.result())
        .await
        .expect("the execution ends");
    match result {
        Err(Error::Cancelled { reason, .. }) => reason,
        other => panic!("expected a cancellation, got {other:?}"),
    }
}

/// A journal on a [`TestClock`] the test moves, on a scratch database of its own, with a
/// payload cap of [`PAYLOAD_BYTES_MAX`].
pub struct Clocked {
    pub clock: std::sync::Arc<durably_runtime::testing::TestClock>,
    /// Declared before `db`, which is dropped after it (as [`Scratch`]'s).
    pub journal: Journal,
    pub db: TestDb,
}

impl Clocked {
    pub fn new() -> Self {
        let db = TestDb::new();
        let clock = std::sync::Arc::new(durably_runtime::testing::TestClock::default());
        let journal = db
            .builder()
            .payload_bytes_max(PAYLOAD_BYTES_MAX)
            .clock(clock.clone())
            .open()
            .unwrap();
        Self { clock, journal, db }
    }

    /// A runtime builder on this journal and its clock.
    pub fn runtime(&self) -> durably_runtime::RuntimeBuilder {
        durably_runtime::Runtime::builder(self.journal.clone()).clock(self.clock.clone())
    }

    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        durably_lock::Clock::now(self.clock.as_ref())
    }
}

/// The longest a test waits for the runtime to reach a state on its own.
const REACH_POLLS_MAX: u32 = 3000;

/// Polls until `reached` holds of the journal; the runtime gets there on its own, through
/// commits the test cannot wait on one by one. Panics naming `what` after about 30 s.
pub async fn wait_until(journal: &Journal, what: &str, mut reached: impl FnMut(&Journal) -> bool) {
    for _ in 0..REACH_POLLS_MAX {
        if reached(journal) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never reached: {what}");
}

/// Waits until execution `id` has `status`.
pub async fn wait_for_status(journal: &Journal, id: Uuid, status: durably_journal::Status) {
    wait_until(journal, &format!("execution {id} {status}"), |journal| {
        journal
            .get(id)
            .unwrap()
            .is_some_and(|record| record.status == status)
    })
    .await;
}

/// Waits until execution `id` has recorded `steps` steps.
pub async fn wait_for_steps(journal: &Journal, id: Uuid, steps: usize) {
    wait_until(journal, &format!("{steps} steps of {id}"), |journal| {
        journal.steps(id).unwrap().len() >= steps
    })
    .await;
}

/// The step names of execution `id`, in seq order.
pub fn step_names(journal: &Journal, id: Uuid) -> Vec<String> {
    journal
        .steps(id)
        .unwrap()
        .into_iter()
        .map(|step| step.name)
        .collect()
}

/// The kinds of the audit events of execution `id`, in order.
pub fn event_kinds(journal: &Journal, id: Uuid) -> Vec<String> {
    journal
        .events(id)
        .unwrap()
        .into_iter()
        .map(|event| event.kind)
        .collect()
}

/// Whether any lock is held on execution `id`.
pub fn locked(journal: &Journal, id: Uuid) -> bool {
    journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FROM locks WHERE resource = ?1 AND instance_id IS NOT NULL",
                [id.to_string()],
                |row| row.get::<_, i64>(0),
            )?)
        })
        .unwrap()
        > 0
}

/// A workflow that waits for a person: publishes `status` "awaiting approval", receives one
/// answer on topic `approval` within `minutes` (steps 1 and 2: the deadline, the receive),
/// publishes "decided", and returns the answer.
pub async fn approval(
    context: durably_runtime::WorkflowContext,
    minutes: u64,
) -> Result<Option<bool>, durably_runtime::WorkflowError> {
    context.set_event("status", &"awaiting approval").await?;
    let answer = context
        .recv::<bool>("approval", std::time::Duration::from_secs(minutes * 60))
        .await?;
    context.set_event("status", &"decided").await?;
    Ok(answer)
}

/// Receives one message on topic `t`, waiting up to an hour: a workflow that parks at once on a
/// runtime with `park_after` zero.
pub async fn receiver(
    context: durably_runtime::WorkflowContext,
    (): (),
) -> Result<Option<String>, durably_runtime::WorkflowError> {
    Ok(context
        .recv("t", std::time::Duration::from_hours(1))
        .await?)
}

/// A week, in minutes: an approval's usual timeout, long enough to park.
pub const WEEK_MINUTES: u64 = 7 * 24 * 60;

/// Starts execution of `kind` with `input` through a plain client, which no runtime serves
/// yet: it stays queued until one does.
pub async fn start_queued<I: serde::Serialize + 'static>(
    journal: &Journal,
    kind: &str,
    input: &I,
) -> (durably_runtime::Client, Uuid) {
    let client = durably_runtime::Client::new(journal.clone()).await.unwrap();
    let id = durably_journal::new_execution_id();
    let options = durably_runtime::StartOptions::default().allow_unregistered_kind();
    client
        .start::<_, serde_json::Value>(kind, id, input, options)
        .await
        .unwrap();
    (client, id)
}

/// Each message sent to execution `id`, in arrival order: its topic, and the seq of the recv
/// step that consumed it.
pub fn consumption(journal: &Journal, id: Uuid) -> Vec<(String, Option<u32>)> {
    journal
        .read(|conn| {
            let mut statement = conn.prepare(
                "SELECT topic, consumed_seq FROM messages WHERE execution_id = ?1 ORDER BY id",
            )?;
            let rows = statement
                .query_map([id.to_string()], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .unwrap()
}

/// This test binary run again as a child process running only its test named `child`, with
/// `env` set to `spec` (the role and what it works on).
pub fn child_command(env: &str, spec: &str) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "child", "--nocapture", "--test-threads", "1"])
        .env(env, spec);
    command
}

/// [`child_command`] for `role` on the journal at `db` and execution `id`, which
/// [`child_spec`] reads back in the child.
pub fn role_command(
    env: &str,
    role: &str,
    db: &std::path::Path,
    id: Uuid,
) -> std::process::Command {
    child_command(env, &format!("{role} {} {id}", db.display()))
}

/// Kills `child` with SIGKILL and reaps it.
pub fn kill(mut child: std::process::Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// In a child started with [`child_command`]: the role, the database path and the execution id
/// in `env`, or `None` when this is not such a child.
pub fn child_spec(env: &str) -> Option<(String, String, Uuid)> {
    let spec = std::env::var(env).ok()?;
    let mut words = spec.splitn(3, ' ');
    let (role, db, id) = (
        words.next().unwrap(),
        words.next().unwrap(),
        words.next().unwrap(),
    );
    Some((role.to_owned(), db.to_owned(), id.parse().unwrap()))
}

/// Sends `true` on topic `approval` to execution `id`, with idempotency key `click-1`, from a
/// new client on `journal`, and checks that it was stored.
pub async fn send_approval(journal: Journal, id: Uuid) {
    let client = durably_runtime::Client::new(journal).await.unwrap();
    let sent = client
        .send(id, "approval", &true, Some("click-1"))
        .await
        .unwrap();
    assert!(
        matches!(sent, durably_runtime::SendOutcome::Sent { .. }),
        "{sent:?}"
    );
}

/// Asserts that execution `id` recorded exactly the steps `names`, numbered 0, 1, ... in that
/// order (call order, for steps run in parallel).
pub fn assert_steps_in_order(journal: &Journal, id: Uuid, names: &[&str]) {
    let recorded: Vec<(u32, String)> = journal
        .steps(id)
        .unwrap()
        .into_iter()
        .map(|step| (step.seq, step.name))
        .collect();
    let expected: Vec<(u32, String)> = (0..)
        .zip(names.iter().map(|name| (*name).to_owned()))
        .collect();
    assert_eq!(recorded, expected, "the steps are not in call order");
}
