//! The PostgreSQL side gives back what SQLite would: every `Value` bound into every column type
//! it maps to reads back as the same value (timestamps as millisecond RFC 3339 text, JSON
//! byte-identical), the SQLite spelling of statements runs after translation, and failures are
//! classified: a real deadlock between two sessions, a unique violation, a lock timeout, a
//! statement timeout, a session killed with `pg_terminate_backend`, one killed while its
//! `COMMIT` waits, and a `COMMIT` that rolled back a transaction an earlier error aborted. The
//! facade's own calls (`Connection::from(PgConnection)`) run the same way as on SQLite.
//!
//! Each test works in its own schema of the server `DURABLY_POSTGRES_URL` names (start one with
//! `eval "$(.ci/pg start)"`). Without it the tests fail with that fix; they never skip. Waits
//! for another session are synchronized on the server's own view (`pg_stat_activity`).

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use durably_db::{PgConnection, PgErrorKind, PgRows, Value};

/// How long a test waits for another session to reach a state before failing.
const WAIT_MAX: Duration = Duration::from_secs(20);

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

/// A private schema, dropped at the end of the test; connections open with it as search_path.
struct Scratch {
    url: String,
    name: String,
}

impl Scratch {
    fn new() -> Self {
        let base = std::env::var("DURABLY_POSTGRES_URL").unwrap_or_else(|_| {
            panic!(
                "DURABLY_POSTGRES_URL is not set: these tests need a PostgreSQL server. \
                 Start a private one with `eval \"$(.ci/pg start)\"` (stop it with \
                 `.ci/pg stop \"$DURABLY_PG_DIR\"`), or run `.ci/pg run cargo test …`."
            )
        });
        let name = format!(
            "pgdrv_{}_{}",
            std::process::id(),
            SCHEMAS.fetch_add(1, Ordering::Relaxed)
        );
        let admin = PgConnection::connect(&base, "test-admin").unwrap_or_else(|error| {
            panic!("cannot connect to DURABLY_POSTGRES_URL ({error}): is the server running?")
        });
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
            ))
            .unwrap();
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{separator}options=-csearch_path%3D{name}");
        Self { url, name }
    }

    fn connect(&self, role: &str) -> PgConnection {
        PgConnection::connect(&self.url, role).unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(admin) = PgConnection::connect(&self.url, "test-admin") {
            let _ = admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}

fn text(value: &str) -> Value<'_> {
    Value::Text(Cow::Borrowed(value))
}

fn one(rows: &PgRows) -> &[Value<'static>] {
    assert_eq!(rows.rows.len(), 1, "expected one row");
    &rows.rows[0]
}

