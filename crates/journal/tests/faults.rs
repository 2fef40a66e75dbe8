//! Faults inside one process: an oversized payload, a schema from the future, a garbage file,
//! a foreign SQLite file and a full disk each give a typed error, lose nothing acknowledged,
//! and leave a file that passes `PRAGMA integrity_check` (files that are not ours are left
//! byte for byte untouched).
//!
//! Method: acknowledged steps are recorded before the fault, the fault is provoked through the
//! public API (or by preparing the file with a raw SQLite connection), and afterwards the file
//! is checked with a fresh connection: the acknowledged steps are all there and intact.
//! (A read-only file and a writer held by another process need real child processes; they are
//! in `tests/tests/journal_faults_process.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use durably_journal::{Error, Journal, Opened, Resolution, SCHEMA_VERSION, rusqlite};
use support::{Scratch, barrier, integrity, start, step_rows};
use uuid::Uuid;

/// Writes `count` small acknowledged steps to a new execution and returns its id.
async fn acknowledged_steps(journal: &Journal, count: u32) -> Uuid {
    let id = Uuid::new_v4();
    let mut execution = start(journal, id).await;
    for seq in 0..count {
        let value: u32 = execution
            .pure(&format!("ack {seq}"), || async move { Ok(seq) })
            .await
            .unwrap();
        assert_eq!(value, seq);
    }
    drop(execution);
    barrier(journal).await;
    id
}

/// Every acknowledged step of `id` is present, in order, with its value.
fn assert_acknowledged(path: &Path, id: Uuid, count: u32) {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut statement = conn
        .prepare("SELECT seq, name, state, result FROM steps WHERE execution_id = ?1 ORDER BY seq")
        .unwrap();
    let rows: Vec<(u32, String, String, Option<String>)> = statement
        .query_map([id.to_string()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        rows.len() >= count as usize,
        "acknowledged steps lost: {} of {count}",
        rows.len()
    );
    for (seq, row) in rows.iter().take(count as usize).enumerate() {
        assert_eq!(row.0 as usize, seq);
        assert_eq!(row.1, format!("ack {seq}"));
        assert_eq!(row.2, "completed");
        assert_eq!(row.3.as_deref(), Some(seq.to_string().as_str()));
    }
}

#[tokio::test]
async fn an_oversized_payload_is_refused_and_nothing_is_written() {
    let scratch = Scratch::new();
    let journal = Journal::builder(&scratch.path)
        .payload_bytes_max(1024)
        .open()
        .unwrap();
    let id = acknowledged_steps(&journal, 3).await;
    let big = "x".repeat(2048);

    let fresh = Uuid::new_v4();
    let error = journal
        .open_execution(fresh, "test", "", &big)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::PayloadTooLarge { bytes, max: 1024, .. } if *bytes > 1024),
        "{error:?}"
    );
    assert!(
        journal.get(fresh).unwrap().is_none(),
        "an oversized input created an execution"
    );

    let Opened::Running(mut execution) = journal.open_execution(id, "test", "", &"").await.unwrap()
    else {
        panic!("resumable");
    };
    for seq in 0..3 {
        let _: u32 = execution
            .pure(&format!("ack {seq}"), || async { Ok(0) })
            .await
            .unwrap();
    }
    let error = execution
        .pure("too big", || {
            let big = big.clone();
            async move { Ok(big) }
        })
        .await
        .unwrap_err();
    assert!(matches!(error, Error::PayloadTooLarge { .. }), "{error:?}");
    let error = execution.complete(&big).await.unwrap_err();
    assert!(matches!(error, Error::PayloadTooLarge { .. }), "{error:?}");
    barrier(&journal).await;
    assert_eq!(
        journal.get(id).unwrap().unwrap().status,
        "running",
        "an oversized output finalized"
    );
    let error = journal
        .resolve(
            id,
            0,
            Resolution::Completed(serde_json::Value::String(big.clone())),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, Error::PayloadTooLarge { .. }), "{error:?}");
    drop(journal);
    assert_eq!(step_rows(&scratch.path, id), 3);
    assert_acknowledged(&scratch.path, id, 3);
    assert_eq!(integrity(&scratch.path), "ok");
}

