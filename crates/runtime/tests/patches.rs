//! `patched` and `deprecate_patch` across a code change (docs/design.md, "Versioning"):
//! - an execution that reaches the patch on patched code answers `true`, and the marker step
//!   `durably:patch/<id>` is recorded at its place;
//! - an execution that passed the point on old code (in another process) answers `false` when
//!   patched code resumes it, and still `false` on each of two more resumes; no marker is
//!   recorded for it; `runtime_patches` holds both answers, and `patch_holdouts` lists them;
//! - `deprecate_patch` consumes a recorded marker, and records none for an execution that
//!   reaches it for the first time;
//! - an empty patch id is a typed error and writes nothing.
//!
//! Method: the old code runs in a child process (this test binary run again with `CHILD_ENV`
//! set), which starts its execution, waits until it is parked on a receive and exits; the
//! patched code runs in this process. Each run of the patched code notes its answer in a
//! process-wide list, so the answers of every resume are seen, not only the last.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Mutex;
use std::time::Duration;

use durably_journal::{Journal, Status};
use durably_runtime::{Error, Runtime, StartOptions, WorkflowContext, WorkflowError};
use durably_testkit::TestDb;
use support::{step_names, wait_for_status, wait_until};
use uuid::Uuid;

/// Set in the child: `<role> <database path> <execution id>`.
const CHILD_ENV: &str = "DURABLY_RUNTIME_PATCHES_TEST_CHILD";

/// The workflow kind every code version here registers, at version 1.
const KIND: &str = "upgraded";

/// The patch.
const PATCH: &str = "extra-check";

/// How many messages on `go` a run waits for, one park each.
const ROUNDS: u32 = 3;

/// Every answer a run of the patched code got, by execution.
static ANSWERS: Mutex<Vec<(Uuid, bool)>> = Mutex::new(Vec::new());

/// The old code: a step, then [`ROUNDS`] receives.
async fn old_code(ctx: WorkflowContext, (): ()) -> Result<bool, WorkflowError> {
    ctx.pure("first", || async { Ok(1_u32) }).await?;
    for _ in 0..ROUNDS {
        ctx.recv::<u32>("go", Duration::from_hours(24)).await?;
    }
    Ok(false)
}

/// The patched code: a `check` step after `first`, for executions that reach it on this code.
async fn patched_code(ctx: WorkflowContext, (): ()) -> Result<bool, WorkflowError> {
    ctx.pure("first", || async { Ok(1_u32) }).await?;
    let patched = ctx.patched(PATCH).await?;
    ANSWERS.lock().unwrap().push((ctx.id(), patched));
    if patched {
        ctx.pure("check", || async { Ok(2_u32) }).await?;
    }
    for _ in 0..ROUNDS {
        ctx.recv::<u32>("go", Duration::from_hours(24)).await?;
    }
    Ok(patched)
}

/// The patched code once no unfinished execution answered `false`: the old branch deleted.
async fn deprecated_code(ctx: WorkflowContext, (): ()) -> Result<bool, WorkflowError> {
    ctx.pure("first", || async { Ok(1_u32) }).await?;
    ctx.deprecate_patch(PATCH).await?;
    ctx.pure("check", || async { Ok(2_u32) }).await?;
    for _ in 0..ROUNDS {
        ctx.recv::<u32>("go", Duration::from_hours(24)).await?;
    }
    Ok(true)
}

/// The child's side; does nothing when run as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Some((role, db, id)) = support::child_spec(CHILD_ENV) else {
        return;
    };
    let journal = Journal::open(db).unwrap();
    assert_eq!(role, "old", "unknown child role {role}");
    let runtime = Runtime::builder(journal.clone())
        .register(KIND, 1, old_code)
        .start()
        .await
        .unwrap();
    runtime
        .start::<_, bool>(KIND, id, &(), StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&journal, id, Status::Waiting).await;
    runtime.shutdown();
}

/// Starts execution `id` on the old code in a child process, which exits once it is parked.
fn start_on_old_code(db: &TestDb, id: Uuid) {
    let spec = format!("old {} {id}", db.target());
    let status = support::child_command(CHILD_ENV, &spec).status().unwrap();
    assert!(status.success(), "the old code's process failed: {status}");
}

/// An execution started on the old code in a child process and parked there, and a runtime of
/// the patched code on its database (with the scratch database); `None` in a child.
async fn parked_on_old_code() -> Option<(TestDb, Journal, Runtime, Uuid)> {
    if std::env::var(CHILD_ENV).is_ok() {
        return None;
    }
    let db = TestDb::new();
    let old = durably_journal::new_execution_id();
    start_on_old_code(&db, old);
    let journal = db.open();
    let runtime = Runtime::builder(journal.clone())
        .register(KIND, 1, patched_code)
        .start()
        .await
        .unwrap();
    Some((db, journal, runtime, old))
}

/// Sends one `go` to `id` and waits until it has consumed it.
async fn go(runtime: &Runtime, id: Uuid, round: u32) {
    runtime.send(id, "go", &round, None).await.unwrap();
    wait_until(runtime.journal(), "the go consumed", |journal| {
        support::consumption(journal, id)
            .iter()
            .all(|(_, seq)| seq.is_some())
    })
    .await;
}