/// Waits until the session named `durably:<role>` waits on a lock (heavyweight or advisory).
fn wait_until_blocked(observer: &PgConnection, role: &str) {
    let started = Instant::now();
    let application = format!("durably:{role}");
    loop {
        let rows = observer
            .query(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = ?1 \
                 AND wait_event_type = 'Lock'",
                &[text(&application)],
            )
            .unwrap();
        if !rows.rows.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < WAIT_MAX,
            "{role} never waited on a lock"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

const ALL_TYPES: &str = "CREATE TABLE v (
    id bigint PRIMARY KEY, b boolean, i2 smallint, i4 integer, i8 bigint, o oid, f4 real,
    f8 double precision, t text, vc varchar(40), tz timestamptz, j json, jb jsonb, u uuid,
    by bytea)";

#[test]
fn every_value_round_trips_through_its_column_types() {
    let scratch = Scratch::new();
    let conn = scratch.connect("values");
    conn.batch_execute(ALL_TYPES).unwrap();
    let insert = "INSERT INTO v (id, b, i2, i4, i8, o, f4, f8, t, vc, tz, j, jb, u, by)
                  VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";
    let row = [
        Value::Integer(1),
        Value::Integer(1),
        Value::Integer(-32_768),
        Value::Integer(2_147_483_647),
        Value::Integer(i64::MIN),
        Value::Integer(4_294_967_295),
        Value::Real(0.5),
        Value::Real(-1.25e-300),
        text("héllo 'quoted' ?1"),
        text("short"),
        text("2026-11-29T13:48:28.123Z"),
        text(r#"{"k": [1, 2]}"#),
        text(r#"{"k": 1}"#),
        text("0191f3a4-7c2e-7b3a-9d4e-5f6a7b8c9d0e"),
        Value::Blob(Cow::Borrowed(&[0, 1, 255, 0])),
    ];
    assert_eq!(conn.execute(insert, &row).unwrap(), 1);
    let mut nulls = vec![Value::Null; row.len()];
    nulls[0] = Value::Integer(2);
    assert_eq!(conn.execute(insert, &nulls).unwrap(), 1);

    let rows = conn
        .query(
            "SELECT id, b, i2, i4, i8, o, f4, f8, t, vc, tz, j, jb, u, by FROM v ORDER BY id",
            &[],
        )
        .unwrap();
    assert_eq!(&rows.columns[..3], ["id", "b", "i2"]);
    assert_eq!(rows.rows[0], row, "every value comes back as it was bound");
    assert_eq!(
        rows.rows[1], nulls,
        "NULL binds to and reads from every type"
    );
    assert_eq!(
        one(&conn
            .query(
                "SELECT CAST(?1 AS boolean), ?2 = b FROM v WHERE id = 1",
                &[Value::Integer(0), Value::Integer(1)]
            )
            .unwrap()),
        [Value::Integer(0), Value::Integer(1)],
        "integer flags bind to boolean parameters and read back as 0/1"
    );
}

#[test]
fn timestamps_travel_at_millisecond_precision_in_utc() {
    let scratch = Scratch::new();
    let conn = scratch.connect("timestamps");
    conn.batch_execute("CREATE TABLE t (id bigint PRIMARY KEY, at timestamptz)")
        .unwrap();
    for (id, written) in [
        (1, "2026-11-29T13:48:28.123Z"),
        (2, "2026-11-29T15:48:28.5+02:00"),
        (3, "1999-12-31T23:59:59Z"),
    ] {
        conn.execute(
            "INSERT INTO t (id, at) VALUES (?1, ?2)",
            &[Value::Integer(id), text(written)],
        )
        .unwrap();
    }
    let rows = conn.query("SELECT at FROM t ORDER BY id", &[]).unwrap();
    let read: Vec<_> = rows.rows.iter().map(|row| row[0].clone()).collect();
    assert_eq!(
        read,
        [
            text("2026-11-29T13:48:28.123Z"),
            text("2026-11-29T13:48:28.500Z"),
            text("1999-12-31T23:59:59.000Z")
        ]
    );
    // The server compares the bound text as an instant, and its own clock reads back in the
    // same shape.
    let compared = conn
        .query(
            "SELECT count(*) FROM t WHERE at < ?1",
            &[text("2026-11-29T13:48:28.124Z")],
        )
        .unwrap();
    assert_eq!(one(&compared), [Value::Integer(2)]);
    let now = conn.query("SELECT now()", &[]).unwrap();
    let Value::Text(now) = &one(&now)[0] else {
        panic!("now() is not text")
    };
    assert_eq!(
        durably_db::time::format_timestamp(durably_db::time::parse_timestamp(now).unwrap()),
        **now
    );

    let error = conn
        .execute(
            "INSERT INTO t (id, at) VALUES (4, ?1)",
            &[text("secret yesterday")],
        )
        .unwrap_err();
    assert_eq!(error.kind(), PgErrorKind::Parameter);
    assert!(!error.to_string().contains("secret"), "{error}");
}

#[test]
fn json_text_is_kept_byte_for_byte() {
    let scratch = Scratch::new();
    let conn = scratch.connect("json");
    conn.batch_execute("CREATE TABLE j (id bigint PRIMARY KEY, doc json, bin jsonb)")
        .unwrap();
    let payload = r#"{"b":1, "a":1e300}"#;
    conn.execute(
        "INSERT INTO j (id, doc, bin) VALUES (1, ?1, ?2)",
        &[text(payload), text(payload)],
    )
    .unwrap();
    let rows = conn
        .query("SELECT doc, doc ->> 'a', bin ->> 'b' FROM j", &[])
        .unwrap();
    assert_eq!(one(&rows), [text(payload), text("1e300"), text("1")]);
    let error = conn
        .execute("INSERT INTO j (id, doc) VALUES (2, ?1)", &[text("{secret")])
        .unwrap_err();
    assert_eq!(error.sqlstate(), Some("22P02"));
    assert!(!error.to_string().contains("secret"), "{error}");
}

#[test]
fn values_that_do_not_fit_are_typed_errors() {
    let scratch = Scratch::new();
    let conn = scratch.connect("ranges");
    conn.batch_execute(ALL_TYPES).unwrap();
    let cases = [
        (
            "INSERT INTO v (id, i2) VALUES (1, ?1)",
            Value::Integer(32_768),
            PgErrorKind::OutOfRange,
        ),
        (
            "INSERT INTO v (id, i4) VALUES (1, ?1)",
            Value::Integer(1 << 31),
            PgErrorKind::OutOfRange,
        ),
        (
            "INSERT INTO v (id, b) VALUES (1, ?1)",
            Value::Integer(2),
            PgErrorKind::OutOfRange,
        ),
        (
            "INSERT INTO v (id, o) VALUES (1, ?1)",
            Value::Integer(-1),
            PgErrorKind::OutOfRange,
        ),
        (
            "INSERT INTO v (id, i8) VALUES (1, ?1)",
            text("12"),
            PgErrorKind::Parameter,
        ),
        (
            "INSERT INTO v (id, u) VALUES (1, ?1)",
            text("not-a-uuid"),
            PgErrorKind::Parameter,
        ),
        (
            "INSERT INTO v (id, by) VALUES (1, ?1)",
            text("bytes"),
            PgErrorKind::Parameter,
        ),
        (
            "INSERT INTO v (id, t) VALUES (1, ?1)",
            Value::Integer(7),
            PgErrorKind::Parameter,
        ),
    ];
    for (sql, value, kind) in cases {
        let error = conn.execute(sql, &[value]).unwrap_err();
        assert_eq!(error.kind(), kind, "{sql}: {error}");
        assert_eq!(error.statement(), Some(sql));
    }
    let error = conn
        .execute("INSERT INTO v (id) VALUES (?1)", &[])
        .unwrap_err();
    assert_eq!(error.kind(), PgErrorKind::Parameter, "{error}");
    assert_eq!(
        conn.query("SELECT count(*) FROM v", &[]).unwrap().rows[0],
        [Value::Integer(0)]
    );
}

#[test]
fn numeric_results_must_be_cast() {
    let scratch = Scratch::new();
    let conn = scratch.connect("numeric");
    conn.batch_execute("CREATE TABLE n (x bigint); INSERT INTO n VALUES (1), (2)")
        .unwrap();
    let error = conn.query("SELECT sum(x) FROM n", &[]).unwrap_err();
    assert_eq!(error.kind(), PgErrorKind::UnsupportedType);
    assert!(error.message().contains("CAST"), "{error}");
    let rows = conn
        .query("SELECT CAST(sum(x) AS BIGINT) FROM n", &[])
        .unwrap();
    assert_eq!(one(&rows), [Value::Integer(3)]);
}

#[test]
fn sqlite_spelling_runs_after_translation() {
    let scratch = Scratch::new();
    let conn = scratch.connect("translate");
    conn.batch_execute(
        "CREATE TABLE e (id bigint PRIMARY KEY, name text); CREATE INDEX e_name ON e (name);
         INSERT INTO e VALUES (1, 'alpha'), (2, 'beta'), (3, 'gamma')",
    )
    .unwrap();
    let rows = conn
        .query(
            "SELECT id, '?' FROM e INDEXED BY e_name -- ?9
             WHERE instr(name, ?2) > 0 AND id >= ? ORDER BY id LIMIT +?1",
            &[Value::Integer(1), text("a"), Value::Integer(2)],
        )
        .unwrap();
    assert_eq!(rows.rows, [vec![Value::Integer(2), text("?")]]);
    let rows = conn
        .query(
            "SELECT count(*) FROM e NOT INDEXED WHERE id > ?",
            &[Value::Integer(1)],
        )
        .unwrap();
    assert_eq!(one(&rows), [Value::Integer(2)]);
}

#[test]
fn statements_are_prepared_once_per_connection() {
    let scratch = Scratch::new();
    let conn = scratch.connect("cache");
    let count = "SELECT count(*) FROM pg_prepared_statements";
    let before = conn.query(count, &[]).unwrap().rows[0].clone();
    for n in 0..3 {
        conn.query("SELECT ?1 + 1", &[Value::Integer(n)]).unwrap();
    }
    let after = conn.query(count, &[]).unwrap().rows[0].clone();
    let (Value::Integer(before), Value::Integer(after)) = (&before[0], &after[0]) else {
        panic!("count(*) is not an integer")
    };
    assert_eq!(
        after - before,
        1,
        "three runs of one SQL text prepare it once"
    );
}

#[test]
fn sessions_carry_the_role_and_the_url_options() {
    let scratch = Scratch::new();
    let conn = scratch.connect("writer-3");
    let rows = conn
        .query(
            "SELECT current_setting('application_name'), current_schema()",
            &[],
        )
        .unwrap();
    assert_eq!(one(&rows), [text("durably:writer-3"), text(&scratch.name)]);
    // Any thread may call, including one inside the caller's own current_thread runtime.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let rows = runtime.block_on(async { conn.query("SELECT ?1", &[text("inside")]).unwrap() });
    assert_eq!(one(&rows), [text("inside")]);
    let error =
        PgConnection::connect("postgresql://nobody@/nodb?host=/nonexistent/dir", "x").unwrap_err();
    assert_eq!(error.kind(), PgErrorKind::Connect, "{error}");
}

#[test]
fn a_unique_violation_is_classified_without_the_key() {
    let scratch = Scratch::new();
    let conn = scratch.connect("unique");
    conn.batch_execute("CREATE TABLE u (key text PRIMARY KEY)")
        .unwrap();
    conn.execute("INSERT INTO u (key) VALUES (?1)", &[text("secret-key")])
        .unwrap();
    let error = conn
        .execute("INSERT INTO u (key) VALUES (?1)", &[text("secret-key")])
        .unwrap_err();
    assert_eq!(error.kind(), PgErrorKind::UniqueViolation);
    assert_eq!(error.sqlstate(), Some("23505"));
    assert!(
        !format!("{error} {error:?}").contains("secret-key"),
        "{error:?}"
    );
}

#[test]
fn a_commit_after_an_error_reports_that_nothing_committed() {
    let scratch = Scratch::new();
    let conn = scratch.connect("aborted");
    conn.batch_execute("CREATE TABLE a (key text PRIMARY KEY)")
        .unwrap();
    conn.execute("INSERT INTO a (key) VALUES ('taken')", &[])
        .unwrap();
    conn.execute("BEGIN", &[]).unwrap();
    conn.execute("INSERT INTO a (key) VALUES ('new')", &[])
        .unwrap();
    let error = conn
        .execute("INSERT INTO a (key) VALUES ('taken')", &[])
        .unwrap_err();
    assert_eq!(error.kind(), PgErrorKind::UniqueViolation);
    // SQLite would commit 'new'; PostgreSQL aborted the transaction and says so at COMMIT.
    let error = conn.execute("COMMIT", &[]).unwrap_err();
    assert_eq!(error.kind(), PgErrorKind::RolledBack, "{error}");
    let count = conn.query("SELECT count(*) FROM a", &[]).unwrap();
    assert_eq!(one(&count), [Value::Integer(1)]);

    // A savepoint rolled back to makes the transaction usable again.
    conn.batch_execute("BEGIN; SAVEPOINT s").unwrap();
    conn.execute("INSERT INTO a (key) VALUES ('taken')", &[])
        .unwrap_err();
    conn.batch_execute("ROLLBACK TO SAVEPOINT s").unwrap();
    conn.execute("INSERT INTO a (key) VALUES ('kept')", &[])
        .unwrap();
    conn.batch_execute("COMMIT").unwrap();
    let count = conn.query("SELECT count(*) FROM a", &[]).unwrap();
    assert_eq!(one(&count), [Value::Integer(2)]);
}

#[test]
fn a_deadlock_between_two_sessions_is_a_conflict() {
    let scratch = Scratch::new();
    let first = scratch.connect("deadlock-first");
    let second = scratch.connect("deadlock-second");
    first
        .batch_execute(
            "CREATE TABLE d (id bigint PRIMARY KEY, n bigint); INSERT INTO d VALUES (1, 0), (2, 0)",
        )
        .unwrap();
    let update = "UPDATE d SET n = n + 1 WHERE id = ?1";
    for conn in [&first, &second] {
        conn.batch_execute("SET deadlock_timeout = '50ms'; BEGIN")
            .unwrap();
    }
    first.execute(update, &[Value::Integer(1)]).unwrap();
    second.execute(update, &[Value::Integer(2)]).unwrap();
    // Inside a transaction pg_stat_activity is a snapshot: a third session watches.
    let observer = scratch.connect("deadlock-observer");
    std::thread::scope(|scope| {
        let waiting = scope.spawn(move || first.execute(update, &[Value::Integer(2)]));
        wait_until_blocked(&observer, "deadlock-first");
        let closing = second.execute(update, &[Value::Integer(1)]);
        let results = [waiting.join().unwrap(), closing];
        let conflicts: Vec<_> = results
            .iter()
            .filter_map(|result| result.as_ref().err())
            .collect();
        assert_eq!(
            conflicts.len(),
            1,
            "exactly one side is chosen: {results:?}"
        );
        assert_eq!(conflicts[0].kind(), PgErrorKind::Deadlock);
        assert!(conflicts[0].is_conflict());
        assert_eq!(conflicts[0].sqlstate(), Some("40P01"));
    });
}

#[test]
fn lock_and_statement_timeouts_are_busy_and_canceled() {
    let scratch = Scratch::new();
    let holder = scratch.connect("lock-holder");
    let waiter = scratch.connect("lock-waiter");
    holder
        .batch_execute("CREATE TABLE l (id bigint PRIMARY KEY); INSERT INTO l VALUES (1)")
        .unwrap();
    holder
        .batch_execute("BEGIN; SELECT id FROM l FOR UPDATE")
        .unwrap();
    waiter.batch_execute("SET lock_timeout = '20ms'").unwrap();
    let error = waiter
        .query(
            "SELECT id FROM l WHERE id = ?1 FOR UPDATE",
            &[Value::Integer(1)],
        )
        .unwrap_err();
    assert_eq!(error.kind(), PgErrorKind::LockNotAvailable, "{error}");
    assert!(error.is_busy());
    waiter
        .batch_execute("SET statement_timeout = '20ms'")
        .unwrap();
    let error = waiter.query("SELECT pg_sleep(5)", &[]).unwrap_err();
    assert_eq!(error.kind(), PgErrorKind::QueryCanceled, "{error}");
    assert_eq!(
        one(&waiter.query("SELECT pg_sleep(0)", &[]).unwrap()),
        [Value::Null],
        "void reads as NULL"
    );
}

#[test]
fn a_terminated_session_is_a_lost_connection() {
    let scratch = Scratch::new();
    let victim = scratch.connect("victim");
    let killer = scratch.connect("killer");
    let pid = one(&victim.query("SELECT pg_backend_pid()", &[]).unwrap())[0].clone();
    // The timeout makes the call wait until the session is gone.
    let killed = killer
        .query("SELECT pg_terminate_backend(?1, 10000)", &[pid])
        .unwrap();
    assert_eq!(one(&killed), [Value::Integer(1)]);
    let error = victim.query("SELECT 1", &[]).unwrap_err();
    assert_eq!(error.kind(), PgErrorKind::ConnectionLost, "{error}");
    assert!(victim.is_closed());
    let error = victim.execute("COMMIT", &[]).unwrap_err();
    assert_eq!(
        error.kind(),
        PgErrorKind::ConnectionLost,
        "a COMMIT never sent is not in doubt: {error}"
    );
}

#[test]
fn a_session_lost_during_commit_leaves_the_outcome_unknown() {
    let scratch = Scratch::new();
    let victim = scratch.connect("commit-victim");
    let killer = scratch.connect("commit-killer");
    // A deferred constraint trigger runs at COMMIT and waits there for an advisory lock the
    // killer holds, so the COMMIT is in flight when the session is terminated.
    killer
        .batch_execute(
            "CREATE TABLE c (id bigint);
             CREATE FUNCTION wait_at_commit() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN PERFORM pg_advisory_xact_lock(1919); RETURN NULL; END $$;
             CREATE CONSTRAINT TRIGGER c_commit AFTER INSERT ON c DEFERRABLE INITIALLY DEFERRED
               FOR EACH ROW EXECUTE FUNCTION wait_at_commit()",
        )
        .unwrap();
    killer
        .batch_execute("BEGIN; SELECT pg_advisory_xact_lock(1919)")
        .unwrap();
    let pid = one(&victim.query("SELECT pg_backend_pid()", &[]).unwrap())[0].clone();
    victim
        .batch_execute("BEGIN; INSERT INTO c VALUES (1)")
        .unwrap();
    // Inside a transaction pg_stat_activity is a snapshot: a third session watches and kills.
    let observer = scratch.connect("commit-observer");
    std::thread::scope(|scope| {
        let committing = scope.spawn(move || victim.batch_execute("COMMIT"));
        wait_until_blocked(&observer, "commit-victim");
        observer
            .query("SELECT pg_terminate_backend(?1, 10000)", &[pid])
            .unwrap();
        let error = committing.join().unwrap().unwrap_err();
        assert_eq!(error.kind(), PgErrorKind::CommitUnknown, "{error}");
        assert!(error.is_commit_unknown() && error.is_connection_lost());
    });
    killer.batch_execute("ROLLBACK").unwrap();
}

#[test]
fn the_facade_runs_the_same_calls_on_postgres() {
    use durably_db::{Connection, Dialect, OptionalExtension, params};

    let scratch = Scratch::new();
    let conn = Connection::from(scratch.connect("facade"));
    assert_eq!(conn.dialect(), Dialect::Postgres);
    assert!(conn.as_sqlite().is_none());
    conn.execute_batch("CREATE TABLE steps (seq bigint PRIMARY KEY, name text NOT NULL, output bytea, done boolean)")
        .unwrap();
    for (seq, name) in [(1_i64, "look up"), (2, "charge")] {
        let changed = conn
            .execute(
                "INSERT INTO steps (seq, name, output, done) VALUES (?1, ?2, ?3, ?4)",
                params![seq, name, Some(vec![seq as u8]), seq == 1],
            )
            .unwrap();
        assert_eq!(changed, 1);
    }
    let (name, output, done): (String, Vec<u8>, bool) = conn
        .query_row(
            "SELECT name, output, done FROM steps WHERE seq = ?1",
            [1],
            |row| Ok((row.get("name")?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    assert_eq!((name.as_str(), output, done), ("look up", vec![1], true));
    let missing = conn.query_row("SELECT seq FROM steps WHERE seq = 9", [], |row| {
        row.get::<_, i64>(0)
    });
    assert_eq!(missing.optional().unwrap(), None, "no rows is optional");
    let mut statement = conn
        .prepare_cached("SELECT seq FROM steps ORDER BY seq")
        .unwrap();
    let seqs: Vec<i64> = statement
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(seqs, [1, 2]);
    assert!(matches!(
        conn.query_row("SELECT seq FROM steps WHERE seq = 1", [], |row| row
            .get::<_, i64>("nope")),
        Err(durably_db::Error::NoSuchColumn(_))
    ));
    let Err(error) = conn.prepare("SELEC 1") else {
        panic!("a syntax error is refused at prepare")
    };
    assert!(
        matches!(&error, durably_db::Error::Postgres(pg) if pg.sqlstate() == Some("42601")),
        "{error}"
    );

    let transaction = conn.transaction().unwrap();
    transaction.execute("DELETE FROM steps", []).unwrap();
    drop(transaction);
    let count: i64 = conn
        .query_row("SELECT count(*) FROM steps", [], |row| row.get(0))
        .unwrap();
    assert_eq!(count, 2, "a dropped transaction rolls back");
}
