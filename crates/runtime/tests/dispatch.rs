//! A runtime runs the queued executions of the kinds it registered (plan §4.2): each to its
//! recorded end; in priority order, first started first within a priority; never more at
//! once in a queue than the queue's limit across every runtime on the file, nor more in one
//! process than its own limit.
//!
//! Workflows here report to the test through shared counters and hold at a gate the test
//! opens, so "how many run at once" is read while they are all running, with no sleeping.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use durably_journal::{Journal, Status};
use durably_runtime::{
    Client, QueueConfig, Runtime, RuntimeBuilder, StartOptions, WorkflowContext, WorkflowError,
};
use support::Scratch;
use tokio::sync::Semaphore;

/// What the workflows of one test share with it.
#[derive(Default)]
struct Probe {
    /// How many are running now; the test waits on its changes.
    running: tokio::sync::watch::Sender<u32>,
    running_max: AtomicU32,
    order: Mutex<Vec<u32>>,
    gate: Option<Arc<Semaphore>>,
}

/// Registers `held` (input: a tag), which records its tag, counts itself running, waits for
/// a permit of the gate if there is one, and returns its tag.
fn serving(builder: RuntimeBuilder, probe: &Arc<Probe>) -> RuntimeBuilder {
    let probe = Arc::clone(probe);
    builder.register("held", 1, move |_context: WorkflowContext, tag: u32| {
        let probe = Arc::clone(&probe);
        async move {
            probe.order.lock().unwrap().push(tag);
            probe.running.send_modify(|running| {
                *running += 1;
                probe.running_max.fetch_max(*running, Ordering::SeqCst);
            });
            if let Some(gate) = &probe.gate {
                gate.acquire().await.unwrap().forget();
            }
            probe.running.send_modify(|running| *running -= 1);
            Ok::<_, WorkflowError>(tag)
        }
    })
}

fn queue(limit: Option<u32>, process: Option<u32>) -> QueueConfig {
    QueueConfig {
        concurrency_max: limit,
        process_concurrency_max: process,
    }
}

/// A start of a served kind runs at once and its result arrives.
#[tokio::test]
async fn a_started_execution_runs_to_its_end() {
    let scratch = Scratch::new();
    let probe = Arc::new(Probe::default());
    let runtime = serving(Runtime::builder(scratch.journal.clone()), &probe)
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, u32>("held", id, &7_u32, StartOptions::default())
        .await
        .unwrap();
    assert_eq!(handle.result().await.unwrap(), 7);
    assert_eq!(handle.status().unwrap(), Status::Completed);
}

/// Executions queued while nothing serves their kind run, once a runtime serves it, larger
/// priority first and in start order within a priority.
#[tokio::test]
async fn queued_executions_run_by_priority_then_start_order() {
    let scratch = Scratch::new();
    // Configures the queue but serves no kind, so the starts below only queue.
    let probe = Arc::new(Probe::default());
    let _configurer = Runtime::builder(scratch.journal.clone())
        .queue("q", queue(Some(1), None))
        .start()
        .await
        .unwrap();
    let client = Client::new(scratch.journal.clone()).await.unwrap();
    let mut handles = Vec::new();
    for (tag, priority) in [(1, 0), (2, 5), (3, 0), (4, 5)] {
        let options = StartOptions::default()
            .queue("q")
            .priority(priority)
            .allow_unregistered_kind();
        let id = durably_journal::new_execution_id();
        handles.push(
            client
                .start::<_, u32>("held", id, &tag, options)
                .await
                .unwrap(),
        );
    }
    let _runtime = serving(Runtime::builder(scratch.journal.clone()), &probe)
        .queue("q", queue(Some(1), None))
        .start()
        .await
        .unwrap();
    for handle in &handles {
        handle.result().await.unwrap();
    }
    assert_eq!(*probe.order.lock().unwrap(), [2, 4, 1, 3]);
}

