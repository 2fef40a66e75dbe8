//! The driver-neutral SQL connection every durably crate writes through.
//!
//! [`Connection`] has rusqlite's calling shape (`execute`, `query_row`, `prepare_cached`,
//! [`params!`], [`OptionalExtension::optional`]) over either backend: a SQLite file, the
//! default, or a PostgreSQL database behind the `postgres` feature. Statements use `?N`
//! placeholders on both; values travel as [`Value`]s, with timestamps as RFC 3339 text
//! ([`time`]) and JSON as its own text, so the code above this crate reads the same rows from
//! both. [`Target`] says which backend a journal lives on.
//!
//! ```
//! use durably_db::{Connection, OptionalExtension, params};
//!
//! # fn main() -> durably_db::Result<()> {
//! let conn = Connection::from(rusqlite::Connection::open_in_memory()?);
//! conn.execute_batch("CREATE TABLE steps (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")?;
//! conn.execute("INSERT INTO steps (id, name) VALUES (?1, ?2)", params![1, "charge card"])?;
//! let name: Option<String> = conn
//!     .query_row("SELECT name FROM steps WHERE id = ?1", [1], |row| row.get(0))
//!     .optional()?;
//! assert_eq!(name.as_deref(), Some("charge card"));
//! # Ok(())
//! # }
//! ```

mod connection;
mod error;
mod params;
mod row;
mod sqlite;
mod statement;
mod target;
pub mod time;
mod value;

pub use connection::{Connection, Dialect, Sql, Transaction};
pub use error::{Error, OptionalExtension, Result};
pub use params::Params;
pub use row::{Column, Row, RowIndex};
pub use statement::{MappedRows, Rows, Statement};
pub use target::{PgUrl, Target};
pub use value::{FromSql, FromSqlError, ToSql, ToSqlError, Value};
