//! A fork of a parent that started a child and failed before awaiting it (docs/design.md,
//! "Fork"): while the child runs, the fork is refused (`ChildRunning`, nothing written), since
//! only the original would be told of the child's end; once the child has ended, the fork
//! copies the start step and gets the child's end delivered, so it awaits the same child (no
//! second child is started) and completes with its result.
//!
//! Method: the broken parent code fails at the step after the start; the child waits for a
//! message the test sends once it has checked the refusal; the fixed code runs in a second
//! runtime, which claims the fork.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::{Status, StepError};
use durably_runtime::{
    ChildOptions, Client, Error, ForkOptions, ForkRefusal, Runtime, StartOptions, WorkflowContext,
    WorkflowError,
};
use support::{Scratch, wait_for_status};
use uuid::Uuid;

/// Starts a child, passes a gate (broken: fails it), then awaits the child.
async fn parent(ctx: &WorkflowContext, gate_fails: bool) -> Result<u32, WorkflowError> {
    let child = ctx
        .start_child::<u32, u32>("gated", &21, ChildOptions::default())
        .await?;
    ctx.pure("gate", || async move {
        if gate_fails {
            Err(StepError::fatal("the gate is broken"))
        } else {
            Ok(())
        }
    })
    .await?;
    Ok(child.result(ctx).await?)
}

async fn broken(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    parent(&ctx, true).await
}

async fn fixed(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    parent(&ctx, false).await
}

/// Waits for `go`, then doubles its input.
async fn gated(ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    ctx.recv::<()>("go", Duration::from_hours(24)).await?;
    Ok(n * 2)
}

/// The children linked to `parent`, from the `runtime_children` view.
fn children_of(scratch: &Scratch, parent: Uuid) -> Vec<Uuid> {
    scratch
        .journal
        .read(|conn| {
            let mut statement =
                conn.prepare("SELECT child_id FROM runtime_children WHERE parent_id = ?1")?;
            let rows = statement.query_map([parent.to_string()], |row| row.get::<_, String>(0))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .unwrap()
        .iter()
        .map(|text| Uuid::parse_str(text).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_awaits_the_child_its_copied_start_step_started() {
    let scratch = Scratch::new();
    let old = Runtime::builder(scratch.journal.clone())
        .register("parent", 1, broken)
        .register("gated", 1, gated)
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = old
        .start::<_, u32>("parent", id, &(), StartOptions::default())
        .await
        .unwrap();
    assert!(matches!(
        handle.result().await,
        Err(Error::WorkflowFailed { .. })
    ));
    let children = children_of(&scratch, id);
    assert_eq!(
        children.len(),
        1,
        "the parent's start step started its child"
    );
    let child = children[0];

    // The child waits for `go`: a fork after the start step would wait for it forever.
    let client = Client::new(scratch.journal.clone()).await.unwrap();
    // Parked on its receive, the child writes nothing more until `go` comes, so a change to
    // the snapshot is the refusal's.
    wait_for_status(&scratch.journal, child, Status::Waiting).await;
    let before = support::snapshot(&scratch.journal);
    let refused = client.fork(id, ForkOptions::from_seq(1)).await;
    match refused {
        Err(Error::ForkRefused {
            refusal:
                ForkRefusal::ChildRunning {
                    seq: 0,
                    child_id,
                    from_seq: 1,
                },
            ..
        }) => assert_eq!(child_id, child),
        other => panic!("a fork across a running child was not refused: {other:?}"),
    }
    assert_eq!(
        support::snapshot(&scratch.journal),
        before,
        "a refusal wrote"
    );

    client.send(child, "go", &(), None).await.unwrap();
    wait_for_status(&scratch.journal, child, Status::Completed).await;
    old.shutdown();

    let new = Runtime::builder(scratch.journal.clone())
        .register("parent", 1, fixed)
        .register("gated", 1, gated)
        .start()
        .await
        .unwrap();
    let fork = client.fork(id, ForkOptions::from_seq(1)).await.unwrap();
    let result = new.handle::<u32>(fork).result().await.unwrap();
    assert_eq!(result, 42, "the fork got the child's result");
    assert!(
        children_of(&scratch, fork).is_empty(),
        "the fork started a child of its own"
    );
    assert_eq!(children_of(&scratch, id), [child]);
    new.shutdown();
}
