//! Children called in parallel keep their seqs in call order: a parent that calls `child` twice
//! under `tokio::join!` right after a step whose result is still unwritten (so each start
//! waits for a write before it finishes, and the first await would otherwise be reserved
//! after the second start) completes, and a replay of every recorded step (a fork from past
//! its last step, where every step replays at once) completes the same way, never stopping on
//! non-determinism. Each child is started once.
//!
//! Method: the children wait for a message the test sends once both exist; the test reads the
//! children's ids from the `runtime_children` view.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::{Journal, Status};
use durably_runtime::{ForkOptions, Runtime, StartOptions, WorkflowContext, WorkflowError};
use support::{Scratch, wait_for_status, wait_until};
use uuid::Uuid;

async fn joined(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    let base: u32 = ctx.pure("plan", || async { Ok(100) }).await?;
    let (a, b) = tokio::join!(
        ctx.child::<u32, u32>("leaf", &1),
        ctx.child::<u32, u32>("leaf", &2)
    );
    Ok(base + a? + b?)
}

/// Waits for a `go` message, then returns its input times ten.
async fn leaf(ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    ctx.recv::<()>("go", Duration::from_hours(1)).await?;
    Ok(n * 10)
}

fn children(journal: &Journal, parent: Uuid) -> Vec<Uuid> {
    journal
        .read(|conn| {
            let mut statement = conn.prepare(
                "SELECT child_id FROM runtime_children WHERE parent_id = ?1 ORDER BY seq",
            )?;
            let rows = statement
                .query_map([parent.to_string()], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows.iter().map(|id| id.parse().unwrap()).collect())
        })
        .unwrap()
}

#[tokio::test]
async fn children_joined_after_an_unwritten_step_keep_call_order_and_replay() {
    let scratch = Scratch::new();
    let runtime = Runtime::builder(scratch.journal.clone())
        .register("joined", 1, joined)
        .register("leaf", 1, leaf)
        .park_after(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let parent = durably_journal::new_execution_id();
    let handle = runtime
        .start::<_, u32>("joined", parent, &(), StartOptions::default())
        .await
        .unwrap();
    wait_until(&scratch.journal, "two children", |journal| {
        children(journal, parent).len() == 2
    })
    .await;
    let kids = children(&scratch.journal, parent);
    for kid in &kids {
        wait_for_status(&scratch.journal, *kid, Status::Waiting).await;
        runtime.send(*kid, "go", &(), None).await.unwrap();
    }
    let total = tokio::time::timeout(Duration::from_secs(30), handle.result())
        .await
        .expect("the parent ended")
        .unwrap();
    assert_eq!(total, 130);
    wait_until(&scratch.journal, "both children completed", |journal| {
        kids.iter()
            .all(|kid| journal.get(*kid).unwrap().unwrap().status == Status::Completed)
    })
    .await;
    assert_eq!(
        children(&scratch.journal, parent),
        kids,
        "a child was started again"
    );

    // A fork from past the last step replays every recorded step on this code.
    let recorded = support::step_names(&scratch.journal, parent).len();
    let fork = runtime
        .fork(
            parent,
            ForkOptions::from_seq(u32::try_from(recorded).unwrap()),
        )
        .await
        .unwrap();
    let replayed = tokio::time::timeout(
        Duration::from_secs(30),
        runtime.handle::<u32>(fork).result(),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the fork did not end: {:?}",
            scratch.journal.get(fork).unwrap()
        )
    });
    assert_eq!(
        replayed.unwrap(),
        130,
        "the fork did not replay: {:?}",
        scratch.journal.get(fork).unwrap()
    );
}
