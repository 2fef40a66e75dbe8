//! The PostgreSQL side of the connection: tokio-postgres driven on a private runtime from sync
//! code, the SQL translator, binding by inferred types, and classified errors.

mod connection;
mod error;
mod facade;
mod runtime;
mod transaction;
mod translate;
mod types;

pub use connection::{PgConnection, PgRows};
pub use error::{PgError, PgErrorKind};
pub(crate) use facade::{PgCursor, PgStatement, column};
