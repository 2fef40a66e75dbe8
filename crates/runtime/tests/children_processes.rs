//! Child executions across processes, with real processes killed with SIGKILL:
//! - a parent killed while it awaits its child (in memory, holding its lock) is resumed by
//!   another process: it replays its start step (the same child: exactly one child row per
//!   start step) and gets the child's result, delivered once;
//! - a child whose process is killed inside a step is resumed elsewhere, and its parent gets
//!   the result;
//! - cancelling a parent cancels its running child held by another live process (by a cancel
//!   request its holder honours) together with its queued children.
//!
//! The other processes are this test binary run again with `CHILD_ENV` set, which runs only the
//! `child` test, in the role named there. The test polls the journal for the states the
//! processes reach on their own, and for a marker file a step writes when it is inside its
//! closure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use durably_journal::{Journal, Status};
use durably_runtime::{
    ChildOptions, QueueConfig, Runtime, RuntimeBuilder, StartOptions, WorkflowContext,
    WorkflowError, child_execution_id, child_topic,
};
use support::{kill, wait_for_status, wait_for_steps, wait_until};
use uuid::Uuid;

/// Set in the child: `<role> <database path> <execution id>`.
const CHILD_ENV: &str = "DURABLY_RUNTIME_CHILDREN_TEST_CHILD";

/// Waits for a message on `go`, then returns its input plus one.
async fn gated(ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    ctx.recv::<()>("go", Duration::from_hours(7 * 24)).await?;
    Ok(n + 1)
}

/// Two steps; in a process run with `CHILD_ENV`, the second writes a marker file next to the
/// journal and then never ends (the process is killed inside it).
async fn slow(ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    let n = ctx.pure("first", || async move { Ok(n * 2) }).await?;
    let n = ctx
        .pure("second", || async move {
            if let Some((_, db, _)) = support::child_spec(CHILD_ENV) {
                std::fs::write(marker(Path::new(&db)), b"inside").unwrap();
                std::future::pending::<()>().await;
            }
            Ok(n + 1)
        })
        .await?;
    Ok(n)
}

/// Starts a child of kind `gated` or `slow` (as the input says), awaits it, and returns its
/// result.
async fn parent(ctx: WorkflowContext, kind: String) -> Result<u32, WorkflowError> {
    Ok(ctx.child::<u32, u32>(&kind, &20).await?)
}

/// Starts a `gated` child on queue `held`, two `gated` children on queue `kids` (which no
/// runtime in these tests serves, so they stay queued), and awaits the first.
async fn family(ctx: WorkflowContext, (): ()) -> Result<u32, WorkflowError> {
    let held = ChildOptions::default().queue("held");
    let first = ctx.start_child::<u32, u32>("gated", &1, held).await?;
    for n in [2, 3] {
        let queued = ChildOptions::default().queue("kids");
        ctx.start_child::<u32, u32>("gated", &n, queued).await?;
    }
    Ok(first.result(&ctx).await?)
}

fn marker(db: &Path) -> PathBuf {
    db.with_extension("inside")
}

fn queue(name: &str) -> (String, QueueConfig) {
    (
        name.to_owned(),
        QueueConfig {
            concurrency_max: None,
            process_concurrency_max: None,
        },
    )
}

/// A runtime on `journal` serving `kinds` (of `gated`, `slow`, `parent`, `family`) and the
/// queue `held`, waiting in memory up to `park_after`.
fn builder(journal: &Journal, kinds: &[&str], park_after: Duration) -> RuntimeBuilder {
    let (name, config) = queue("held");
    let mut builder = Runtime::builder(journal.clone())
        .queue(&name, config)
        .park_after(park_after);
    for kind in kinds {
        builder = match *kind {
            "gated" => builder.register("gated", 1, gated),
            "slow" => builder.register("slow", 1, slow),
            "parent" => builder.register("parent", 1, parent),
            _ => builder.register("family", 1, family),
        };
    }
    builder
}

fn child_command(role: &str, db: &std::path::Path, id: Uuid) -> Command {
    support::role_command(CHILD_ENV, role, db, id)
}

/// The child's side; does nothing when run as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Some((role, db, id)) = support::child_spec(CHILD_ENV) else {
        return;
    };
    let journal = Journal::open(db).unwrap();
    // Longer than the wait of an await, which has no deadline: the processes wait in memory.
    let hold = Duration::from_secs(1 << 40);
    let _runtime = match role.as_str() {
        // Starts the parent and runs it, awaiting its child in memory, until killed.
        "parent" => {
            let runtime = builder(&journal, &["parent"], hold).start().await.unwrap();
            runtime
                .start::<_, u32>("parent", id, &"gated".to_owned(), StartOptions::default())
                .await
                .unwrap();
            runtime
        }
        // Serves `slow` children; the first run hangs in its second step.
        "slow" => builder(&journal, &["slow"], hold).start().await.unwrap(),
        // Serves `gated` children on queue `held`, waiting for `go` in memory.
        "held" => builder(&journal, &["gated"], hold).start().await.unwrap(),
        other => panic!("unknown child role {other}"),
    };
    std::future::pending::<()>().await;
}

