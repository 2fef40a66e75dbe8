//! Guarantee: on PostgreSQL an execution belongs to one live instance, judged by the advisory
//! key its liveness session holds, whatever host or pid it runs as. A holder killed outright
//! (SIGKILL) is taken over at once at epoch + 1; a stopped holder (SIGSTOP) keeps its lock but
//! for its lease, and once taken over its next write is `LockLost` and writes nothing; a holder
//! whose liveness session is terminated is taken over, and itself gets `InstanceLost` and
//! writes nothing.
//!
//! Method: a `pg_holder` child opens the journal on a scratch schema of the server
//! `DURABLY_POSTGRES_URL` names (`durably_testkit`), opens an execution and records a step.
//! The test then kills, stops or cuts off the child, and opens the same execution from this
//! process with no orphan sweep, so the open itself takes it over and records a `takeover`
//! event. It waits on real events only: the server's `pg_locks` showing the child's key free,
//! `/proc` showing the child stopped, the child saying its liveness session is lost. Steps the
//! child tries after the takeover must leave no row.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chrono::Utc;
use durably_db::{Connection, PgConnection, params};
use durably_journal::{Guarded, Journal, Opened, Policy};
use durably_testkit::{Backend, TestDb};
use serde_json::Value;
use support::lock::{TestClock, resume, stop};
use support::{Driven, wait_until};
use uuid::Uuid;

/// The lease of the SIGSTOP test's holder; the taker's clock runs far past it.
const LEASE_MS: &str = "60000";

struct Place {
    db: TestDb,
    /// A session of this test in the scratch schema, for the checks.
    sql: Connection,
    id: Uuid,
}

impl Place {
    fn new() -> Self {
        let db = TestDb::on(Backend::Postgres);
        let sql = Connection::from(PgConnection::connect(&db.target(), "pg-ownership").unwrap());
        Self {
            db,
            sql,
            id: Uuid::now_v7(),
        }
    }

    /// A journal builder on the scratch schema, with no orphan sweep at open (so the open of
    /// the execution is what takes it over).
    fn builder(&self) -> durably_journal::JournalBuilder {
        Journal::builder(self.db.target()).sweep_on_open(false)
    }

    /// A `pg_holder` child holding the execution, and its instance id.
    fn holder(&self, lease: &str) -> (Driven, Uuid) {
        let target = self.db.target();
        let id = self.id.to_string();
        let mut child = Driven::spawn(env!("CARGO_BIN_EXE_pg_holder"), &[&target, &id, lease]);
        let ready: Value = serde_json::from_str(&child.line()).unwrap();
        let instance = ready["ready"].as_str().unwrap().parse().unwrap();
        assert_eq!(self.epoch(), 1);
        (child, instance)
    }

    fn epoch(&self) -> i64 {
        self.sql
            .query_row(
                "SELECT epoch FROM locks WHERE resource = ?1",
                params![self.id.to_string()],
                |row| row.get(0),
            )
            .unwrap()
    }

    /// The backend pids holding `instance`'s advisory key.
    fn key_holders(&self, instance: Uuid) -> Vec<i64> {
        let key = durably_lock::session_key(&instance).cast_unsigned();
        let (high, low) = ((key >> 32).cast_signed(), (key & 0xFFFF_FFFF).cast_signed());
        let mut statement = self
            .sql
            .prepare(
                "SELECT CAST(pid AS BIGINT) FROM pg_locks
                 WHERE locktype = 'advisory' AND granted AND objsubid = 1
                   AND CAST(classid AS BIGINT) = ?1 AND CAST(objid AS BIGINT) = ?2",
            )
            .unwrap();
        let pids = statement
            .query_map(params![high, low], |row| row.get(0))
            .unwrap();
        pids.collect::<Result<_, _>>().unwrap()
    }

    fn steps_named(&self, name: &str) -> i64 {
        self.sql
            .query_row(
                "SELECT count(*) FROM steps WHERE execution_id = ?1 AND name = ?2",
                params![self.id.to_string(), name],
                |row| row.get(0),
            )
            .unwrap()
    }

    fn events(&self) -> Vec<(String, String)> {
        let mut statement = self
            .sql
            .prepare("SELECT kind, CAST(detail AS TEXT) FROM events ORDER BY id")
            .unwrap();
        let events = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap();
        events.collect::<Result<_, _>>().unwrap()
    }

    fn takeover_reasons(&self) -> Vec<String> {
        let mut statement = self
            .sql
            .prepare(
                "SELECT detail ->> 'reason' FROM events
                 WHERE execution_id = ?1 AND kind = 'takeover' ORDER BY id",
            )
            .unwrap();
        let reasons = statement
            .query_map(params![self.id.to_string()], |row| row.get(0))
            .unwrap();
        reasons.collect::<Result<_, _>>().unwrap()
    }