#[tokio::test]
async fn a_recorded_payload_over_the_read_cap_is_refused_on_replay_and_the_lock_is_freed() {
    let scratch = Scratch::new();
    let id = Uuid::new_v4();
    {
        let journal = Journal::builder(&scratch.path)
            .payload_bytes_max(4096)
            .open()
            .unwrap();
        let mut execution = start(&journal, id).await;
        let _: String = execution
            .pure("big", || async { Ok("y".repeat(2000)) })
            .await
            .unwrap();
        drop(execution);
        barrier(&journal).await;
    }
    let small = Journal::builder(&scratch.path)
        .payload_bytes_max(1024)
        .open()
        .unwrap();
    let error = small.open_execution(id, "test", "", &"").await.unwrap_err();
    assert!(matches!(error, Error::PayloadTooLarge { .. }), "{error:?}");
    barrier(&small).await;
    // The failed open released its lock, so the same journal with a bigger cap can open it.
    let large = Journal::builder(&scratch.path)
        .payload_bytes_max(4096)
        .open()
        .unwrap();
    let Opened::Running(mut execution) = large.open_execution(id, "test", "", &"").await.unwrap()
    else {
        panic!("resumable");
    };
    let replayed: String = execution
        .pure("big", || async { Ok(String::new()) })
        .await
        .unwrap();
    assert_eq!(replayed.len(), 2000);
}

#[tokio::test]
async fn a_schema_from_the_future_is_refused_and_its_data_kept() {
    let scratch = Scratch::new();
    let id = {
        let journal = scratch.open();
        acknowledged_steps(&journal, 3).await
    };
    {
        let conn = rusqlite::Connection::open(&scratch.path).unwrap();
        conn.execute_batch("PRAGMA user_version = 999").unwrap();
    }
    let error = Journal::open(&scratch.path).unwrap_err();
    let Error::SchemaTooNew {
        found, supported, ..
    } = &error
    else {
        panic!("expected SchemaTooNew, got {error:?}");
    };
    assert_eq!((*found, *supported), (999, SCHEMA_VERSION));
    assert!(error.to_string().contains("upgrade durably"), "{error}");
    let version: i64 = rusqlite::Connection::open(&scratch.path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, 999, "the refused file's version was changed");
    assert_acknowledged(&scratch.path, id, 3);
    assert_eq!(integrity(&scratch.path), "ok");
}

/// Deterministic bytes that are not an SQLite file.
fn garbage(length: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..length)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 56) as u8
        })
        .collect()
}

fn directory_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_garbage_file_is_corrupt_and_left_untouched() {
    for (label, bytes) in [
        ("random bytes", garbage(64 * 1024)),
        (
            "a short text file",
            b"these are not the bytes you are looking for\n".to_vec(),
        ),
        ("a damaged header", {
            let mut bytes = b"SQLite format 3\0".to_vec();
            bytes.extend(garbage(8192));
            bytes
        }),
    ] {
        let scratch = Scratch::new();
        std::fs::write(&scratch.path, &bytes).unwrap();
        let entries = directory_entries(scratch.dir.path());
        let error = Journal::open(&scratch.path).unwrap_err();
        assert!(
            matches!(&error, Error::Corrupt { path, .. } if path.ends_with("journal.db")),
            "{label}: {error:?}"
        );
        assert!(
            std::fs::read(&scratch.path).unwrap() == bytes,
            "{label}: the file was changed"
        );
        assert_eq!(
            directory_entries(scratch.dir.path()),
            entries,
            "{label}: files were created"
        );
    }
}