/// The children of `parent` in the `runtime_children` view: (seq, child, status).
fn children(journal: &Journal, parent: Uuid) -> Vec<(u32, Uuid, String)> {
    journal
        .read(|conn| {
            let mut statement = conn.prepare(
                "SELECT seq, child_id, status FROM runtime_children WHERE parent_id = ?1
                 ORDER BY seq",
            )?;
            let rows = statement
                .query_map([parent.to_string()], |row| {
                    let child: String = row.get(1)?;
                    Ok((row.get(0)?, Uuid::parse_str(&child).unwrap(), row.get(2)?))
                })?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .unwrap()
}

/// The messages child `child` sent its parent: (consumed seq) per message.
fn deliveries(journal: &Journal, parent: Uuid, child: Uuid) -> Vec<Option<u32>> {
    journal
        .read(|conn| {
            let mut statement = conn.prepare(
                "SELECT consumed_seq FROM messages WHERE execution_id = ?1 AND topic = ?2",
            )?;
            let rows = statement
                .query_map([parent.to_string(), child_topic(child)], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            Ok(rows)
        })
        .unwrap()
}

/// A parent killed (SIGKILL) while it awaits its child in memory is resumed by a runtime here:
/// it replays its start step and waits for the same child, which is the only child; the
/// child's end reaches it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_killed_while_it_awaits_its_child_waits_for_the_same_child() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let journal = Journal::open(&db).unwrap();
    // Serves the child here; its parent runs in the other process.
    let children_here = builder(&journal, &["gated"], Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let child = child_execution_id(id, 0);
    let parent_process = child_command("parent", &db, id).spawn().unwrap();
    wait_for_status(&journal, child, Status::Waiting).await;
    // The parent recorded its start step and the await's deadline: it waits in memory.
    wait_for_steps(&journal, id, 2).await;
    kill(parent_process);
    assert_eq!(journal.get(id).unwrap().unwrap().status, Status::Running);

    // The child ends while its parent is dead: the message waits for the parent.
    children_here.send(child, "go", &(), None).await.unwrap();
    wait_for_status(&journal, child, Status::Completed).await;
    assert_eq!(deliveries(&journal, id, child), [None]);

    let parents_here = builder(&journal, &["parent"], Duration::from_millis(50))
        .sweep_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    assert_eq!(parents_here.handle::<u32>(id).result().await.unwrap(), 21);
    let kids = children(&journal, id);
    assert_eq!(kids, [(0, child, "completed".to_owned())]);
    assert_eq!(deliveries(&journal, id, child), [Some(2)]);
}

/// A child whose process is killed (SIGKILL) inside a step is resumed by a runtime here,
/// which finishes it; its parent, parked meanwhile, gets the result once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_killed_mid_step_resumes_and_its_parent_gets_the_result() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let journal = Journal::open(&db).unwrap();
    let slow_process = child_command("slow", &db, Uuid::nil()).spawn().unwrap();
    // The kind is registered once that process has started.
    wait_until(&journal, "slow registered", |journal| {
        journal
            .read(|conn| {
                Ok(conn.query_row(
                    "SELECT count(*) FROM workflow_kinds WHERE kind = 'slow'",
                    [],
                    |row| row.get::<_, i64>(0),
                )?)
            })
            .is_ok_and(|count| count == 1)
    })
    .await;
    let parents_here = builder(&journal, &["parent"], Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let handle = parents_here
        .start::<_, u32>("parent", id, &"slow".to_owned(), StartOptions::default())
        .await
        .unwrap();
    let child = child_execution_id(id, 0);
    wait_until(&journal, "the child inside its second step", |_| {
        marker(&db).exists()
    })
    .await;
    kill(slow_process);

    let _slow_here = builder(&journal, &["slow"], Duration::from_millis(50))
        .sweep_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    assert_eq!(handle.result().await.unwrap(), 41);
    assert_eq!(children(&journal, id), [(0, child, "completed".to_owned())]);
    assert_eq!(deliveries(&journal, id, child), [Some(2)]);
    let names: Vec<String> = journal
        .steps(child)
        .unwrap()
        .into_iter()
        .map(|step| step.name)
        .collect();
    assert_eq!(names, ["first", "second"]);
}

/// Cancelling a parent cancels its children in the same transaction: the queued ones at once,
/// and the running one, held by a live process, by a cancel request that process honours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_parent_cancels_queued_children_and_a_child_running_elsewhere() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let journal = Journal::open(&db).unwrap();
    let (kids, config) = queue("kids");
    // Registers `gated` and the `kids` queue, then stops claiming: nothing here runs children.
    let registrar = builder(&journal, &["gated"], Duration::from_millis(50))
        .queue(&kids, config)
        .start()
        .await
        .unwrap();
    registrar.shutdown();
    let held_process = child_command("held", &db, Uuid::nil()).spawn().unwrap();
    let parents_here = builder(&journal, &["family"], Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    parents_here
        .start::<_, u32>("family", id, &(), StartOptions::default())
        .await
        .unwrap();
    let held = child_execution_id(id, 0);
    // The held child waits in memory in the other process: running, its deadline recorded.
    wait_for_steps(&journal, held, 1).await;
    wait_for_status(&journal, id, Status::Waiting).await;
    assert_eq!(journal.get(held).unwrap().unwrap().status, Status::Running);

    let outcome = parents_here.cancel(id, "stop the family").await.unwrap();
    assert!(
        matches!(outcome, durably_runtime::CancelOutcome::Cancelled { .. }),
        "{outcome:?}"
    );
    let kids = children(&journal, id);
    assert_eq!(kids.len(), 3);
    assert_eq!(kids[1].2, "cancelled", "{kids:?}");
    assert_eq!(kids[2].2, "cancelled", "{kids:?}");
    let held_record = journal.get(held).unwrap().unwrap();
    assert!(
        held_record.status == Status::Cancelled || held_record.cancel_requested_at.is_some(),
        "{held_record:?}"
    );
    wait_for_status(&journal, held, Status::Cancelled).await;
    let error: serde_json::Value = journal
        .get(held)
        .unwrap()
        .unwrap()
        .error
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(error["cancelled"], format!("its parent {id} was cancelled"));
    kill(held_process);
}
