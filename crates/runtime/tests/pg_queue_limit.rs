//! A queue's limit holds across hosts on PostgreSQL: two journals on one schema stand for two
//! hosts, each with a runtime serving a queue limited to 3. Of 20 executions started through
//! both, never more than 3 run at once, and every one runs exactly once.
//!
//! Method: the workflows report to the test through shared counters and hold at a gate the
//! test opens; the test waits for 3 to run, checks that the journal counts 3 running, then
//! opens the gate for all and awaits every result. The claims of the two runtimes race on the
//! queue's row lock and on `SKIP LOCKED` candidates; the counters see any overrun.
//! Needs `DURABLY_POSTGRES_URL` (`eval "$(.ci/pg start)"`); fails without it.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durably_journal::Journal;
use durably_runtime::{QueueConfig, Runtime, StartOptions, WorkflowContext, WorkflowError};
use durably_testkit::{Backend, TestDb};
use tokio::sync::Semaphore;

/// Executions started, and the queue's limit across hosts.
const EXECUTIONS: u32 = 20;
const LIMIT: u32 = 3;

/// What the workflows share with the test.
struct Probe {
    running: tokio::sync::watch::Sender<u32>,
    running_max: AtomicU32,
    /// The tag of every run, in run order.
    runs: Mutex<Vec<u32>>,
    gate: Arc<Semaphore>,
}

/// A runtime on a journal of its own (a host) serving `held` in queue `q` limited to
/// [`LIMIT`]: `held` records its tag, counts itself running, waits for a permit, returns.
async fn host(db: &TestDb, probe: &Arc<Probe>) -> Runtime {
    let journal = Journal::open(db.target()).unwrap();
    let probe = Arc::clone(probe);
    Runtime::builder(journal)
        .queue(
            "q",
            QueueConfig {
                concurrency_max: Some(LIMIT),
                process_concurrency_max: None,
            },
        )
        .register("held", 1, move |_context: WorkflowContext, tag: u32| {
            let probe = Arc::clone(&probe);
            async move {
                probe.runs.lock().unwrap().push(tag);
                probe.running.send_modify(|running| {
                    *running += 1;
                    probe.running_max.fetch_max(*running, Ordering::SeqCst);
                });
                probe.gate.acquire().await.unwrap().forget();
                probe.running.send_modify(|running| *running -= 1);
                Ok::<_, WorkflowError>(tag)
            }
        })
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_limit_holds_across_two_hosts_and_each_execution_runs_once() {
    let db = TestDb::on(Backend::Postgres);
    let probe = Arc::new(Probe {
        running: tokio::sync::watch::Sender::new(0),
        running_max: AtomicU32::new(0),
        runs: Mutex::new(Vec::new()),
        gate: Arc::new(Semaphore::new(0)),
    });
    let hosts = [host(&db, &probe).await, host(&db, &probe).await];

    let mut handles = Vec::new();
    for tag in 0..EXECUTIONS {
        let id = durably_journal::new_execution_id();
        let host = &hosts[usize::from(tag % 2 == 1)];
        let options = StartOptions::default().queue("q");
        handles.push(
            host.start::<_, u32>("held", id, &tag, options)
                .await
                .unwrap(),
        );
    }

    let mut running = probe.running.subscribe();
    tokio::time::timeout(Duration::from_secs(30), running.wait_for(|n| *n >= LIMIT))
        .await
        .expect("3 executions run within 30 s")
        .unwrap();
    let counted: i64 = hosts[0]
        .journal()
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FROM executions WHERE queue = 'q' AND status = 'running'",
                [],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(
        counted,
        i64::from(LIMIT),
        "the journal counts the limit running"
    );

    probe.gate.add_permits(EXECUTIONS as usize);
    for (tag, handle) in (0..EXECUTIONS).zip(&handles) {
        let result = tokio::time::timeout(Duration::from_secs(60), handle.result())
            .await
            .expect("every execution ends within 60 s")
            .unwrap();
        assert_eq!(result, tag);
    }
    assert_eq!(
        probe.running_max.load(Ordering::SeqCst),
        LIMIT,
        "never more than the limit at once, across both hosts"
    );
    let mut runs = probe.runs.lock().unwrap().clone();
    runs.sort_unstable();
    assert_eq!(
        runs,
        (0..EXECUTIONS).collect::<Vec<_>>(),
        "each ran exactly once"
    );
    for host in &hosts {
        host.drain().await;
    }
}