#[test]
fn a_foreign_sqlite_file_is_refused_and_left_untouched() {
    for (label, setup) in [
        (
            "tables and no application id",
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
             INSERT INTO users (name) VALUES ('ada'), ('grace');",
        ),
        (
            "another application id",
            "PRAGMA application_id = 1234; CREATE TABLE t (x);",
        ),
        (
            "another application id and no tables",
            "PRAGMA application_id = 1234; PRAGMA user_version = 1;",
        ),
        (
            // The version of a durably schema, but not a durably file: migrating it would
            // add durably tables to someone else's database.
            "a schema version and no application id",
            "PRAGMA user_version = 1; CREATE TABLE locks (x);",
        ),
        (
            "a schema version from the future and no application id",
            "PRAGMA user_version = 999;",
        ),
    ] {
        let scratch = Scratch::new();
        {
            let conn = rusqlite::Connection::open(&scratch.path).unwrap();
            conn.execute_batch(setup).unwrap();
        }
        let bytes = std::fs::read(&scratch.path).unwrap();
        let entries = directory_entries(scratch.dir.path());
        let error = Journal::open(&scratch.path).unwrap_err();
        assert!(
            matches!(error, Error::ForeignDatabase { .. }),
            "{label}: {error:?}"
        );
        assert!(
            std::fs::read(&scratch.path).unwrap() == bytes,
            "{label}: the file was changed"
        );
        assert_eq!(
            directory_entries(scratch.dir.path()),
            entries,
            "{label}: files were created"
        );
        assert_eq!(integrity(&scratch.path), "ok");
    }
}

#[tokio::test]
async fn a_full_disk_is_disk_full_and_loses_nothing_acknowledged() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let mut execution = start(&journal, id).await;
    // max_page_count is a setting of one connection: set it on the writer's.
    journal
        .write(|conn| {
            let pages: i64 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
            conn.execute_batch(&format!("PRAGMA max_page_count = {}", pages + 40))?;
            Ok(())
        })
        .await
        .unwrap();
    let chunk = "z".repeat(12 * 1024);
    let mut acknowledged = 0_u32;
    let error = loop {
        assert!(acknowledged < 1_000, "the page cap never filled");
        let name = format!("ack {acknowledged}");
        let value = format!("{acknowledged}{chunk}");
        match execution
            .pure(&name, || {
                let value = value.clone();
                async move { Ok(value) }
            })
            .await
        {
            Ok(returned) => {
                assert_eq!(returned, value);
                acknowledged += 1;
            }
            Err(error) => break error,
        }
    };
    assert!(matches!(error, Error::DiskFull), "{error:?}");
    assert!(
        acknowledged > 0,
        "the cap left no room for the acknowledged steps"
    );
    // The writer carries on after a full disk: smaller writes that fit still commit.
    journal
        .write(|conn| Ok(conn.execute_batch("PRAGMA max_page_count = 1073741823")?))
        .await
        .unwrap();
    drop(execution);
    barrier(&journal).await;
    let steps = journal.steps(id).unwrap();
    assert_eq!(
        steps.len(),
        acknowledged as usize,
        "lost or extra steps after a full disk"
    );
    for (seq, step) in steps.iter().enumerate() {
        let expected = serde_json::to_string(&format!("{seq}{chunk}")).unwrap();
        assert_eq!(
            step.result.as_deref(),
            Some(expected.as_str()),
            "step {seq}"
        );
    }
    // And the execution resumes from there.
    let Opened::Running(mut execution) = journal.open_execution(id, "test", "", &"").await.unwrap()
    else {
        panic!("resumable");
    };
    for seq in 0..acknowledged {
        let _: String = execution
            .pure(&format!("ack {seq}"), || async { Ok(String::new()) })
            .await
            .unwrap();
    }
    let _: String = execution
        .pure("after", || async { Ok("room again".to_owned()) })
        .await
        .unwrap();
    execution.complete(&"done").await.unwrap();
    drop(journal);
    assert_eq!(integrity(&scratch.path), "ok");
}
