//! What these prove: `durably show` prints an execution's parent and its children as a tree
//! (kind and status of each, nested), in text and JSON; `durably ls --parent ID` lists the
//! children of an execution in start order; and `durably cancel` of a parent cancels its
//! unfinished children in the same transaction.
//!
//! Method: the test process runs a runtime whose `family` workflow starts two children of a
//! kind that a stopped runtime registered (so they stay queued), then one `family` child of
//! its own kind on the second level, and awaits the first; the built binary runs as a child
//! process on the same journal, on the backend `DURABLY_TEST_BACKEND` names (durably-testkit;
//! on PostgreSQL, `--db` is the scratch schema's URL).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{assert_code, durably, json, stdout};
use durably::runtime::{
    ChildOptions, Runtime, StartOptions, WorkflowContext, WorkflowError, child_execution_id,
};
use durably::{Journal, Status};

/// Starts two `report` children (which nobody runs), and, for input 1, a `family` child with
/// input 0; then awaits the first child.
async fn family(context: WorkflowContext, level: u32) -> Result<(), WorkflowError> {
    let first = context
        .start_child::<(), ()>("report", &(), ChildOptions::default())
        .await?;
    context
        .start_child::<(), ()>("report", &(), ChildOptions::default().name("second"))
        .await?;
    if level > 0 {
        context
            .start_child::<u32, ()>("family", &(level - 1), ChildOptions::default())
            .await?;
    }
    first.result(&context).await?;
    Ok(())
}

fn wait_for(journal: &Journal, id: uuid::Uuid, status: Status) {
    for _ in 0..3000 {
        if journal
            .get(id)
            .unwrap()
            .is_some_and(|record| record.status == status)
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{id} never reached {status}");
}

#[test]
fn show_prints_the_tree_ls_lists_children_and_cancel_takes_them_along() {
    let db = durably_testkit::TestDb::new();
    let target = db.target();
    let db_arg = target.as_str();
    // The runtime's tasks run on their own threads while the test waits and runs the binary.
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let journal = db.open();
    let runtime = tokio.block_on(async {
        let stopped = Runtime::builder(journal.clone())
            .register("report", 1, |_context: WorkflowContext, (): ()| async {
                Ok::<_, WorkflowError>(())
            })
            .start()
            .await
            .unwrap();
        stopped.shutdown();
        drop(stopped);
        Runtime::builder(journal.clone())
            .register("family", 1, family)
            .park_after(Duration::ZERO)
            .start()
            .await
            .unwrap()
    });
    let id = durably::new_execution_id();
    tokio
        .block_on(runtime.start::<u32, ()>("family", id, &1, StartOptions::default()))
        .unwrap();
    let grandparent_of = child_execution_id(id, 2);
    wait_for(&journal, id, Status::Waiting);
    wait_for(&journal, grandparent_of, Status::Waiting);

    let shown = stdout(&durably(&["--db", db_arg, "show", &id.to_string()]));
    assert!(shown.contains("children (3 of 3)"), "{shown}");
    let first = child_execution_id(id, 0);
    assert!(
        shown.contains(&format!("  step 0  {first}  report  queued")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("  step 2  {grandparent_of}  family  waiting")),
        "{shown}"
    );
    let grandchild = child_execution_id(grandparent_of, 0);
    assert!(
        shown.contains(&format!("    step 0  {grandchild}  report  queued")),
        "{shown}"
    );

    let child_shown = stdout(&durably(&["--db", db_arg, "show", &first.to_string()]));
    assert!(
        child_shown.contains(&format!("parent     {id} (step 0)")),
        "{child_shown}"
    );
    let as_json = json(&durably(&[
        "--db",
        db_arg,
        "--json",
        "show",
        &id.to_string(),
    ]));
    assert_eq!(as_json["children_count"], 3);
    assert_eq!(as_json["parent"], serde_json::Value::Null);
    assert_eq!(as_json["children"][2]["children_count"], 2);
    assert_eq!(
        as_json["children"][2]["children"][0]["execution_id"],
        grandchild.to_string()
    );

    let parent = id.to_string();
    let children_listed = |extra: &[&str]| {
        let mut args = vec!["--db", db_arg, "--json", "ls", "--parent", &parent];
        args.extend(extra);
        let listed = json(&durably(&args));
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["execution_id"].as_str().unwrap().to_owned())
            .collect::<Vec<String>>()
    };
    assert_eq!(
        children_listed(&[]),
        [
            first.to_string(),
            child_execution_id(id, 1).to_string(),
            grandparent_of.to_string()
        ]
    );
    assert_eq!(
        children_listed(&["--kind", "family"]),
        [grandparent_of.to_string()]
    );

    let cancelled = durably(&["--db", db_arg, "cancel", &id.to_string()]);
    assert_code(&cancelled, 0);
    for child in [first, child_execution_id(id, 1), grandparent_of, grandchild] {
        let status = journal.get(child).unwrap().unwrap().status;
        assert_eq!(status, Status::Cancelled, "{child}");
    }
    runtime.shutdown();
}
