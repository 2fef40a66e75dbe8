//! The PostgreSQL side of the lock: an instance is alive exactly while a session holds its
//! advisory key, whatever host or pid it stamped; a fence locks the lock row so a takeover waits
//! for the fenced write and the fenced holder then sees the new epoch; and an instance whose
//! liveness session is gone writes nothing more.
//!
//! Each test uses several real sessions of the server `DURABLY_POSTGRES_URL` names (as
//! `.ci/pg start` prints it), in a schema of its own, and synchronizes on the server's own view
//! of who waits on a lock (`pg_stat_activity`), never on sleeps. Built with the `postgres`
//! feature only; then a missing server fails the tests, which never skip.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::thread;
use std::time::{Duration, Instant};

use durably_db::{Connection, PgConnection, params};
use durably_lock::{
    Acquire, DeathReason, Error, Judgement, Liveness, Locker, LockerConfig, SessionLiveness,
    session_key,
};
use uuid::Uuid;

/// How long a test waits for the server to show an expected state before failing.
const WAIT_MAX: Duration = Duration::from_secs(20);

/// A schema of one test with the PostgreSQL `locks` table, dropped at the end.
struct Scratch {
    url: String,
    schema: String,
}

impl Scratch {
    fn new() -> Self {
        let url = std::env::var("DURABLY_POSTGRES_URL").unwrap_or_else(|_| {
            panic!(
                "DURABLY_POSTGRES_URL is unset: start a private server with \
                 `eval \"$(.ci/pg start)\"`, or run the tests under `.ci/pg run cargo test ...`"
            )
        });
        let schema = format!("lock_t_{}", Uuid::new_v4().simple());
        let scratch = Self { url, schema };
        let conn = scratch.session("setup");
        conn.execute_batch(include_str!("../../../schema/postgres/0001_journal.sql"))
            .unwrap();
        scratch
    }

    /// A new session whose tables are this test's.
    fn session(&self, role: &str) -> Connection {
        let pg = PgConnection::connect(&self.url, role).unwrap();
        pg.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {0}; SET search_path = {0}",
            self.schema
        ))
        .unwrap();
        Connection::from(pg)
    }

    fn locker(&self, role: &str) -> (Locker, SessionLiveness) {
        let session = SessionLiveness::hold(self.session(role)).unwrap();
        let locker = Locker::new(LockerConfig::new(Liveness::Session(session.clone()))).unwrap();
        (locker, session)
    }
}

/// Two instances in a scratch schema: the holder of lock `r` at `epoch`, with the session its
/// fenced writes run on, and a would-be taker with its own.
struct Contest {
    holder: Locker,
    holder_conn: Connection,
    taker: Locker,
    epoch: u64,
    _sessions: [SessionLiveness; 2],
    scratch: Scratch,
}

impl Contest {
    fn new() -> Self {
        let scratch = Scratch::new();
        let (holder, holder_session) = scratch.locker("holder");
        let (taker, taker_session) = scratch.locker("taker");
        let holder_conn = scratch.session("holder-rows");
        let epoch = acquire(&holder, &holder_conn, "r");
        Self {
            holder,
            holder_conn,
            taker,
            epoch,
            _sessions: [holder_session, taker_session],
            scratch,
        }
    }

    /// A waiter's session and the server's pid for it.
    fn waiter(&self, role: &str) -> (Connection, i64) {
        let conn = self.scratch.session(role);
        let pid = backend_pid(&conn);
        (conn, pid)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let conn = PgConnection::connect(&self.url, "teardown").unwrap();
        let _ = conn.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.schema));
    }
}

/// Takes the free lock `resource` for `locker`; returns its epoch.
fn acquire(locker: &Locker, conn: &Connection, resource: &str) -> u64 {
    match locker.try_acquire(conn, resource).unwrap() {
        Acquire::Acquired { epoch, .. } => epoch,
        held @ Acquire::Held { .. } => panic!("a fresh lock is held: {held:?}"),
    }
}

fn backend_pid(conn: &Connection) -> i64 {
    conn.query_row("SELECT CAST(pg_backend_pid() AS BIGINT)", [], |row| {
        row.get(0)
    })
    .unwrap()
}

/// Waits until the server shows `pid` waiting on a lock.
fn wait_until_blocked(observer: &Connection, pid: i64) {
    let started = Instant::now();
    loop {
        let waiting: i64 = observer
            .query_row(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE pid = ?1 AND wait_event_type = 'Lock'",
                params![pid],
                |row| row.get(0),
            )
            .unwrap();
        if waiting == 1 {
            return;
        }
        assert!(
            started.elapsed() < WAIT_MAX,
            "pid {pid} never waited on a lock"
        );
        thread::yield_now();
    }
}

