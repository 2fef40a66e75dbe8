//! Faults that need another process: a read-only database file and a writer that holds
//! SQLite's write lock past the busy timeout. Each gives a typed error (`ReadOnly`, `Busy`),
//! never a panic or a hang, loses nothing acknowledged, and leaves a file that passes
//! `PRAGMA integrity_check`.
//!
//! Method: acknowledged steps are written first. For the read-only file, a `journal_worker`
//! child opens it after `chmod 0444`; when the tests run as root, whom permissions do not stop,
//! the child runs as user `nobody` instead, so the file is read-only for it for real. For the
//! busy writer, a child holds `BEGIN IMMEDIATE` on its own connection while this process writes
//! with a 200 ms busy timeout. Afterwards the acknowledged steps are read back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod journal_support;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};

use durably_journal::{Error, Journal, Opened, Policy, StepError};
use journal_support::{Held, Scratch, finish, integrity, worker};
use uuid::Uuid;

/// The uid and gid of `nobody`, for running a child without root's powers.
const NOBODY: u32 = 65_534;

async fn write_acknowledged(journal: &Journal, id: Uuid, count: u32) {
    let Opened::Running(mut execution) = journal.open_execution(id, "test", "", &"").await.unwrap()
    else {
        panic!("a new execution is not finished");
    };
    for seq in 0..count {
        let _: u32 = execution
            .pure(&format!("ack {seq}"), || async move { Ok(seq) })
            .await
            .unwrap();
    }
    drop(execution);
    journal.write(|_| Ok(())).await.unwrap();
}

fn assert_acknowledged(journal: &Journal, id: Uuid, count: u32) {
    let steps = journal.steps(id).unwrap();
    assert!(steps.len() >= count as usize, "acknowledged steps lost");
    for (seq, step) in steps.iter().take(count as usize).enumerate() {
        assert_eq!(
            (step.name.clone(), step.result.clone()),
            (format!("ack {seq}"), Some(seq.to_string()))
        );
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_read_only_file_is_read_only_and_loses_nothing() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    let runtime = runtime();
    {
        let journal = Journal::open(&scratch.database).unwrap();
        runtime.block_on(write_acknowledged(&journal, id, 3));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let as_root = unsafe { libc::geteuid() } == 0;
    std::fs::set_permissions(&scratch.database, std::fs::Permissions::from_mode(0o444)).unwrap();
    // Others may enter the directory but, like the file, not write to it.
    std::fs::set_permissions(scratch.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bytes = std::fs::read(&scratch.database).unwrap();

    let mut command = worker();
    command
        .args(["open", scratch.database.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if as_root {
        // std drops root's supplementary groups when it switches the uid.
        command.uid(NOBODY).gid(NOBODY);
    }
    let answer = finish(command.spawn().unwrap()).answer().clone();
    assert_eq!(
        (answer["outcome"].as_str(), answer["kind"].as_str()),
        (Some("error"), Some("read_only")),
        "{answer}"
    );
    assert!(
        std::fs::read(&scratch.database).unwrap() == bytes,
        "a read-only file was changed"
    );

    std::fs::set_permissions(&scratch.database, std::fs::Permissions::from_mode(0o600)).unwrap();
    let journal = Journal::open(&scratch.database).unwrap();
    assert_acknowledged(&journal, id, 3);
    drop(journal);
    assert_eq!(integrity(&scratch.database), "ok");
}

#[test]
fn a_writer_held_past_the_busy_timeout_is_busy_and_loses_nothing() {
    let scratch = Scratch::new();
    let runtime = runtime();
    let journal = Journal::builder(&scratch.database)
        .busy_timeout_ms(200)
        .open()
        .unwrap();
    let (id, other) = (Uuid::new_v4(), Uuid::new_v4());
    runtime.block_on(write_acknowledged(&journal, id, 3));
    let Opened::Running(mut guarded_execution) = runtime
        .block_on(journal.open_execution(other, "test", "", &""))
        .unwrap()
    else {
        panic!("new");
    };

    let holder = Held::spawn(&["hold-write", scratch.database.to_str().unwrap()]);
    assert!(holder.next_line()["locked"].is_number());

    let error = runtime
        .block_on(journal.open_execution(id, "test", "", &""))
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::Busy {
                busy_timeout_ms: 200
            }
        ),
        "{error:?}"
    );
    assert!(error.is_retryable());
    let effects = AtomicU32::new(0);
    let error = runtime
        .block_on(guarded_execution.guarded("charge", Policy::Retry, |_key| {
            effects.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, StepError>(1_u32) }
        }))
        .unwrap_err();
    assert!(matches!(error, Error::Busy { .. }), "{error:?}");
    assert_eq!(
        effects.load(Ordering::SeqCst),
        0,
        "an effect ran without a durable intent"
    );
    drop(guarded_execution);

    assert_eq!(holder.close()["outcome"], "released");
    // With the writer gone, the same journal writes again, and nothing acknowledged is lost.
    let Opened::Running(mut execution) = runtime
        .block_on(journal.open_execution(id, "test", "", &""))
        .unwrap()
    else {
        panic!("resumable");
    };
    for seq in 0..3 {
        let _: u32 = runtime
            .block_on(execution.pure(&format!("ack {seq}"), || async { Ok(99) }))
            .unwrap();
    }
    let _: u32 = runtime
        .block_on(execution.pure("after", || async { Ok(4) }))
        .unwrap();
    runtime.block_on(execution.complete(&"done")).unwrap();
    assert_acknowledged(&journal, id, 3);
    assert!(
        journal.steps(other).unwrap().is_empty(),
        "the busy intent was written after all"
    );
    drop(journal);
    assert_eq!(integrity(&scratch.database), "ok");
}
