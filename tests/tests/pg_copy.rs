//! Moving a journal from SQLite to PostgreSQL (`durably_journal::copy_journal`, behind
//! `durably copy`): a user who outgrows one host keeps its history and its in-flight runs.
//!
//! Method: a SQLite journal is filled the way programs fill it. A runtime of this process
//! finishes an execution that answered a patch, a parent that awaited its child, and leaves
//! one parked on a message; then a `scheduler_worker` child fires its job and is SIGKILLed
//! inside the fire's guarded step (policy `skip`), leaving an intent with no result, a held
//! lock of a dead process, the job, its fire and the slots skipped meanwhile. The copy goes
//! into a fresh PostgreSQL schema; every table's rows are compared on both sides. Then
//! PostgreSQL runs what was in flight: a runtime of this process delivers the message to the
//! parked execution, which completes, and a `scheduler_worker` on the copy recovers the
//! killed fire, whose effect (an `O_APPEND` ledger line per call) stays at one: the intent
//! followed its policy on the new backend. The refusals (a live holder of the source, a
//! destination with rows, a destination whose schema is behind) write nothing.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_journal::{CopyError, Journal, Status, copy_journal};
use durably_runtime::{Client, Runtime, StartOptions, WorkflowContext, WorkflowError};
use durably_testkit::{Backend, TestDb};
use support::{Driven, Scratch, wait_exit, wait_until};
use uuid::Uuid;

/// How long the parked execution waits for its message.
const RECEIVE_TIMEOUT: Duration = Duration::from_hours(24);

/// The tables every copy of this journal carries.
const TABLES: &[&str] = &[
    "executions",
    "steps",
    "events",
    "runtime_executions",
    "queues",
    "workflow_kinds",
    "dedup_keys",
    "messages",
    "workflow_events",
    "runtime_patches",
    "jobs",
    "fires",
    "skipped_slots",
];

/// A runtime serving `done` (answers patch `p1`, one pure step), `parent` (awaits a `done`
/// child) and `inbox` (receives one message on `go` and returns it).
async fn runtime_on(journal: Journal) -> Runtime {
    Runtime::builder(journal)
        .register(
            "done",
            1,
            |context: WorkflowContext, number: u32| async move {
                let patched = context.patched("p1").await?;
                let doubled: u32 = context.pure("double", || async { Ok(number * 2) }).await?;
                Ok::<_, WorkflowError>(if patched { doubled } else { number })
            },
        )
        .register(
            "parent",
            1,
            |context: WorkflowContext, number: u32| async move {
                let child: u32 = context.child("done", &number).await?;
                Ok::<_, WorkflowError>(child + 1)
            },
        )
        .register("inbox", 1, |context: WorkflowContext, (): ()| async move {
            let message: Option<String> = context.recv("go", RECEIVE_TIMEOUT).await?;
            context.set_event("got", &message).await?;
            Ok::<_, WorkflowError>(message)
        })
        .start()
        .await
        .unwrap()
}

/// Fills the SQLite journal at `scratch.database`; returns the parked execution's id and the
/// slot (ms) of the fire killed mid-step, with the killed process's pid.
fn fill_source(scratch: &Scratch) -> (Uuid, i64, u32) {
    let tokio = support::runtime();
    let inbox = tokio.block_on(async {
        let journal = Journal::open(&scratch.database).unwrap();
        let runtime = runtime_on(journal).await;
        let options = || StartOptions::default();
        let done = runtime
            .start::<u32, u32>("done", Uuid::now_v7(), &21, options())
            .await
            .unwrap();
        assert_eq!(done.result().await.unwrap(), 42);
        let parent = runtime
            .start::<u32, u32>("parent", Uuid::now_v7(), &5, options())
            .await
            .unwrap();
        assert_eq!(parent.result().await.unwrap(), 11);
        let inbox = runtime
            .start::<(), Option<String>>("inbox", Uuid::now_v7(), &(), options())
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + support::WAIT_MAX;
        while inbox.status().unwrap() != Status::Waiting {
            assert!(tokio::time::Instant::now() < deadline, "inbox never parked");
            tokio::time::sleep(support::POLL_INTERVAL).await;
        }
        runtime.drain().await;
        inbox.id()
    });
    // The job fires every 2 s; the first fire's effect blocks, and the worker is killed there.
    let mut worker = scratch.worker(2_000, "skip", true, "skip");
    wait_until("the first fire blocks in its effect", || {
        !scratch.blocked().is_empty()
    });
    let pid = worker.pid();
    worker.kill();
    let slot = scratch.blocked()[0];
    (inbox, slot, pid)
}

fn inspector(scratch: &Scratch) -> durably_journal::Inspector {
    Journal::builder(&scratch.database).inspect().unwrap()
}

/// A PostgreSQL journal on `db`, with the runtime's and the scheduler's tables migrated.
async fn destination(db: &TestDb) -> Journal {
    let journal = db.open();
    let client = Client::new(journal.clone()).await.unwrap();
    durably_scheduler::Scheduler::new(client).await.unwrap();
    journal
}

