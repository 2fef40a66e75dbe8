//! A journal with real runtime rows for the CLI's tests: a runtime of this test process serves
//! four kinds (`approval`, held at a gate the test opens; `inbox`, which publishes events and
//! parks to receive messages; `sleeper`, parked on a week's timer; and `oversized`, whose
//! every run fails without recording a step), and a kind nobody serves (`report`, in queue `reports`) is registered by a runtime
//! that has stopped, so its executions stay queued; [`add_runtime_rows`] adds a parent
//! waiting for such a child.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

use durably::runtime::{QueueConfig, Runtime, WorkflowContext, WorkflowError};
use durably::{ExecutionRecord, Journal, Status};
use rusqlite::types::Value;
use tokio::sync::Semaphore;
use uuid::Uuid;

/// The payload cap of the test's journal: `oversized` returns more than this from a step.
pub const PAYLOAD_BYTES_MAX: usize = 4096;

/// The kind a runtime of this process serves, held until [`RuntimeJournal::open_gate`].
pub const SERVED: &str = "approval";

/// The kind registered by a stopped runtime: nobody claims its executions.
pub const UNSERVED: &str = "report";

/// How long an `inbox` waits for each message.
pub const RECEIVE_TIMEOUT: Duration = Duration::from_hours(24 * 7);

/// The queue of [`UNSERVED`] executions, limit 2.
pub const QUEUE: &str = "reports";

/// A journal with a runtime serving [`SERVED`] and `oversized`.
pub struct RuntimeJournal {
    /// Keeps the files of a journal made for the test.
    pub dir: Option<tempfile::TempDir>,
    /// The database.
    pub db: PathBuf,
    /// Runs the runtime; dropped last.
    pub tokio: tokio::runtime::Runtime,
    /// The journal the runtime writes with.
    pub journal: Journal,
    /// The runtime; `None` once stopped.
    pub runtime: Option<Runtime>,
    gate: Arc<Semaphore>,
}

/// `approval`: fails when its input says `{"refuse": true}`, else waits for a permit of the
/// gate and returns its input.
async fn approval(
    gate: Arc<Semaphore>,
    input: serde_json::Value,
) -> Result<serde_json::Value, WorkflowError> {
    if input["refuse"] == true {
        return Err(WorkflowError::new("refused by the test"));
    }
    gate.acquire().await.unwrap().forget();
    Ok(input)
}

/// `inbox`: sets event `status` (step 0), receives one message on topic `approval` (steps 1
/// and 2), sets event `progress` to it (step 3), then receives on topic `never` (steps 4 and
/// 5), which nobody sends to. Each receive parks the execution until its message arrives.
async fn inbox(context: WorkflowContext, (): ()) -> Result<(), WorkflowError> {
    context.set_event("status", &"awaiting approval ✓").await?;
    let approval: Option<serde_json::Value> = context.recv("approval", RECEIVE_TIMEOUT).await?;
    context.set_event("progress", &approval).await?;
    let _: Option<serde_json::Value> = context.recv("never", RECEIVE_TIMEOUT).await?;
    Ok(())
}

