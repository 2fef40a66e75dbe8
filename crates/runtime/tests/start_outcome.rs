//! `Client::start_with_outcome` says whether the start created its execution, decided in the
//! start's own transaction: of many starts of one id racing from separate tasks, exactly one
//! says `New`, and every later start, and a start returned a deduplication key's holder, says
//! `Existing`. Method: concurrent starts on a multi-threaded runtime, outcomes counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use durably_runtime::{Client, OnDuplicate, Runtime, StartOptions, StartOutcome, WorkflowContext};
use support::Scratch;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_racing_start_creates_the_execution() {
    let scratch = Scratch::new();
    let registered = Runtime::builder(scratch.journal.clone())
        .register("noop", 1, |_context: WorkflowContext, (): ()| async {
            Ok::<_, durably_runtime::WorkflowError>(())
        })
        .start()
        .await
        .unwrap();
    // Registered, and served by nobody: what is started stays queued.
    registered.shutdown();
    drop(registered);
    let client = Client::new(scratch.journal.clone()).await.unwrap();
    let id = durably_journal::new_execution_id();
    let starts: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let options = StartOptions::default().dedup("nightly", OnDuplicate::Reject);
                let (handle, outcome) = client
                    .start_with_outcome::<_, ()>("noop", id, &(), options)
                    .await
                    .unwrap();
                assert_eq!(handle.id(), id);
                outcome
            })
        })
        .collect();
    let mut created = 0;
    for start in starts {
        if start.await.unwrap() == StartOutcome::New {
            created += 1;
        }
    }
    assert_eq!(created, 1, "one start created it, the others found it");

    let other = durably_journal::new_execution_id();
    let options = StartOptions::default().dedup("nightly", OnDuplicate::ReturnExisting);
    let (holder, outcome) = client
        .start_with_outcome::<_, ()>("noop", other, &(), options)
        .await
        .unwrap();
    assert_eq!((holder.id(), outcome), (id, StartOutcome::Existing));
}