    /// Opens the execution from this process, which must take it over at epoch 2, replays the
    /// steps the holder recorded (`replayed`) and records one more under the new epoch.
    async fn take_over(&self, journal: &Journal, replayed: &[&str]) {
        let Opened::Running(execution) = journal
            .open_execution(self.id, "worker", "pg", &"input")
            .await
            .unwrap()
        else {
            panic!("the execution was finished");
        };
        assert_eq!(
            self.epoch(),
            2,
            "taken over at epoch + 1: {:?}",
            self.events()
        );
        for name in replayed {
            let replay = execution
                .guarded(name, Policy::Fail, |_key| async {
                    Err::<u32, _>(durably_journal::StepError::fatal(
                        "a replay ran the closure",
                    ))
                })
                .await
                .unwrap();
            assert!(
                matches!(replay, Guarded::Done(_)),
                "{name} was not replayed"
            );
        }
        let taken = execution
            .guarded("taker", Policy::Fail, |_key| async { Ok(3_u32) })
            .await
            .unwrap();
        assert!(matches!(taken, Guarded::Done(3)));
    }
}

fn step_answer(child: &mut Driven, name: &str) -> Value {
    child.send(&format!("step {name}"));
    serde_json::from_str(&child.line()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_holder_is_taken_over_at_once() {
    let place = Place::new();
    let (mut child, instance) = place.holder("none");
    assert_eq!(step_answer(&mut child, "before")["step"], "ok");
    assert_eq!(place.key_holders(instance).len(), 1);

    child.kill();
    wait_until("the killed holder's key is free", || {
        place.key_holders(instance).is_empty()
    });
    let journal = place.builder().open().unwrap();
    place.take_over(&journal, &["first", "before"]).await;
    let reasons = place.takeover_reasons();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].contains("liveness session has ended"),
        "{reasons:?}"
    );
    assert_eq!(place.steps_named("before"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_holder_keeps_its_lock_but_for_its_lease_and_then_writes_nothing() {
    let place = Place::new();
    let (mut child, instance) = place.holder(LEASE_MS);
    stop(child.pid());

    // Its session lives on (the kernel answers for a stopped process), so on the real clock
    // it is alive, and its lease runs.
    assert_eq!(place.key_holders(instance).len(), 1);
    let journal = place.builder().open().unwrap();
    let refused = journal
        .open_execution(place.id, "worker", "pg", &"input")
        .await
        .err()
        .unwrap();
    assert!(
        matches!(refused, durably_journal::Error::Locked { .. }),
        "{refused}"
    );
    drop(journal);

    let far = TestClock::at(Utc::now() + chrono::Duration::days(1));
    let journal = place.builder().clock(far).open().unwrap();
    place.take_over(&journal, &["first"]).await;
    let reasons = place.takeover_reasons();
    assert!(reasons[0].contains("lease expired"), "{reasons:?}");

    resume(child.pid());
    let answer = step_answer(&mut child, "after-sigcont");
    assert_eq!(answer["kind"], "lock_lost", "{answer}");
    assert_eq!(
        place.steps_named("after-sigcont"),
        0,
        "a fenced holder wrote a step"
    );
    assert_eq!(place.epoch(), 2);
    child.finish();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_session_is_terminated_is_taken_over_and_writes_nothing() {
    let place = Place::new();
    let (mut child, instance) = place.holder("none");
    let liveness = place.key_holders(instance);
    assert_eq!(liveness.len(), 1);

    let terminated: bool = place
        .sql
        .query_row(
            "SELECT pg_terminate_backend(?1)",
            params![liveness[0]],
            |row| row.get(0),
        )
        .unwrap();
    assert!(terminated);
    wait_until("the terminated session's key is free", || {
        place.key_holders(instance).is_empty()
    });
    let journal = place.builder().open().unwrap();
    place.take_over(&journal, &["first"]).await;
    assert!(
        place.takeover_reasons()[0].contains("liveness session has ended"),
        "{:?}",
        place.takeover_reasons()
    );

    child.send("await-lost");
    let lost: Value = serde_json::from_str(&child.line()).unwrap();
    assert_eq!(
        lost["lost"], true,
        "the holder never noticed its lost session"
    );
    let answer = step_answer(&mut child, "after-terminate");
    assert_eq!(answer["kind"], "instance_lost", "{answer}");
    assert_eq!(place.steps_named("after-terminate"), 0);
    assert_eq!(place.epoch(), 2);
    child.finish();
}
