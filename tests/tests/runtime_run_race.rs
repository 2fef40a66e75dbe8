//! Two processes racing `Runtime::run` of one new id: both begin (nothing written), both run
//! the first step's idempotent closure with `FencingToken(0)`, then exactly one first write
//! opens the execution; the other's is refused (`OpenRaced`, nothing written), it runs no
//! later closure (no guarded one in particular), and it returns the winner's outcome.
//!
//! Method: two `runtime_worker` children run the same id with a gate inside the first step's
//! closure; the test waits until both are inside, then lets both go. Effects append
//! `<step> <id> <key> <token> <value>` to a shared ledger; the last (pure) step prints the
//! pid of the process that ran it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::runtime::{effects, gated};
use support::{Driven, Scratch, integrity};
use uuid::Uuid;

/// The lines a gated worker prints after its gate, up to and including its answer.
fn lines_until_done(worker: &mut Driven) -> Vec<Value> {
    let mut lines = Vec::new();
    loop {
        let line: Value = serde_json::from_str(&worker.line()).unwrap();
        let done = !line["outcome"].is_null();
        lines.push(line);
        if done {
            return lines;
        }
    }
}

#[test]
fn one_run_opens_the_other_writes_nothing_and_gets_the_same_outcome() {
    let scratch = Scratch::new();
    let id = Uuid::now_v7();
    let mut workers = [gated(&scratch, id), gated(&scratch, id)];
    let pids: Vec<u32> = workers.iter().map(Driven::pid).collect();
    for worker in &mut workers {
        let inside: Value = serde_json::from_str(&worker.line()).unwrap();
        assert_eq!(inside["inside"], worker.pid());
    }
    for worker in &mut workers {
        worker.send("go");
    }
    let said: Vec<Vec<Value>> = workers.iter_mut().map(lines_until_done).collect();
    let outputs: Vec<&Value> = said
        .iter()
        .map(|lines| &lines.last().unwrap()["output"])
        .collect();
    assert!(!outputs[0].is_null(), "{said:?}");
    assert_eq!(outputs[0], outputs[1], "the two runs disagree: {said:?}");
    let summarized: Vec<u64> = said
        .iter()
        .flatten()
        .filter_map(|line| line["summarized"].as_u64())
        .collect();
    assert_eq!(summarized.len(), 1, "not exactly one run went on: {said:?}");
    let winner = summarized[0];
    assert!(pids.iter().any(|pid| u64::from(*pid) == winner));
    assert_eq!(
        outputs[0]["reserved_by"], winner,
        "the recorded step is not the winner's"
    );

    let ledger = effects(&scratch.ledger, id);
    let of = |step: &str| ledger.iter().filter(|e| e.step == step).collect::<Vec<_>>();
    let reserves = of("reserve");
    assert_eq!(reserves.len(), 2, "{ledger:?}");
    assert!(
        reserves.iter().all(|e| e.token == 0),
        "a closure before the open had a token"
    );
    assert!(reserves.iter().any(|e| e.value == winner));
    assert_eq!(
        of("notify").len(),
        1,
        "the loser ran a closure after losing: {ledger:?}"
    );
    assert_eq!(
        of("charge").len(),
        1,
        "the loser ran the guarded step: {ledger:?}"
    );
    assert!(of("charge")[0].token > 0);
    for worker in workers {
        worker.finish();
    }
    assert_eq!(integrity(&scratch.database), "ok");
}