impl RuntimeJournal {
    /// A new journal, with the runtimes started.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("journal.db");
        Self::at(db, Some(dir))
    }

    /// The journal at `db` (made if missing), with the runtimes started.
    pub fn at(db: PathBuf, dir: Option<tempfile::TempDir>) -> Self {
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let gate = Arc::new(Semaphore::new(0));
        let (journal, runtime) = tokio.block_on(async {
            let journal = Journal::builder(&db)
                .payload_bytes_max(PAYLOAD_BYTES_MAX)
                .open()
                .unwrap();
            let stopped = Runtime::builder(journal.clone())
                .register(UNSERVED, 1, |_context: WorkflowContext, (): ()| async {
                    Ok::<_, WorkflowError>(())
                })
                .queue(
                    QUEUE,
                    QueueConfig {
                        concurrency_max: Some(2),
                        process_concurrency_max: None,
                    },
                )
                .start()
                .await
                .unwrap();
            stopped.shutdown();
            drop(stopped);
            let held = Arc::clone(&gate);
            let runtime = Runtime::builder(journal.clone())
                .register(SERVED, 1, move |_context: WorkflowContext, input| {
                    approval(Arc::clone(&held), input)
                })
                .register(
                    "oversized",
                    1,
                    |context: WorkflowContext, (): ()| async move {
                        let text: String = context
                            .pure("too big", || async { Ok("x".repeat(PAYLOAD_BYTES_MAX)) })
                            .await?;
                        Ok::<_, WorkflowError>(text)
                    },
                )
                .register("inbox", 1, inbox)
                .register(
                    "sleeper",
                    1,
                    |context: WorkflowContext, (): ()| async move {
                        context.sleep("nap", RECEIVE_TIMEOUT).await?;
                        Ok::<_, WorkflowError>(())
                    },
                )
                .park_after(Duration::ZERO)
                .resume_failures_max(3)
                .start()
                .await
                .unwrap();
            (journal, runtime)
        });
        Self {
            dir,
            db,
            tokio,
            journal,
            runtime: Some(runtime),
            gate,
        }
    }

    /// The database path as an argument.
    pub fn db_arg(&self) -> &str {
        self.db.to_str().unwrap()
    }

    /// Lets one held `approval` finish.
    pub fn open_gate(&self) {
        self.gate.add_permits(1);
    }

    /// Stops the runtime from claiming anything more.
    pub fn stop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown();
        }
    }

    /// Runs `durably --db DB ARGS`, and fails the test if it runs past a minute.
    pub fn durably(&self, args: &[&str]) -> Output {
        let mut all = vec!["--db", self.db_arg()];
        all.extend(args);
        crate::common::durably_within(&all, Duration::from_mins(1))
    }

    /// `durably --json start KIND JSON ARGS`: the started execution's id.
    pub fn start(&self, kind: &str, input: &str, args: &[&str]) -> Uuid {
        let mut all = vec!["--json", "start", kind, input];
        all.extend(args);
        let output = self.durably(&all);
        crate::common::assert_code(&output, 0);
        let started = crate::common::json(&output);
        started["execution_id"].as_str().unwrap().parse().unwrap()
    }

    /// The status of `id`, read by the library.
    pub fn status(&self, id: Uuid) -> Status {
        self.journal.get(id).unwrap().unwrap().status
    }

    /// Waits until `id` has `status`: the runtime gets there through commits of its own that
    /// the test cannot await one by one, so this reads until it sees it, for at most a minute.
    pub fn wait_for(&self, id: Uuid, status: Status) {
        self.wait_until(id, &format!("{status}"), |record| record.status == status);
    }

    /// Waits until `id` is parked waiting for a message on `topic`, as [`Self::wait_for`].
    pub fn wait_for_topic(&self, id: Uuid, topic: &str) {
        self.wait_until(id, &format!("waiting on {topic}"), |record| {
            record.status == Status::Waiting && record.wait_topic.as_deref() == Some(topic)
        });
    }

    fn wait_until(&self, id: Uuid, what: &str, done: impl Fn(&ExecutionRecord) -> bool) {
        let deadline = Instant::now() + Duration::from_mins(1);
        loop {
            let record = self.journal.get(id).unwrap().unwrap();
            if done(&record) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{id} is {}, never {what}",
                record.status
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Writes with plain SQL in the journal's transaction: for a state that no API of the
    /// runtime makes yet (a cancel request).
    pub fn stand_in(&self, sql: &str, id: Uuid) {
        let (sql, id) = (sql.to_owned(), id.to_string());
        self.tokio
            .block_on(self.journal.write(move |conn| {
                assert_eq!(conn.execute(&sql, [id])?, 1, "{sql}");
                Ok(())
            }))
            .unwrap();
    }

    /// A new `inbox`, once it is parked waiting for a message on topic `approval`, with its
    /// event `status` set.
    pub fn parked(&self) -> Uuid {
        let id = self.start("inbox", "null", &[]);
        self.wait_for_topic(id, "approval");
        id
    }

    /// Sends `message` on `topic` to `id` with `durably send`.
    pub fn send(&self, id: Uuid, topic: &str, message: &str) {
        let output = self.durably(&["send", &id.to_string(), topic, message]);
        crate::common::assert_code(&output, 0);
    }

    /// A new `inbox` that has consumed `message` (set as its event `progress`) and is parked
    /// on topic `never`, with `pending` more messages on topic `approval` that it will never
    /// consume: three messages, one consumed by step 2, and two workflow events.
    pub fn inbox_with_messages(&self, message: &str, pending: &[&str]) -> Uuid {
        let id = self.parked();
        self.send(id, "approval", message);
        self.wait_for_topic(id, "never");
        for message in pending {
            self.send(id, "approval", message);
        }
        id
    }

    /// A new execution of `oversized`, once the runtime has parked it `stuck`.
    pub fn stuck(&self) -> Uuid {
        let id = self.start("oversized", "null", &[]);
        self.wait_for(id, Status::Stuck);
        id
    }

    /// Every row of every table and every schema object, to show that a command changed
    /// nothing.
    pub fn dump(&self) -> Vec<(String, Vec<Vec<Value>>)> {
        dump(&self.db)
    }
}

impl Drop for RuntimeJournal {
    fn drop(&mut self) {
        self.stop();
        // Lets the held workflows end, so the runtime's tasks stop with it.
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }
}

/// Every row of every table of `db`, and its schema, in a stable order.
pub fn dump(db: &Path) -> Vec<(String, Vec<Vec<Value>>)> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut all = Vec::new();
    for table in tables {
        let mut statement = conn.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let columns = statement.column_count();
        let mut rows: Vec<Vec<Value>> = statement
            .query_map([], |row| (0..columns).map(|i| row.get(i)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        rows.sort_by_key(|row| format!("{row:?}"));
        all.push((table, rows));
    }
    let mut schema = conn
        .prepare("SELECT type, name, sql FROM sqlite_schema")
        .unwrap();
    let mut objects: Vec<Vec<Value>> = schema
        .query_map([], |row| (0..3).map(|i| row.get(i)).collect())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    objects.sort_by_key(|object| format!("{object:?}"));
    all.push(("sqlite_schema".to_owned(), objects));
    all
}

/// Adds to the journal at `db` one runtime execution in each parked state (queued in a queue
/// at two priorities, waiting for a message, stuck after a crash loop), with messages (one
/// consumed) and workflow events, and stops its runtime: rows for the query docs.
pub fn add_runtime_rows(db: &Path) {
    let mut journal = RuntimeJournal::at(db.to_owned(), None);
    journal.start(UNSERVED, "null", &["--queue", QUEUE]);
    journal.start(UNSERVED, "null", &["--queue", QUEUE, "--priority", "5"]);
    journal.inbox_with_messages(r#"{"approved": true}"#, &[r#"{"approved": false}"#]);
    journal.parked();
    journal.stuck();
    journal.stop();
    journal.parent_with_a_child();
}

impl RuntimeJournal {
    /// A `parent` execution, run by a runtime of its own, that starts an [`UNSERVED`] child
    /// and parks awaiting it; then that runtime stops.
    pub fn parent_with_a_child(&self) -> Uuid {
        let id = durably::new_execution_id();
        let parents = self.tokio.block_on(async {
            let parents = Runtime::builder(self.journal.clone())
                .register("parent", 1, |context: WorkflowContext, (): ()| async move {
                    context.child::<(), ()>(UNSERVED, &()).await?;
                    Ok::<_, WorkflowError>(())
                })
                .park_after(Duration::ZERO)
                .start()
                .await
                .unwrap();
            parents
                .start::<(), ()>("parent", id, &(), durably::runtime::StartOptions::default())
                .await
                .unwrap();
            parents
        });
        self.wait_for(id, Status::Waiting);
        parents.shutdown();
        id
    }
}
