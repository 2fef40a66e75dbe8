//! The bodies of the fuzz targets in `fuzz/`, as plain functions so the committed corpora also
//! run as ordinary tests on stable Rust (`tests/tests/fuzz_corpora.rs`).
//!
//! Each target panics only when it finds a bug: a panic inside the engine, or a broken
//! guarantee that the target checks.

use std::time::Duration;

use durably_journal::{Error, Journal, Opened};
use durably_scheduler::{Schedule, Slot};

use crate::model;

/// Writes `data` to a file and opens it as a journal. Opening must return a journal or a typed
/// error, never panic; an opened journal must answer the read API and take one execution; a
/// file refused as corrupt or foreign must be left byte for byte as it was.
pub fn open_bytes(data: &[u8]) {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let path = dir.path().join("fuzz.db");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let opened = Journal::builder(&path)
        .busy_timeout_ms(100)
        .readers_max(1)
        .open();
    match opened {
        Ok(journal) => exercise(&journal),
        Err(Error::Corrupt { .. } | Error::ForeignDatabase { .. }) => {
            let after = std::fs::read(&path).unwrap_or_default();
            assert!(
                after == data,
                "a file refused as corrupt or foreign was changed ({} bytes became {})",
                data.len(),
                after.len()
            );
        }
        Err(_) => {}
    }
}

/// Reads everything through the public API and runs one execution to completion. Errors are
/// fine (the file may be damaged past its header); panics are not.
fn exercise(journal: &Journal) {
    let _ = journal.list(&durably_journal::ListFilter::default());
    let _ = journal.recoverable();
    let _ = journal.lock_holders();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    runtime.block_on(async {
        let id = uuid::Uuid::from_u128(0xF022);
        let _ = journal.steps(id);
        if let Ok(Opened::Running(execution)) = journal.open_execution(id, "fuzz", "fuzz", &0).await
        {
            let _ = execution
                .pure("fuzz", || async { Ok::<_, durably_journal::StepError>(1) })
                .await;
            let _ = execution.complete(&"done").await;
        }
        let _ = journal.operator().sweep(false).await;
        let _ = journal
            .operator()
            .collect_garbage(journal.operator().default_gc_options(), |_| {})
            .await;
    });
}

/// Decodes an operation sequence (with crash points) and checks it against the model.
pub fn operations(data: &[u8]) {
    let case = model::case_from_bytes(data);
    if let Err(mismatch) = model::check(&case) {
        panic!("the journal disagrees with the model: {mismatch}\ncase: {case:?}");
    }
}

/// Parses arbitrary text as a cron expression (and a time zone) and arbitrary numbers as an
/// interval: a schedule or a typed error, never a panic; a schedule answers its queries.
pub fn schedule_parse(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (expr, tz) = text.split_once('\n').unwrap_or((&text, "UTC"));
    if let Ok(schedule) = Schedule::cron(expr, tz) {
        query(&schedule);
    }
    let mut numbers = [0_u8; 16];
    for (slot, byte) in numbers.iter_mut().zip(data) {
        *slot = *byte;
    }
    let (every, anchor) = numbers.split_at(8);
    let every = Duration::from_millis(u64::from_le_bytes(every.try_into().unwrap_or_default()));
    let anchor = i64::from_le_bytes(anchor.try_into().unwrap_or_default());
    if let Ok(anchor) = Slot::from_millis(anchor)
        && let Ok(schedule) = Schedule::interval(every, anchor)
    {
        query(&schedule);
    }
}

/// The queries of a schedule must answer without panicking, and agree with each other: the
/// next slot after an instant is after it, the latest at or before it is not.
fn query(schedule: &Schedule) {
    let _ = schedule.definition();
    for millis in [0, 1_767_225_600_000, -1_000, i64::from(i32::MAX)] {
        let Ok(at) = Slot::from_millis(millis) else {
            continue;
        };
        if let Ok(Some(next)) = schedule.next_after(at) {
            assert!(next > at, "next_after({at:?}) gave {next:?}");
        }
        if let Ok(Some(latest)) = schedule.latest_at_or_before(at) {
            assert!(latest <= at, "latest_at_or_before({at:?}) gave {latest:?}");
        }
        let _ = schedule.slots_between(at, Slot::MAX, 3);
    }
}
