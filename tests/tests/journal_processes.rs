//! Executions shared between processes: several processes creating the same new file at once
//! all succeed; a live holder in another process refuses opens and cancels with `Locked`
//! naming its pid; when that holder is SIGKILLed its execution is listed by `recoverable()`,
//! the crash-orphan sweep marks it `interrupted` with an `orphan_reclaimed` event, and a new
//! run resumes it without re-running its recorded step; a holder that drops its handle
//! without finalizing leaves the execution `running` and recoverable.
//!
//! Method: `journal_worker` children, released at once through their stdin for the race,
//! killed with SIGKILL for the crash; this process inspects the file through its own journal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::process::Stdio;

use durably_journal::{Error, Journal, Opened, SCHEMA_VERSION, event_kind};
use support::journal::{Held, finish, worker};
use support::{Scratch, integrity, runtime};
use uuid::Uuid;

const RACERS: usize = 6;
const ROUNDS: usize = 5;

#[test]
fn processes_opening_the_same_new_file_at_once_all_succeed() {
    for round in 0..ROUNDS {
        let scratch = Scratch::new();
        let mut children: Vec<_> = (0..RACERS)
            .map(|_| {
                worker()
                    .args(["race", scratch.database.to_str().unwrap()])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // Release them together: each is already loaded and waiting on its stdin.
        for child in &mut children {
            child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        }
        let mut executions = Vec::new();
        for child in children {
            let run = finish(child);
            let answer = run.answer().clone();
            assert_eq!(
                answer["outcome"], "done",
                "round {round}: {answer} {}",
                run.stderr
            );
            executions.push(answer["execution"].as_str().unwrap().to_owned());
        }
        let conn = rusqlite::Connection::open(&scratch.database).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let completed: i64 = conn
            .query_row(
                "SELECT count(*) FROM executions WHERE status = 'completed'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(completed, RACERS as i64);
        drop(conn);
        assert_eq!(integrity(&scratch.database), "ok");
    }
}

/// The ids of the executions `journal` lists as recoverable.
fn recoverable_ids(journal: &Journal) -> Vec<Uuid> {
    journal
        .recoverable()
        .unwrap()
        .into_iter()
        .map(|record| record.execution_id)
        .collect()
}

#[test]
fn a_killed_holder_is_recoverable_and_swept_as_interrupted_and_then_resumes() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    let mut holder = Held::spawn(&["hold", scratch.database.to_str().unwrap(), &id.to_string()]);
    let held = holder.next_line();
    assert_eq!(held["held"].as_i64(), Some(holder.pid()));
    let runtime = runtime();
    let journal = Journal::open(&scratch.database).unwrap();

    let error = runtime
        .block_on(journal.open_execution(id, "test", "", &""))
        .unwrap_err();
    assert!(
        matches!(&error, Error::Locked { pid, .. } if *pid == holder.pid()),
        "{error:?}"
    );
    assert!(
        journal.recoverable().unwrap().is_empty(),
        "a live holder's execution is recoverable"
    );
    let report = runtime.block_on(journal.operator().sweep(false)).unwrap();
    assert!(
        report.reclaimed.is_empty(),
        "the sweep took a live holder's lock: {report:?}"
    );
    assert_eq!(
        journal.get(id).unwrap().unwrap().status,
        durably_journal::Status::Running
    );

    let pid = holder.pid();
    holder.kill();
    assert_eq!(recoverable_ids(&journal), [id]);
    let report = runtime.block_on(journal.operator().sweep(false)).unwrap();
    assert_eq!(report.reclaimed.len(), 1, "{report:?}");
    assert_eq!(
        (
            report.reclaimed[0].resource.clone(),
            report.reclaimed[0].pid
        ),
        (id.to_string(), pid)
    );
    assert_eq!(
        journal.get(id).unwrap().unwrap().status,
        durably_journal::Status::Interrupted
    );
    let reclaimed = journal
        .events(id)
        .unwrap()
        .into_iter()
        .filter(|event| event.kind == event_kind::ORPHAN_RECLAIMED)
        .count();
    assert_eq!(reclaimed, 1);
    // A second sweep finds nothing more to do.
    assert!(
        runtime
            .block_on(journal.operator().sweep(false))
            .unwrap()
            .reclaimed
            .is_empty()
    );
    assert_eq!(
        journal.recoverable().unwrap().len(),
        1,
        "interrupted is still recoverable"
    );

    let Opened::Running(execution) = runtime
        .block_on(journal.open_execution(id, "test", "", &""))
        .unwrap()
    else {
        panic!("an interrupted execution resumes");
    };
    assert!(execution.is_resume());
    let replayed: u32 = runtime
        .block_on(execution.pure("held", || async { Ok(0) }))
        .unwrap();
    assert_eq!(
        i64::from(replayed),
        pid,
        "the killed holder's step was not replayed"
    );
    runtime.block_on(execution.complete(&"resumed")).unwrap();
    assert!(journal.recoverable().unwrap().is_empty());
    drop(journal);
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn a_holder_that_drops_its_handle_leaves_the_execution_running_and_recoverable() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    let mut holder = Held::spawn(&["hold", scratch.database.to_str().unwrap(), &id.to_string()]);
    holder.next_line();
    assert_eq!(holder.close()["outcome"], "dropped");

    let journal = Journal::builder(&scratch.database)
        .sweep_on_open(false)
        .open()
        .unwrap();
    assert_eq!(
        journal.get(id).unwrap().unwrap().status,
        durably_journal::Status::Running
    );
    assert_eq!(recoverable_ids(&journal), [id]);
    let runtime = runtime();
    let Opened::Running(execution) = runtime
        .block_on(journal.open_execution(id, "test", "", &""))
        .unwrap()
    else {
        panic!("resumable");
    };
    assert!(execution.is_resume());
}