#[test]
fn a_sqlite_journal_moves_to_postgres_and_its_runs_finish_there() {
    let scratch = Scratch::new();
    let (inbox, slot, killed) = fill_source(&scratch);
    let tokio = support::runtime();
    let db = TestDb::on(Backend::Postgres);
    let journal = tokio.block_on(destination(&db));

    let report = tokio
        .block_on(copy_journal(inspector(&scratch), &journal))
        .unwrap();
    let copied: Vec<&str> = report.tables.iter().map(|table| table.table).collect();
    assert_eq!(copied, TABLES);
    for table in &report.tables {
        assert_eq!(table.source_rows, table.destination_rows, "{}", table.table);
        let sqlite_rows: i64 = scratch.query(&format!("SELECT count(*) FROM {}", table.table), []);
        assert_eq!(
            table.source_rows,
            u64::try_from(sqlite_rows).unwrap(),
            "{}",
            table.table
        );
    }
    let rows = |name: &str| {
        report
            .tables
            .iter()
            .find(|t| t.table == name)
            .unwrap()
            .source_rows
    };
    assert!(
        rows("executions") >= 5,
        "done, parent, child, inbox, the fire"
    );
    for table in [
        "runtime_patches",
        "fires",
        "jobs",
        "messages",
        "workflow_kinds",
    ] {
        assert!(rows(table) >= 1, "{table} is empty: {:?}", report.tables);
    }
    // No lock row travels: ownership starts fresh on PostgreSQL.
    let locks: i64 = journal
        .read(|conn| {
            Ok(conn.query_row(
                "SELECT count(*) FROM locks WHERE pid IS NOT NULL",
                [],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(locks, 0);

    // The parked execution gets its message on PostgreSQL and completes.
    let got = tokio.block_on(async {
        let runtime = runtime_on(journal.clone()).await;
        runtime.send(inbox, "go", &"moved", None).await.unwrap();
        let got = runtime
            .handle::<Option<String>>(inbox)
            .result()
            .await
            .unwrap();
        runtime.drain().await;
        got
    });
    assert_eq!(got.as_deref(), Some("moved"));

    // The fire killed mid-effect is recovered on PostgreSQL under its policy (`skip`): its
    // effect is not performed again.
    let mut worker = Driven::start(
        std::process::Command::new(env!("CARGO_BIN_EXE_scheduler_worker"))
            .arg(db.target())
            .arg(&scratch.ledger)
            .args(["2000", "skip", "0", "skip"]),
    );
    let ended = |state: &str| ["completed", "failed", "skipped"].contains(&state);
    wait_until("the killed fire ends on PostgreSQL", || {
        let state: String = journal
            .read(move |conn| {
                Ok(conn.query_row(
                    "SELECT state FROM fires WHERE job = 'tick' AND slot_ms = ?1",
                    [slot],
                    |row| row.get(0),
                )?)
            })
            .unwrap();
        ended(&state)
    });
    worker.close();
    assert!(wait_exit(&mut worker.child, "scheduler_worker").success());
    let effects = scratch.effects_by_slot();
    let of_slot = &effects[&slot];
    assert_eq!(
        of_slot.len(),
        1,
        "the skipped intent's effect ran again: {of_slot:?}"
    );
    assert_eq!(of_slot[0].pid, killed);
    drop(journal);
}

#[test]
fn a_copy_refuses_a_live_source_a_destination_with_rows_and_a_schema_behind() {
    let scratch = Scratch::new();
    let tokio = support::runtime();
    // A journal with one finished execution and the runtime's tables.
    tokio.block_on(async {
        let runtime = runtime_on(Journal::open(&scratch.database).unwrap()).await;
        let done = runtime
            .start::<u32, u32>("done", Uuid::now_v7(), &1, StartOptions::default())
            .await
            .unwrap();
        done.result().await.unwrap();
        runtime.drain().await;
    });

    // A live process holds a lock of the source.
    let held = Uuid::now_v7();
    let mut holder = Driven::spawn(
        env!("CARGO_BIN_EXE_journal_worker"),
        &[
            "hold",
            scratch.database.to_str().unwrap(),
            &held.to_string(),
        ],
    );
    holder.line();
    let db = TestDb::on(Backend::Postgres);
    let journal = tokio.block_on(destination(&db));
    let refused = tokio.block_on(copy_journal(inspector(&scratch), &journal));
    match refused {
        Err(CopyError::SourceInUse { resource, pid, .. }) => {
            assert_eq!(resource, held.to_string());
            assert_eq!(pid, i64::from(holder.pid()));
        }
        other => panic!("expected SourceInUse, got {other:?}"),
    }
    holder.close();
    assert!(wait_exit(&mut holder.child, "journal_worker").success());

    // A destination whose runtime tables were never migrated.
    let behind = TestDb::on(Backend::Postgres);
    let bare = behind.open();
    match tokio.block_on(copy_journal(inspector(&scratch), &bare)) {
        Err(CopyError::SchemaMismatch {
            owner,
            destination_version: 0,
            ..
        }) => {
            assert_eq!(owner, "runtime");
        }
        other => panic!("expected SchemaMismatch, got {other:?}"),
    }
    let executions: i64 = bare
        .read(|conn| Ok(conn.query_row("SELECT count(*) FROM executions", [], |row| row.get(0))?))
        .unwrap();
    assert_eq!(executions, 0, "a refused copy wrote rows");

    // The first copy succeeds; a second into the same schema is refused and changes nothing.
    let first = tokio
        .block_on(copy_journal(inspector(&scratch), &journal))
        .unwrap();
    match tokio.block_on(copy_journal(inspector(&scratch), &journal)) {
        Err(CopyError::DestinationNotEmpty { table, destination }) => {
            assert_eq!(table, "executions");
            assert!(!destination.contains("password"));
        }
        other => panic!("expected DestinationNotEmpty, got {other:?}"),
    }
    let count = |table: &'static str| -> u64 {
        let sql = format!("SELECT count(*) FROM {table}");
        let rows: i64 = journal
            .read(move |conn| Ok(conn.query_row(&sql, [], |row| row.get(0))?))
            .unwrap();
        u64::try_from(rows).unwrap()
    };
    for table in &first.tables {
        assert_eq!(
            count(table.table),
            table.destination_rows,
            "{}",
            table.table
        );
    }
    drop((journal, bare));
}