/// The recorded answers to [`PATCH`], as (execution, answer, seq).
fn answer_rows(journal: &Journal) -> Vec<(String, bool, u32)> {
    journal
        .read(|conn| {
            let mut statement = conn.prepare(
                "SELECT execution_id, answer, seq FROM runtime_patches WHERE patch_id = ?1
                 ORDER BY execution_id",
            )?;
            let rows =
                statement.query_map([PATCH], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .unwrap()
}

fn answers_of(id: Uuid) -> Vec<bool> {
    ANSWERS
        .lock()
        .unwrap()
        .iter()
        .filter(|(of, _)| *of == id)
        .map(|(_, answer)| *answer)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_runs_answer_false_for_good_and_new_runs_true() {
    let Some((_db, journal, runtime, old)) = parked_on_old_code().await else {
        return;
    };
    let new = durably_journal::new_execution_id();
    let new_handle = runtime
        .start::<_, bool>(KIND, new, &(), StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&journal, new, Status::Waiting).await;

    let holdouts = runtime.patch_holdouts(PATCH).unwrap();
    let ids = |uses: &[durably_runtime::PatchUse]| -> Vec<Uuid> {
        uses.iter().map(|used| used.execution_id).collect()
    };
    assert_eq!(ids(&holdouts.answered_true), [new]);
    assert!(holdouts.answered_false.is_empty(), "{holdouts:?}");

    for round in 0..ROUNDS {
        go(&runtime, old, round).await;
        go(&runtime, new, round).await;
    }
    let old_handle = runtime.handle::<bool>(old);
    assert!(
        !old_handle.result().await.unwrap(),
        "the old run took the new branch"
    );
    assert!(new_handle.result().await.unwrap());

    // Claimed ROUNDS times by the patched code, the old run answered false every time.
    assert_eq!(answers_of(old), [false; ROUNDS as usize]);
    assert_eq!(answers_of(new).first(), Some(&true));
    assert!(answers_of(new).iter().all(|answer| *answer));
    let marker = format!("durably:patch/{PATCH}");
    assert_eq!(
        step_names(&journal, new)[1..3],
        [marker.clone(), "check".to_owned()]
    );
    assert!(!step_names(&journal, old).contains(&marker));
    let mut expected = vec![(old.to_string(), false, 1), (new.to_string(), true, 1)];
    expected.sort();
    assert_eq!(answer_rows(&journal), expected);
    // Both ended: nothing holds the patch's branches any more.
    let holdouts = runtime.patch_holdouts(PATCH).unwrap();
    assert!(holdouts.answered_false.is_empty() && holdouts.answered_true.is_empty());
    runtime.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_run_parked_under_the_patch_is_listed_as_a_holdout() {
    let Some((_db, journal, runtime, old)) = parked_on_old_code().await else {
        return;
    };
    go(&runtime, old, 0).await;
    wait_for_status(&journal, old, Status::Waiting).await;
    let holdouts = runtime.patch_holdouts(PATCH).unwrap();
    assert_eq!(holdouts.answered_false.len(), 1, "{holdouts:?}");
    assert_eq!(holdouts.answered_false[0].execution_id, old);
    assert_eq!(holdouts.answered_false[0].status, Status::Waiting);
    assert!(!holdouts.truncated);
    runtime.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprecate_patch_consumes_a_marker_and_never_records_one() {
    let scratch = support::Scratch::new();
    let patched = Runtime::builder(scratch.journal.clone())
        .register(KIND, 1, patched_code)
        .start()
        .await
        .unwrap();
    let marked = durably_journal::new_execution_id();
    patched
        .start::<_, bool>(KIND, marked, &(), StartOptions::default())
        .await
        .unwrap();
    wait_for_status(&scratch.journal, marked, Status::Waiting).await;
    patched.shutdown();

    let deprecated = Runtime::builder(scratch.journal.clone())
        .register(KIND, 1, deprecated_code)
        .start()
        .await
        .unwrap();
    let fresh = durably_journal::new_execution_id();
    deprecated
        .start::<_, bool>(KIND, fresh, &(), StartOptions::default())
        .await
        .unwrap();
    for round in 0..ROUNDS {
        go(&deprecated, marked, round).await;
        go(&deprecated, fresh, round).await;
    }
    assert!(deprecated.handle::<bool>(marked).result().await.unwrap());
    assert!(deprecated.handle::<bool>(fresh).result().await.unwrap());
    let marker = format!("durably:patch/{PATCH}");
    assert_eq!(step_names(&scratch.journal, marked)[1], marker);
    assert_eq!(step_names(&scratch.journal, fresh)[1], "check");
    assert!(!step_names(&scratch.journal, fresh).contains(&marker));
    let answered: Vec<String> = answer_rows(&scratch.journal)
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(
        answered,
        [marked.to_string()],
        "deprecate_patch records no answer"
    );
    deprecated.shutdown();
}

/// A workflow asking about an empty patch id.
async fn empty_patch(ctx: WorkflowContext, (): ()) -> Result<String, WorkflowError> {
    match ctx.patched("").await {
        Err(Error::InvalidName { what, .. }) => Ok(what.to_owned()),
        other => Ok(format!("unexpected: {other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_patch_id_is_refused_and_writes_nothing() {
    let scratch = support::Scratch::new();
    let runtime = Runtime::builder(scratch.journal.clone())
        .register("empty", 1, empty_patch)
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let what = runtime
        .start::<_, String>("empty", id, &(), StartOptions::default())
        .await
        .unwrap()
        .result()
        .await
        .unwrap();
    assert_eq!(what, "patch id");
    assert!(scratch.journal.steps(id).unwrap().is_empty());
    assert!(answer_rows(&scratch.journal).is_empty());
    let refused = runtime.patch_holdouts("");
    assert!(
        matches!(refused, Err(Error::InvalidName { .. })),
        "{refused:?}"
    );
    runtime.shutdown();
}
