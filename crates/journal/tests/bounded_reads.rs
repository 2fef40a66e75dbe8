//! Reading a journal costs at most the payload cap, whatever a stored payload's size: a payload
//! over the cap is refused ([`Error::PayloadTooLarge`], naming it) by every reading query, a
//! journal's or an inspector's, and by an open, and left out of previews, before SQLite or the
//! journal reads it.
//!
//! Method: rows with a 100 MB payload are written directly (a foreign writer, or a journal with
//! a larger cap, could have written them), and every reading path is run with SQLite's own
//! memory high-water mark reset just before it. SQLite counts every byte it allocates, page
//! cache and the values it reads included, so a path that loaded the payload would leave a mark
//! of over 100 MB; the bound asserted is far below that. One test function, so no other test in
//! this process moves the mark meanwhile.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_journal::durably_db::params;
use durably_journal::rusqlite::ffi;
use durably_journal::{Error, Opened};
use support::{Scratch, start};
use uuid::Uuid;

/// The size of the oversized payloads.
const HUGE_BYTES: usize = 100 * 1024 * 1024;

/// What SQLite may allocate while refusing or previewing them: far under [`HUGE_BYTES`].
const SQLITE_HEAP_BOUND_BYTES: i64 = 16 * 1024 * 1024;

/// Resets SQLite's heap high-water mark.
fn reset_sqlite_peak() {
    // SAFETY: sqlite3_memory_highwater only reads and resets SQLite's own counter.
    unsafe { ffi::sqlite3_memory_highwater(1) };
}

/// SQLite's heap high-water mark since the last reset, in bytes.
fn sqlite_peak() -> i64 {
    // SAFETY: as above; 0 leaves the counter as it is.
    unsafe { ffi::sqlite3_memory_highwater(0) }
}

/// Runs `read` and returns its result with SQLite's heap high-water mark while it ran.
fn with_sqlite_peak<T>(read: impl FnOnce() -> T) -> (T, i64) {
    reset_sqlite_peak();
    let value = read();
    (value, sqlite_peak())
}

/// Checks that `outcome` is `PayloadTooLarge` naming `names`, and that SQLite stayed small
/// meanwhile. A wrong outcome is described without its payloads.
fn assert_refused<T>(what: &str, outcome: (Result<T, Error>, i64), names: &str) {
    let (result, peak) = outcome;
    match result {
        Err(Error::PayloadTooLarge {
            what: named, bytes, ..
        }) => {
            assert!(named.contains(names), "{what}: the error names {named:?}");
            assert!(bytes > HUGE_BYTES, "{what}: {bytes} bytes");
        }
        Err(other) => panic!("{what}: {other}"),
        Ok(_) => panic!("{what}: read, not refused (SQLite's heap peaked at {peak} bytes)"),
    }
    assert!(
        peak < SQLITE_HEAP_BOUND_BYTES,
        "{what}: SQLite's heap peaked at {peak} bytes"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_payload_over_the_cap_is_refused_or_left_out_before_it_is_read() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let (big_input, big_result) = (Uuid::new_v4(), Uuid::new_v4());
    for id in [big_input, big_result] {
        let execution = start(&journal, id).await;
        let _: u32 = execution.pure("small", || async { Ok(1) }).await.unwrap();
    }
    let huge = format!("\"{}\"", "x".repeat(HUGE_BYTES));
    journal
        .write(move |conn| {
            conn.execute(
                "UPDATE executions SET input = ?2 WHERE execution_id = ?1",
                params![big_input.to_string(), huge],
            )?;
            conn.execute(
                "UPDATE steps SET result = ?2 WHERE execution_id = ?1 AND seq = 0",
                params![big_result.to_string(), huge],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    let input_name = format!("input of execution {big_input}");
    let result_name = format!("result of step 0 of execution {big_result}");

    assert_refused(
        "get",
        with_sqlite_peak(|| journal.get(big_input)),
        &input_name,
    );
    let list = with_sqlite_peak(|| journal.list(&durably_journal::ListFilter::default()));
    assert_refused("list", list, &input_name);
    assert_refused(
        "steps",
        with_sqlite_peak(|| journal.steps(big_result)),
        &result_name,
    );
    let page = with_sqlite_peak(|| journal.steps_page(big_result, None, 10));
    assert_refused("steps_page", page, &result_name);

    let (preview, peak) = with_sqlite_peak(|| journal.previews().get(big_input));
    let input = preview.unwrap().unwrap().input;
    assert_eq!((input.head, input.bytes), (None, HUGE_BYTES as u64 + 2));
    assert!(peak < SQLITE_HEAP_BOUND_BYTES, "preview get: {peak} bytes");
    let (previews, peak) = with_sqlite_peak(|| journal.previews().steps_page(big_result, None, 10));
    let result = previews.unwrap()[0].result.clone().unwrap();
    assert_eq!((result.head, result.bytes), (None, HUGE_BYTES as u64 + 2));
    assert!(
        peak < SQLITE_HEAP_BOUND_BYTES,
        "preview steps: {peak} bytes"
    );

    // An inspector reads with the same queries, under its builder's cap (here the default).
    let inspector = durably_journal::Journal::inspect(scratch.path()).unwrap();
    let list = with_sqlite_peak(|| inspector.list(&durably_journal::ListFilter::default()));
    assert_refused("inspector list", list, &input_name);
    let page = with_sqlite_peak(|| inspector.steps_page(big_result, None, 10));
    assert_refused("inspector steps_page", page, &result_name);
    let (previews, peak) = with_sqlite_peak(|| {
        inspector
            .previews()
            .list(&durably_journal::ListFilter::default())
    });
    let inputs: Vec<_> = previews.unwrap().into_iter().map(|row| row.input).collect();
    assert!(
        inputs.iter().any(|input| input.head.is_none()),
        "the huge input was previewed"
    );
    assert!(
        peak < SQLITE_HEAP_BOUND_BYTES,
        "inspector previews: {peak} bytes"
    );
    drop(inspector);

    // Opening refuses too: the stored input, and a recorded step replay would read.
    for (id, name) in [(big_input, &input_name), (big_result, &result_name)] {
        reset_sqlite_peak();
        let opened = journal.open_execution(id, "test", "a test", &"input").await;
        let peak = sqlite_peak();
        assert!(!matches!(opened, Ok(Opened::Running(_))), "{id} was opened");
        assert_refused("open", (opened.map(|_| ()), peak), name);
    }
}
