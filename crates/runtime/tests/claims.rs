//! How a runtime claims queued executions (plan §4.1, §4.2): a run's end claims its successor
//! in its own commit, so a place given up is taken again with no commit or pass between; the
//! places of a process serving several queues turn over between them in turn; and executions
//! of the kinds a process serves are claimed however many executions of other kinds wait
//! ahead of them.
//!
//! Method: runtimes limited to one execution at a time run workflows that record their tag;
//! the first holds at a gate until the others are queued behind it, so the order they then run
//! in and the commits they cost are read with no sleeping. Executions of a kind nobody serves
//! are started through a [`Client`].
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use durably_runtime::{
    Client, QueueConfig, Runtime, RuntimeBuilder, StartOptions, WorkflowContext, WorkflowError,
    WorkflowHandle,
};
use support::Scratch;
use tokio::sync::{Semaphore, watch};

/// The tag of the workflow that holds at the gate.
const GATED: u32 = 0;

/// What the workflows of one test share with it: the order they ran in, whether the gated
/// one has started, and its gate.
struct Probe {
    order: Mutex<Vec<u32>>,
    gated_started: watch::Sender<bool>,
    gate: Semaphore,
}

impl Probe {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            order: Mutex::new(Vec::new()),
            gated_started: watch::Sender::new(false),
            gate: Semaphore::new(0),
        })
    }

    /// Waits until the gated workflow runs.
    async fn gated_runs(&self) {
        let mut started = self.gated_started.subscribe();
        started.wait_for(|started| *started).await.unwrap();
    }
}

/// A runtime running one execution at a time, serving `tagged` (input: a tag): it records its
/// tag, holds at the gate if it is [`GATED`], and returns its tag. No steps: its end is its
/// one commit.
fn one_at_a_time(journal: &durably_journal::Journal, probe: &Arc<Probe>) -> RuntimeBuilder {
    let probe = Arc::clone(probe);
    Runtime::builder(journal.clone())
        .concurrency_max(1)
        .register("tagged", 1, move |_context: WorkflowContext, tag: u32| {
            let probe = Arc::clone(&probe);
            async move {
                probe.order.lock().unwrap().push(tag);
                if tag == GATED {
                    probe.gated_started.send_replace(true);
                    probe.gate.acquire().await.unwrap().forget();
                }
                Ok::<_, WorkflowError>(tag)
            }
        })
}

async fn start(runtime: &Runtime, tag: u32, queue: Option<&str>) -> WorkflowHandle<u32> {
    let options = match queue {
        Some(queue) => StartOptions::default().queue(queue),
        None => StartOptions::default(),
    };
    let id = durably_journal::new_execution_id();
    runtime.start("tagged", id, &tag, options).await.unwrap()
}

/// The gated workflow runs, `queued` (tag, queue) are started behind it; then the gate
/// opens and every result arrives. Returns the writer's commits from the opening of the gate
/// to the last result.
async fn run_behind_the_gate(
    runtime: &Runtime,
    probe: &Probe,
    queued: &[(u32, Option<&str>)],
) -> u64 {
    let first = start(runtime, GATED, None).await;
    probe.gated_runs().await;
    let mut handles = vec![first];
    for (tag, queue) in queued {
        handles.push(start(runtime, *tag, *queue).await);
    }
    let commits = runtime.journal().writer_stats().commits;
    probe.gate.add_permits(1);
    for handle in &handles {
        handle.result().await.unwrap();
    }
    runtime.journal().writer_stats().commits - commits
}

/// Each run's end claims the next queued execution in its own commit: K executions queued
/// behind a running one cost K + 1 commits (the ends), not a claim commit more each.
#[tokio::test]
async fn a_runs_end_claims_its_successor_in_its_own_commit() {
    let scratch = Scratch::new();
    let probe = Probe::new();
    let runtime = one_at_a_time(&scratch.journal, &probe)
        .start()
        .await
        .unwrap();
    let queued: Vec<(u32, Option<&str>)> = (1..=10).map(|tag| (tag, None)).collect();
    let commits = run_behind_the_gate(&runtime, &probe, &queued).await;
    assert_eq!(commits, 11, "one commit per end, the claims riding on them");
    assert_eq!(
        *probe.order.lock().unwrap(),
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    );
}

/// A process serving two queues hands each place it frees to the other queue first, so
/// their executions take turns instead of one queue's backlog running first.
#[tokio::test]
async fn places_turn_over_between_queues_in_turn() {
    let scratch = Scratch::new();
    let probe = Probe::new();
    let runtime = one_at_a_time(&scratch.journal, &probe)
        .queue("a", QueueConfig::default())
        .queue("b", QueueConfig::default())
        .start()
        .await
        .unwrap();
    let queued = [
        (11, Some("a")),
        (12, Some("a")),
        (13, Some("a")),
        (21, Some("b")),
        (22, Some("b")),
        (23, Some("b")),
    ];
    run_behind_the_gate(&runtime, &probe, &queued).await;
    assert_eq!(*probe.order.lock().unwrap(), [0, 11, 21, 12, 22, 13, 23]);
}

/// More executions of a kind this process does not serve than one claim reads wait ahead of
/// one it serves: it is claimed all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_executions_behind_many_of_other_kinds_are_claimed() {
    let scratch = Scratch::new();
    let client = Client::new(scratch.journal.clone()).await.unwrap();
    // More than the 256 candidates a claim reads.
    let mut starts = tokio::task::JoinSet::new();
    for tag in 0_u32..300 {
        let client = client.clone();
        starts.spawn(async move {
            let options = StartOptions::default().allow_unregistered_kind();
            let id = durably_journal::new_execution_id();
            client
                .start::<_, u32>("unserved", id, &tag, options)
                .await
                .unwrap();
        });
    }
    starts.join_all().await;
    let options = StartOptions::default().allow_unregistered_kind();
    let id = durably_journal::new_execution_id();
    let served: WorkflowHandle<u32> = client.start("tagged", id, &7_u32, options).await.unwrap();

    let probe = Probe::new();
    let _runtime = one_at_a_time(&scratch.journal, &probe)
        .start()
        .await
        .unwrap();
    let ran = tokio::time::timeout(Duration::from_secs(20), served.result())
        .await
        .expect("the served execution was never claimed");
    assert_eq!(ran.unwrap(), 7);
}
