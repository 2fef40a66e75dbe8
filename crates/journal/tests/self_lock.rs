//! Guarantee: opening an execution that this very process already holds is refused with a
//! message that says so ("already open in this process (pid N); use the handle this process
//! holds"), never with "held by live process pid N", which would send the user to stop their
//! own process. This holds for a second open through the same journal and for an open through
//! another journal instance on the same file in the same process; `in_this_process` tells the
//! case apart for callers.
//!
//! Method: real journals on a scratch file; the second open's error variant, flag and message
//! are checked. (A holder in another process keeps the "held by live process" message:
//! tests/tests/journal_processes.rs.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_journal::Error;
use support::{Scratch, start};
use uuid::Uuid;

fn assert_in_this_process(error: &Error) {
    let Error::Locked {
        pid,
        in_this_process,
        ..
    } = error
    else {
        panic!("{error:?}")
    };
    assert_eq!(*pid, i64::from(std::process::id()));
    assert!(*in_this_process, "{error:?}");
    let text = error.to_string();
    assert!(text.contains("already open in this process"), "{text}");
    assert!(text.contains("use the handle this process holds"), "{text}");
    assert!(!text.contains("held by live process"), "{text}");
}

#[tokio::test]
async fn a_second_open_through_the_same_journal_names_this_process() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let _held = start(&journal, id).await;
    let error = journal
        .open_execution(id, "test", "", &"input")
        .await
        .unwrap_err();
    assert_in_this_process(&error);
}

#[tokio::test]
async fn an_open_through_another_journal_of_this_process_names_this_process() {
    let scratch = Scratch::new();
    let journal = scratch.open();
    let id = Uuid::new_v4();
    let _held = start(&journal, id).await;
    let other = scratch.open();
    let error = other
        .open_execution(id, "test", "", &"input")
        .await
        .unwrap_err();
    assert_in_this_process(&error);
}

#[test]
fn a_holder_elsewhere_keeps_the_stop_that_process_message() {
    let error = Error::Locked {
        execution_id: Uuid::nil(),
        pid: 7,
        since: "then".to_owned(),
        in_this_process: false,
    };
    let text = error.to_string();
    assert!(text.contains("held by live process pid 7"), "{text}");
}
