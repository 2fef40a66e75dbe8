//! The facade over SQLite behaves as the rusqlite calls it replaces: parameters bind in order,
//! rows read by position and name, "no rows" is optional, a bad parameter or column is a typed
//! error, and a dropped transaction rolls back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use durably_db::{Connection, Error, FromSqlError, OptionalExtension, Value, params};

fn steps() -> Connection {
    let conn = Connection::from(rusqlite::Connection::open_in_memory().unwrap());
    conn.execute_batch(
        "CREATE TABLE steps (seq INTEGER PRIMARY KEY, name TEXT NOT NULL, output BLOB, at TEXT)",
    )
    .unwrap();
    for (seq, name) in [(1, "look up"), (2, "charge"), (3, "email")] {
        conn.execute(
            "INSERT INTO steps (seq, name, output) VALUES (?1, ?2, ?3)",
            params![seq, name, Some(vec![seq as u8])],
        )
        .unwrap();
    }
    conn
}

#[test]
fn rows_map_in_order_by_position_and_name() {
    let conn = steps();
    let mut statement = conn
        .prepare_cached("SELECT seq, name FROM steps WHERE seq >= ?1 ORDER BY seq")
        .unwrap();
    let rows: Vec<(u32, String)> = statement
        .query_map([2], |row| Ok((row.get(0)?, row.get("name")?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows, [(2, "charge".to_owned()), (3, "email".to_owned())]);
    assert_eq!(statement.column_count(), 2);

    let mut rows = statement.query([3]).unwrap();
    let row = rows.next().unwrap().unwrap();
    assert_eq!(row.get_ref(1).unwrap(), Value::Text("email".into()));
    drop(rows);
    assert!(statement.exists([1]).unwrap());
}

#[test]
fn no_rows_is_optional_and_other_errors_are_typed() {
    let conn = steps();
    let missing: Option<String> = conn
        .query_row("SELECT name FROM steps WHERE seq = ?1", [9], |row| {
            row.get(0)
        })
        .optional()
        .unwrap();
    assert_eq!(missing, None);

    let wrong = conn.query_row("SELECT name FROM steps WHERE seq = 1", [], |row| {
        row.get::<_, i64>(0)
    });
    assert!(
        matches!(
            wrong,
            Err(Error::Column {
                index: 0,
                source: FromSqlError::InvalidType { .. }
            })
        ),
        "{wrong:?}"
    );
    let unnamed = conn.query_row("SELECT name FROM steps WHERE seq = 1", [], |row| {
        row.get::<_, String>("nope")
    });
    assert!(matches!(unnamed, Err(Error::NoSuchColumn(name)) if name == "nope"));
    let too_big = conn.execute("UPDATE steps SET seq = ?1 WHERE seq = 1", [u64::MAX]);
    assert!(matches!(too_big, Err(Error::Parameter(_))), "{too_big:?}");
    let count: i64 = conn
        .query_row("SELECT count(*) FROM steps", (), |row| row.get(0))
        .unwrap();
    assert_eq!(count, 3);
}

#[test]
fn a_dropped_transaction_rolls_back_and_a_committed_one_stays() {
    let conn = steps();
    {
        let transaction = conn.transaction().unwrap();
        transaction.execute("DELETE FROM steps", []).unwrap();
    }
    let transaction = conn.transaction().unwrap();
    transaction
        .execute("DELETE FROM steps WHERE seq = ?1", [1])
        .unwrap();
    transaction.commit().unwrap();
    let count: i64 = conn
        .query_row("SELECT count(*) FROM steps", [], |row| row.get(0))
        .unwrap();
    assert_eq!(count, 2);
}
