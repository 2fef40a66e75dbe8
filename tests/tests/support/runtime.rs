//! Helpers for the `runtime_*` tests: the `runtime_worker` helper process, and what its ledger
//! and the journal say about one execution of its workflow.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use uuid::Uuid;

use super::journal::{Run, finish};
use super::{Driven, Scratch, query_pairs, read_lines, spawn};

pub fn worker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runtime_worker"))
}

/// `runtime_worker run` on `id`, to its end, with extra environment.
pub fn run(scratch: &Scratch, id: Uuid, env: &[(&str, &str)]) -> Run {
    let mut command = worker();
    command
        .args(args(scratch, id, "go"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    finish(spawn(&mut command))
}

/// `runtime_worker run` on `id`, stopping inside its first step until it is sent a line.
pub fn gated(scratch: &Scratch, id: Uuid) -> Driven {
    Driven::start(worker().args(args(scratch, id, "gate")))
}

fn args(scratch: &Scratch, id: Uuid, gate: &str) -> Vec<String> {
    vec![
        "run".to_owned(),
        scratch.database.to_string_lossy().into_owned(),
        scratch.ledger.to_string_lossy().into_owned(),
        id.to_string(),
        gate.to_owned(),
    ]
}

/// One ledger line of the worker's workflow: `<step> <id> <key> <token> <value>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub step: String,
    pub key: String,
    pub token: u64,
    pub value: u64,
}

/// The ledger lines of execution `id`.
pub fn effects(ledger: &Path, id: Uuid) -> Vec<Effect> {
    read_lines(ledger)
        .into_iter()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let [step, execution, key, token, value] = words.as_slice() else {
                panic!("a damaged ledger line: {line:?}");
            };
            (*execution == id.to_string()).then(|| Effect {
                step: (*step).to_owned(),
                key: (*key).to_owned(),
                token: token.parse().unwrap(),
                value: value.parse().unwrap(),
            })
        })
        .collect()
}

/// The recorded result of each step of `id`, in seq order, as JSON text (`null` for none).
pub fn step_results(database: &Path, id: Uuid) -> Vec<(String, String)> {
    query_pairs(
        database,
        &format!(
            "SELECT name, coalesce(result, 'null') FROM steps WHERE execution_id = '{id}'
             ORDER BY seq"
        ),
    )
}

/// The run's answer: its output when it finished.
pub fn output(run: &Run) -> Value {
    let answer = run.answer();
    assert_eq!(answer["outcome"], "done", "{run:?}");
    answer["output"].clone()
}
