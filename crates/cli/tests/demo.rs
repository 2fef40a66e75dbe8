//! What these prove: `durably demo` runs end to end in well under 30 seconds, demonstrates
//! every policy with the effect counts its policies promise (it exits non-zero otherwise),
//! refuses to overwrite a database the user named, and, killed mid-run, leaves no child
//! process behind. It teaches what a newcomer needs and nothing false: it defines the three
//! step kinds before it names them, restarts a killed worker with no sweep (the restart takes
//! the dead worker's lock over, as the audit trail shows), says in one line what `sweep` is for,
//! and its POLICY AT WORK column reports the policy that acted, read from the journal, not the
//! one configured. Method: run the built binary on a scratch path, then check its output and
//! the database it left, or kill it and watch its child.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_code, durably, stderr, stdout};

#[test]
fn the_demo_proves_each_policy_and_leaves_a_readable_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let started = Instant::now();
    let output = durably(&["demo", "--db", db.to_str().unwrap()]);
    assert_code(&output, 0);
    assert!(started.elapsed() < Duration::from_secs(30));
    let text = stdout(&output);
    for expected in [
        "the reconcile probe found the charge",
        "stopped: step 2 (charge) is ambiguous",
        "resolve",
        "SKIPPED under the Skip policy",
        "ambiguity_retried",
        "Scheduler",
        "Every invariant held",
        "sqlite3 ",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(!text.contains("| NO"), "{text}");
    assert_kinds_defined_before_use(&text);
    assert_no_sweep_before_restarts(&text);
    assert_policy_at_work_is_what_acted(&text);
    let table: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("tick "))
        .collect();
    assert_eq!(table.len(), 5, "{text}");
    assert!(
        table.iter().all(|line| line.trim_end().ends_with("yes")),
        "{text}"
    );

    let conn = rusqlite::Connection::open(&db).unwrap();
    let completed: i64 = conn
        .query_row(
            "SELECT count(*) FROM executions WHERE status = 'completed'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(completed, 9, "4 checkouts and 5 fires");
    let stuck: i64 = conn
        .query_row("SELECT count(*) FROM ambiguous_steps", [], |row| row.get(0))
        .unwrap();
    assert_eq!(stuck, 1, "the execution left for the reader");

    let again = durably(&["demo", "--db", db.to_str().unwrap()]);
    assert_code(&again, 1);
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
}

/// Each step kind is defined, on a line of its own, before the demo first names it.
fn assert_kinds_defined_before_use(text: &str) {
    for kind in ["pure", "idempotent", "guarded"] {
        let defined = text
            .find(&format!("\n  {kind} "))
            .unwrap_or_else(|| panic!("{kind} is not defined:\n{text}"));
        let used = text
            .find(&format!("({kind})"))
            .unwrap_or_else(|| panic!("{kind} is never used:\n{text}"));
        assert!(
            defined < used,
            "{kind} is used before it is defined:\n{text}"
        );
    }
}

/// The four killed workers are restarted with no sweep: nothing is swept before the section left
/// for the reader, each restart takes the lock over itself, and one line says what `sweep` is
/// for.
fn assert_no_sweep_before_restarts(text: &str) {
    let (stories, left) = text
        .split_once("Left for you")
        .expect("a section left for the reader");
    assert!(!stories.contains("durably sweep:"), "{stories}");
    assert!(!stories.contains("orphan_reclaimed"), "{stories}");
    let takeovers = stories
        .lines()
        .filter(|line| line.contains("audit trail: takeover,"))
        .count();
    assert_eq!(takeovers, 4, "each restart takes the lock over:\n{stories}");
    assert!(
        stories.contains(
            "`durably sweep` exists to reclaim the executions of dead processes \
                          without resuming them"
        ),
        "{stories}"
    );
    assert!(
        left.contains("sweep"),
        "the reader is shown the command:\n{left}"
    );
}

/// The POLICY AT WORK cell of each row of the table, by (effect, order): the policy the journal
/// says acted, "not needed" where no crash made the step ambiguous, "-" for the idempotent fetch.
fn assert_policy_at_work_is_what_acted(text: &str) {
    let cells: Vec<Vec<&str>> = text
        .lines()
        .filter(|line| {
            ["fetch ", "charge ", "email "]
                .iter()
                .any(|start| line.starts_with(start))
        })
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .collect()
        })
        .collect();
    let acted = |effect: &str, order: u32| {
        let place = format!("order {order}");
        cells
            .iter()
            .find(|row| row[0] == effect && row[1] == place)
            .unwrap_or_else(|| panic!("no row for {effect} of {place}:\n{text}"))[2]
    };
    let expected = [
        ("charge", 1001, "reconcile (found it)"),
        ("email", 1001, "not needed"),
        ("charge", 1002, "fail, operator: not-done"),
        ("email", 1002, "not needed"),
        ("charge", 1003, "not needed"),
        ("email", 1003, "skip"),
        ("charge", 1004, "not needed"),
        ("email", 1004, "retry (ran it again, same key)"),
        ("charge", 1005, "not yet (left ambiguous)"),
    ];
    for (effect, order, policy) in expected {
        assert_eq!(
            acted(effect, order),
            policy,
            "{effect} of order {order}:\n{text}"
        );
    }
    for order in 1001..=1004 {
        assert_eq!(acted("fetch", order), "-", "{text}");
    }
}

/// A demo killed mid-run (SIGKILL: nothing of it runs after) takes its children with it. Its
/// first worker, which stops inside a guarded step and waits there for the demo to kill it,
/// ends by itself instead. A child that lived on would append to the effect ledger of the next
/// run on the same path, and that run would report effects that ran twice.
#[test]
fn a_killed_demo_leaves_no_child_running() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let mut demo = Command::new(env!("CARGO_BIN_EXE_durably"))
        .args(["demo", "--db", db.to_str().unwrap()])
        .env_remove("DURABLY_DB")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The demo relays its first worker's narration as "worker <pid>: ..." lines.
    let worker: u32 = BufReader::new(demo.stdout.take().unwrap())
        .lines()
        .map(Result::unwrap)
        .find_map(|line| {
            let rest = line.trim_start().strip_prefix("worker ")?;
            rest.split(':').next()?.parse().ok()
        })
        .expect("the demo names its first worker");
    demo.kill().unwrap();
    demo.wait().unwrap();

    // Its parent gone, a worker ends within milliseconds. Unwatched, it would wait at its crash
    // point for 20 s (the worker's own bound) and then go on: the deadline is well inside that.
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(worker) {
        assert!(
            Instant::now() < deadline,
            "worker {worker} outlived its demo"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process runs: it exists and is not a zombie waiting to be reaped.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state is the first field after the parenthesised command name.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}