#[test]
fn a_holder_is_alive_while_its_key_is_held_and_dead_once_its_session_ends() {
    let scratch = Scratch::new();
    let (first, first_session) = scratch.locker("first");
    let (second, _second_session) = scratch.locker("second");
    let conn = scratch.session("rows");
    let epoch = acquire(&first, &conn, "execution-1");
    let Acquire::Held { judgement, .. } = second.try_acquire(&conn, "execution-1").unwrap() else {
        panic!("a live holder's lock was taken");
    };
    assert!(matches!(judgement, Judgement::Alive(_)), "{judgement}");

    // The holder's process may be anywhere: its pid and boot id are never judged on PostgreSQL.
    let mut holder = durably_lock::read(&conn, "execution-1")
        .unwrap()
        .unwrap()
        .holder
        .unwrap();
    holder.pid = -1;
    holder.boot_id = "not a boot id".to_owned();
    assert!(matches!(second.judge().judge(&holder), Judgement::Alive(_)));
    let pass = second.judge().pass();

    drop(first);
    drop(first_session);
    let started = Instant::now();
    while second.judge().judge(&holder) != Judgement::Dead(DeathReason::SessionEnded) {
        assert!(
            started.elapsed() < WAIT_MAX,
            "the ended session's key stayed held"
        );
        thread::yield_now();
    }
    assert!(
        matches!(pass.judge(&holder), Judgement::Alive(_)),
        "a pass judges by the keys it read once"
    );
    let Acquire::Acquired {
        epoch: taken,
        took_over: Some(takeover),
    } = second.try_acquire(&conn, "execution-1").unwrap()
    else {
        panic!("a dead holder's lock was not taken over");
    };
    assert_eq!(taken, epoch + 1);
    assert_eq!(takeover.reason, DeathReason::SessionEnded);
}

#[test]
fn a_key_held_already_makes_the_instance_draw_another_id() {
    let scratch = Scratch::new();
    let first = SessionLiveness::hold(scratch.session("first")).unwrap();
    let taken = first.instance_id();
    let fresh = Uuid::new_v4();
    let mut ids = [taken, fresh].into_iter();
    let second =
        SessionLiveness::hold_with(scratch.session("second"), || ids.next().unwrap()).unwrap();
    assert_eq!(second.instance_id(), fresh);
    assert_ne!(second.key(), session_key(&taken));
    let error = SessionLiveness::hold_with(scratch.session("third"), || taken).unwrap_err();
    assert!(
        matches!(error, Error::SessionKeyCollisions { .. }),
        "{error}"
    );
}

#[test]
fn a_takeover_waits_for_a_fenced_write_and_the_fenced_holder_then_sees_the_new_epoch() {
    let contest = Contest::new();
    let (holder, conn, epoch) = (&contest.holder, &contest.holder_conn, contest.epoch);
    // The holder is inside a fenced write: its transaction has passed the fence.
    conn.execute_batch("BEGIN").unwrap();
    holder.fence(conn, "r", epoch).unwrap();

    let (taker_conn, taker_pid) = contest.waiter("taker-rows");
    let taker = &contest.taker;
    let swap = thread::scope(|scope| {
        let swap = scope.spawn(move || {
            taker_conn.execute_batch("BEGIN").unwrap();
            let swapped = taker.take_over(&taker_conn, "r", epoch);
            taker_conn.execute_batch("COMMIT").unwrap();
            swapped.unwrap()
        });
        wait_until_blocked(&contest.scratch.session("observer"), taker_pid);
        conn.execute_batch("COMMIT").unwrap();
        swap.join().unwrap()
    });
    assert_eq!(swap, Some(epoch + 1));

    let error = holder.fence(conn, "r", epoch).unwrap_err();
    assert!(matches!(error, Error::LockLost { .. }), "{error}");
}

#[test]
fn a_fence_that_waits_on_a_takeover_fails() {
    let contest = Contest::new();
    let epoch = contest.epoch;
    let (conn, _) = contest.waiter("taker-rows");
    conn.execute_batch("BEGIN").unwrap();
    assert_eq!(
        contest.taker.take_over(&conn, "r", epoch).unwrap(),
        Some(epoch + 1)
    );

    let (holder_conn, holder_pid) = contest.waiter("holder-fence");
    let holder = &contest.holder;
    let fenced = thread::scope(|scope| {
        let fenced = scope.spawn(move || {
            holder_conn.execute_batch("BEGIN").unwrap();
            let fenced = holder.fence(&holder_conn, "r", epoch);
            holder_conn.execute_batch("ROLLBACK").unwrap();
            fenced
        });
        wait_until_blocked(&contest.scratch.session("observer"), holder_pid);
        conn.execute_batch("COMMIT").unwrap();
        fenced.join().unwrap()
    });
    let error = fenced.unwrap_err();
    assert!(matches!(error, Error::LockLost { .. }), "{error}");
}

#[test]
fn a_terminated_liveness_session_poisons_the_instance_for_good() {
    let scratch = Scratch::new();
    let liveness_conn = scratch.session("liveness");
    let liveness_pid = backend_pid(&liveness_conn);
    let session = SessionLiveness::hold(liveness_conn).unwrap();
    let locker = Locker::new(LockerConfig::new(session.clone())).unwrap();
    let conn = scratch.session("rows");
    let epoch = acquire(&locker, &conn, "r");
    session.ping().unwrap();

    let terminated: bool = conn
        .query_row(
            "SELECT pg_terminate_backend(?1)",
            params![liveness_pid],
            |row| row.get(0),
        )
        .unwrap();
    assert!(terminated);
    let started = Instant::now();
    while session.ping().is_ok() {
        assert!(started.elapsed() < WAIT_MAX, "the ping never noticed");
        thread::yield_now();
    }
    assert!(session.is_lost());
    for error in [
        locker.fence(&conn, "r", epoch).unwrap_err(),
        locker.heartbeat(&conn, "r", epoch).unwrap_err(),
        locker.try_acquire(&conn, "other").unwrap_err(),
        session.ping().unwrap_err(),
    ] {
        assert!(
            matches!(error, Error::InstanceLost { instance } if instance == session.instance_id()),
            "{error}"
        );
    }
    assert!(
        durably_lock::read(&conn, "other").unwrap().is_none(),
        "a lost instance writes no lock row"
    );
}
