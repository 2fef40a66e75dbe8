//! The `fanout` example, run to its end as a user runs it: it kills its worker process with
//! SIGKILL while the planner's three parallel tool calls and its sub-agent's model call are
//! in flight, and resumes them in its own process. The journal then holds a completed planner
//! with exactly one child (the sub-agent), completed; each tool's effect and the sub-agent's
//! model call appear once in their fake providers' ledgers; and the tools were settled by
//! their `reconcile` policy as the crash left them: the two whose providers had served the
//! request were found without a second call, the one whose request had not gone out ran.
//! A second run on the same file is a new execution and leaves the first one's effects alone.
//!
//! It runs on the backend `DURABLY_TEST_BACKEND` names: on PostgreSQL the example and `durably
//! --db` are given the same URL (see `common::example`).
//!
//! The example binary is built by `cargo test --workspace` (examples are built with the tests);
//! run alone, build it first with `cargo build -p durably --example fanout`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::example::{
    Site, assert_each_effect_once, execution_id, guarded_steps, ledger, line_with, pairs, status,
};

/// The tools, each its own fake provider.
const TOOLS: [&str; 3] = ["flights", "hotels", "weather"];

/// Runs the example on `db` and returns the planner's id, after checking its journal.
fn run_and_check(db: &Site) -> String {
    let printed = db.run("fanout", &[]);
    line_with(&printed, "killed worker process");
    let id = execution_id(line_with(&printed, "completed"));
    assert_eq!(status(db, &id), "completed");

    // Every guarded step's effect once: the tools in the parent, the model call in the child.
    assert_each_effect_once(db, &id, |tool| {
        TOOLS.into_iter().find(|name| *name == tool).unwrap()
    });
    let children: Vec<(String, String)> = pairs(
        db,
        "SELECT child_id, status FROM runtime_children WHERE parent_id = ?1",
        &id,
    );
    let [(child, child_status)] = children.as_slice() else {
        panic!("the planner has children {children:?}, not one");
    };
    assert_eq!(child_status, "completed");
    assert_each_effect_once(db, child, |_| "model");

    // Each tool settled by its policy as the crash left it.
    let details: Vec<(String, String)> = pairs(
        db,
        "SELECT s.name, e.detail FROM events AS e
         JOIN steps AS s ON s.execution_id = e.execution_id AND s.seq = e.seq
         WHERE e.execution_id = ?1 AND e.kind = 'ambiguity_reconciled' ORDER BY s.seq",
        &id,
    );
    let reconciled: Vec<(String, bool)> = details
        .into_iter()
        .map(|(name, detail)| {
            let detail: serde_json::Value = serde_json::from_str(&detail).unwrap();
            (name, detail["found"].as_bool().unwrap())
        })
        .collect();
    let expected = [("flights", true), ("hotels", true), ("weather", false)];
    let expected: Vec<(String, bool)> = expected
        .iter()
        .map(|&(tool, found)| (tool.to_owned(), found))
        .collect();
    assert_eq!(reconciled, expected);
    // A tool found by its probe never ran again; the others started their closure twice.
    for step in guarded_steps(db, &id) {
        let found = step.name != "weather";
        assert_eq!(step.attempts, if found { 1 } else { 2 }, "{step:?}");
    }
    id
}

#[test]
fn the_planner_resumed_after_a_kill_mid_fanout_runs_each_tool_and_its_sub_agent_once() {
    let db = Site::new();

    let first = run_and_check(&db);
    let second = run_and_check(&db);
    assert_ne!(first, second);
    for tool in TOOLS {
        assert_eq!(ledger(&db, tool).len(), 2, "{tool}: one request per run");
    }
    assert_eq!(ledger(&db, "model").len(), 2);
}
