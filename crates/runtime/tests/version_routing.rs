//! The routing rule of versions: an execution runs only on the code of the (kind, version) it
//! was started with. A process claims only the pairs it serves; an execution of a version it
//! does not serve stays queued for a process that does, and however many of those wait at the
//! head of a queue, they never hide the executions this process can run (the claim filters
//! served pairs in its query, not among a bounded read of candidates).
//!
//! Method: more executions of version 2 than one claim reads beyond its free places are
//! queued first (version 2 is registered in `workflow_kinds`, as a process serving it that is
//! down would leave it); a runtime serving only version 1 must then run a version 1 execution
//! queued behind them, and leave them queued; a runtime serving version 2 then runs them all,
//! each on version 2's code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use durably_runtime::{Client, Runtime, StartOptions, WorkflowContext, WorkflowError};
use support::Scratch;

/// More than a claim of one place reads beyond it (16), and than the most candidates one
/// claim ever reads (256): enough to starve version 1 before the routing filter was in the
/// claim's query.
const AHEAD: usize = 300;

/// How long a result may take before the test calls it starved.
const RESULT_WITHIN: Duration = Duration::from_mins(1);

/// Returns the version whose code ran it.
async fn versioned(context: WorkflowContext, _tag: u32) -> Result<u32, WorkflowError> {
    Ok(context.version())
}

fn statuses(scratch: &Scratch, version: u32) -> Vec<String> {
    scratch
        .journal
        .read(|conn| {
            let mut statement = conn.prepare(
                "SELECT DISTINCT e.status FROM executions AS e
                 JOIN runtime_executions AS r USING (execution_id)
                 WHERE r.version = ?1 ORDER BY 1",
            )?;
            let rows = statement.query_map([version], |row| row.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_version_is_claimed_behind_many_of_a_version_not_served() {
    let scratch = Scratch::new();
    let client = Client::new(scratch.journal.clone()).await.unwrap();
    scratch
        .journal
        .write(|conn| {
            conn.execute(
                "INSERT INTO workflow_kinds VALUES ('versioned', 2, '2026-01-01T00:00:00.000000Z',
                                                    '2026-01-01T00:00:00.000000Z')",
                [],
            )?;
            Ok(())
        })
        .await
        .unwrap();
    let mut ahead = Vec::new();
    for tag in 0..AHEAD {
        let id = durably_journal::new_execution_id();
        let tag = u32::try_from(tag).unwrap();
        let options = StartOptions::default();
        let handle = client.start::<_, u32>("versioned", id, &tag, options).await;
        ahead.push(handle.unwrap());
    }

    let old = Runtime::builder(scratch.journal.clone())
        .concurrency_max(1)
        .register("versioned", 1, versioned)
        .start()
        .await
        .unwrap();
    let id = durably_journal::new_execution_id();
    let behind = old
        .start::<_, u32>("versioned", id, &0_u32, StartOptions::default())
        .await
        .unwrap();
    let ran_on = tokio::time::timeout(RESULT_WITHIN, behind.result())
        .await
        .expect("the version 1 execution behind the version 2 ones was never claimed")
        .unwrap();
    assert_eq!(ran_on, 1);
    assert_eq!(
        statuses(&scratch, 2),
        ["queued"],
        "version 2 left for its own process"
    );
    let counted = &old.recovery_report().other_versions;
    assert_eq!(
        *counted,
        [("versioned".to_owned(), 2, AHEAD)],
        "reported at start"
    );

    let new = Runtime::builder(scratch.journal.clone())
        .register("versioned", 2, versioned)
        .start()
        .await
        .unwrap();
    for handle in &ahead {
        let ran_on = tokio::time::timeout(RESULT_WITHIN, handle.result())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ran_on, 2, "an execution ran on another version's code");
    }
    old.shutdown();
    new.shutdown();
}
