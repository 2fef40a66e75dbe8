//! The enums of stored words (`Status`, `StepState`, `Effect`, `PolicyKind`) and the schema's
//! CHECK lists allow exactly the same words. A fresh journal's table definitions are read back
//! from `sqlite_schema`, the quoted words of each column's definition are collected, and the
//! set is compared with the enum's. A word added on one side only fails here.
//!
//! The column definitions are read as text: a column's definition runs from its name to the
//! next line indented as much as it, which is how every migration in `schema/` lays them out.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;

use durably_journal::{Effect, Journal, PolicyKind, Status, StepState};
use rusqlite::Connection;
use support::Scratch;

/// The quoted words in the definition of `column` in `table`'s CREATE statement: from the
/// column's name to the next column definition (or the table's end).
fn allowed_words(conn: &Connection, table: &str, column: &str) -> BTreeSet<String> {
    let sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [table],
            |row| row.get(0),
        )
        .unwrap();
    let start = sql
        .find(&format!("\n    {column} "))
        .unwrap_or_else(|| panic!("{table}.{column} is not defined in {sql}"));
    let rest = &sql[start + 1..];
    // The column's definition ends at the next line indented like it (four spaces, then not a
    // space): another column, a comment, or a table constraint. Its continuation lines are
    // indented further.
    let end = rest
        .match_indices("\n    ")
        .map(|(index, _)| index)
        .find(|&index| {
            rest[index + 5..]
                .chars()
                .next()
                .is_some_and(|first| first != ' ')
        })
        .unwrap_or(rest.len());
    rest[..end]
        .split('\'')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn words<T: Copy>(all: &[T], as_str: fn(T) -> &'static str) -> BTreeSet<String> {
    all.iter().map(|value| as_str(*value).to_owned()).collect()
}

#[test]
fn the_schema_check_lists_and_the_enums_allow_the_same_words() {
    let scratch = Scratch::new();
    drop(Journal::open(scratch.path()).unwrap());
    let conn = Connection::open(scratch.path()).unwrap();
    assert_eq!(
        allowed_words(&conn, "executions", "status"),
        words(Status::ALL, Status::as_str)
    );
    assert_eq!(
        allowed_words(&conn, "steps", "state"),
        words(StepState::ALL, StepState::as_str)
    );
    assert_eq!(
        allowed_words(&conn, "steps", "effect"),
        words(Effect::ALL, Effect::as_str)
    );
    assert_eq!(
        allowed_words(&conn, "steps", "policy"),
        words(PolicyKind::ALL, PolicyKind::as_str)
    );
}