/// Two runtimes on one file (two journal instances: two lock holders, as two processes
/// would be) never run more of a queue at once than its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_limit_holds_across_runtimes() {
    let scratch = Scratch::new();
    let gate = Arc::new(Semaphore::new(0));
    let probe = Arc::new(Probe {
        gate: Some(Arc::clone(&gate)),
        ..Probe::default()
    });
    let mut runtimes = Vec::new();
    for _ in 0..2 {
        let journal = scratch.db.open();
        runtimes.push(
            serving(Runtime::builder(journal), &probe)
                .queue("q", queue(Some(3), None))
                .start()
                .await
                .unwrap(),
        );
    }
    let mut handles = Vec::new();
    for tag in 0_u32..8 {
        let id = durably_journal::new_execution_id();
        let options = StartOptions::default().queue("q");
        handles.push(
            runtimes[usize::from(tag % 2 == 1)]
                .start::<_, u32>("held", id, &tag, options)
                .await
                .unwrap(),
        );
    }
    wait_until_running(&probe, 3).await;
    assert_eq!(running_in(&scratch.journal, "q"), 3);
    gate.add_permits(8);
    for handle in &handles {
        handle.result().await.unwrap();
    }
    assert_eq!(probe.running_max.load(Ordering::SeqCst), 3);
}

/// One runtime never runs more of a queue than its own limit for it, with no limit across
/// processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_process_limit_holds() {
    let scratch = Scratch::new();
    let gate = Arc::new(Semaphore::new(0));
    let probe = Arc::new(Probe {
        gate: Some(Arc::clone(&gate)),
        ..Probe::default()
    });
    let runtime = serving(Runtime::builder(scratch.journal.clone()), &probe)
        .queue("q", queue(None, Some(2)))
        .start()
        .await
        .unwrap();
    let mut handles = Vec::new();
    for tag in 0_u32..5 {
        let id = durably_journal::new_execution_id();
        let options = StartOptions::default().queue("q");
        handles.push(
            runtime
                .start::<_, u32>("held", id, &tag, options)
                .await
                .unwrap(),
        );
    }
    wait_until_running(&probe, 2).await;
    gate.add_permits(5);
    for handle in &handles {
        handle.result().await.unwrap();
    }
    assert_eq!(probe.running_max.load(Ordering::SeqCst), 2);
}

/// Waits until `count` workflows are running: each reports itself before it waits at the
/// gate, so this returns once that many have reached it.
async fn wait_until_running(probe: &Probe, count: u32) {
    let mut running = probe.running.subscribe();
    running.wait_for(|running| *running >= count).await.unwrap();
}

/// How many executions of `queue` the journal says are running.
fn running_in(journal: &Journal, queue: &str) -> i64 {
    journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT running FROM queue_load WHERE queue = ?1",
                [queue],
                |row| row.get(0),
            )?)
        })
        .unwrap()
}

/// Each run in a limited queue leaves a `claimed` event and, in the transaction that ends
/// it, a `released` event, in that order: the audit trail a checker recounts the queue's
/// slots from, in commit order. A run of a queue without a limit is claimed without one.
#[tokio::test]
async fn a_run_in_a_limited_queue_is_claimed_then_released_in_the_events() {
    let scratch = Scratch::new();
    let probe = Arc::new(Probe::default());
    let runtime = serving(Runtime::builder(scratch.journal.clone()), &probe)
        .queue("q", queue(Some(2), None))
        .queue("free", queue(None, None))
        .start()
        .await
        .unwrap();
    let mut limited = Vec::new();
    for (tag, name) in [(0_u32, "q"), (1, "q"), (2, "q"), (3, "free")] {
        let id = durably_journal::new_execution_id();
        let options = StartOptions::default().queue(name);
        let handle = runtime
            .start::<_, u32>("held", id, &tag, options)
            .await
            .unwrap();
        handle.result().await.unwrap();
        if name == "q" {
            limited.push(id);
        }
    }
    let events: Vec<(String, String, String)> = scratch
        .journal
        .read(|conn| {
            let mut statement = conn.prepare(
                "SELECT execution_id, kind, detail ->> 'queue' FROM events
                 WHERE kind = 'claimed' OR (kind = 'released' AND detail ->> 'queue' = 'q')
                 ORDER BY id",
            )?;
            let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)));
            Ok(rows?.collect::<Result<Vec<_>, _>>()?)
        })
        .unwrap();
    let expected: Vec<(String, String, String)> = limited
        .iter()
        .flat_map(|id| {
            ["claimed", "released"].map(|kind| (id.to_string(), kind.to_owned(), "q".to_owned()))
        })
        .collect();
    assert_eq!(events, expected);
}
