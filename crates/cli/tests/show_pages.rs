//! What these prove: `durably show` costs one page however long an execution is and however
//! large its payloads are. It prints at most `--limit` steps and events (100 by default), says
//! how to ask for the next page, and `--after` / `--events-after` continue exactly where the
//! page ended; a payload over the journal's cap is shown by its size, never read. Method: a
//! journal built through the library on the backend `DURABLY_TEST_BACKEND` names
//! (durably-testkit), with rows written in one transaction where many are needed, and the
//! built binary run on it as a child process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use durably::db::params;
use durably_testkit::TestDb;
use uuid::Uuid;

use common::{assert_code, assert_stdout_says, durably, json, open, runtime, stdout};

/// Steps in the long execution: two default pages and a bit.
const STEPS: u32 = 250;

/// Events in the long execution: one default page and a bit.
const EVENTS: u32 = 130;

/// A journal with one execution of [`STEPS`] completed steps and [`EVENTS`] audit events, the
/// result of step 7 a payload of `big_bytes` (over the default 1 MiB cap).
fn long_execution(db: &TestDb, big_bytes: usize) -> Uuid {
    let id = Uuid::new_v4();
    runtime().block_on(async {
        let journal = db.open();
        drop(open(&journal, id, "long").await);
        let big = format!("\"{}\"", "b".repeat(big_bytes));
        journal
            .write(move |conn| {
                let resource = id.to_string();
                for seq in 0..STEPS {
                    conn.execute(
                        "INSERT INTO steps (execution_id, seq, name, effect, state,
                                            idempotency_key, result, attempts, result_at)
                         VALUES (?1, ?2, 'step', 'pure', 'completed', ?3, ?4, 1,
                                 '2026-01-01T00:00:00.000Z')",
                        params![resource, seq, Uuid::new_v4().to_string(), seq.to_string()],
                    )?;
                }
                conn.execute(
                    "UPDATE steps SET result = ?2 WHERE execution_id = ?1 AND seq = 7",
                    params![resource, big],
                )?;
                for seq in 0..EVENTS {
                    conn.execute(
                        "INSERT INTO events (at, execution_id, seq, kind, detail)
                         VALUES ('2026-01-01T00:00:00.000Z', ?1, ?2, 'attempt_failed', '{}')",
                        params![resource, seq],
                    )?;
                }
                Ok(())
            })
            .await
            .unwrap();
        // The writer applies requests in order: the handle's release has committed too.
        journal.write(|_| Ok(())).await.unwrap();
    });
    id
}

fn seqs(shown: &serde_json::Value) -> Vec<u64> {
    shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step["seq"].as_u64().unwrap())
        .collect()
}

#[test]
fn show_prints_one_page_and_the_way_to_the_next() {
    let scratch = TestDb::new();
    let id = long_execution(&scratch, 8);
    let target = scratch.target();
    let (db, id) = (target.as_str(), id.to_string());

    // A journal no runtime used: `ls` lists it without a runtime section to read.
    assert_stdout_says(&durably(&["--db", db, "ls"]), &id);
    let first = durably(&["--db", db, "show", &id]);
    assert_stdout_says(&first, "steps (100)");
    assert_stdout_says(&first, &format!("durably show {id} --after 99`"));
    assert_stdout_says(&first, "audit events (100)");
    let text = stdout(&first);
    let events_after = text
        .split(&format!("durably show {id} --events-after "))
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_else(|| panic!("no next page of events: {text}"));

    let shown = json(&durably(&["--db", db, "--json", "show", &id]));
    assert_eq!(seqs(&shown), (0..100).collect::<Vec<_>>());
    assert_eq!(shown["steps_next_after"], 99);
    assert_eq!(shown["events"].as_array().unwrap().len(), 100);
    assert_eq!(shown["events_next_after"].to_string(), events_after);

    let middle = json(&durably(&[
        "--db", db, "--json", "show", &id, "--after", "99", "--limit", "120",
    ]));
    assert_eq!(seqs(&middle), (100..220).collect::<Vec<_>>());
    assert_eq!(middle["steps_next_after"], 219);

    let last = json(&durably(&[
        "--db",
        db,
        "--json",
        "show",
        &id,
        "--after",
        "219",
        "--events-after",
        events_after,
    ]));
    assert_eq!(seqs(&last), (220..STEPS.into()).collect::<Vec<_>>());
    assert!(last["steps_next_after"].is_null());
    assert_eq!(
        last["events"].as_array().unwrap().len(),
        (EVENTS - 100) as usize
    );
    assert!(last["events_next_after"].is_null());
    let last_text = stdout(&durably(&["--db", db, "show", &id, "--after", "219"]));
    assert!(!last_text.contains("more steps follow"), "{last_text}");

    assert_code(&durably(&["--db", db, "show", &id, "--limit", "0"]), 2);
    assert_code(&durably(&["--db", db, "show", &id, "--after", "-1"]), 2);
}

#[test]
fn show_gives_the_size_of_a_payload_over_the_cap_without_reading_it() {
    let scratch = TestDb::new();
    let big_bytes = 8 * 1024 * 1024;
    let id = long_execution(&scratch, big_bytes).to_string();
    let target = scratch.target();
    let db = target.as_str();

    let shown = json(&durably(&["--db", db, "--json", "show", &id]));
    assert_eq!(
        shown["steps"][7]["result_preview"],
        format!(
            "… ({} bytes, over the journal's payload cap: not read)",
            big_bytes + 2
        )
    );
    assert_eq!(shown["steps"][8]["result_preview"], "8");
}
