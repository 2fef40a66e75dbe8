//! One PostgreSQL session, used from sync code: statements are translated, prepared once per
//! SQL text and cached, parameters bound by the types the server inferred, rows read whole.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_executor::block_on;
use postgres_types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Statement};

use super::error::{PgError, PgErrorKind};
use super::runtime;
use super::transaction::TransactionState;
use super::translate::{Control, Translated, translate};
use super::types::{Bound, Raw, Reader, bind};
use crate::value::Value;

/// Prepared statements kept per connection; past it the least recently used one is closed.
const STATEMENT_CACHE_CAPACITY: usize = 256;

/// How long `connect` waits for the server when the URL sets no `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// SQLSTATEs after which a cached statement is re-prepared on its next use:
/// `cached plan must not change result type` (the table changed under it) and
/// `prepared statement does not exist` (`DEALLOCATE ALL` ran on the session).
const STALE_STATEMENT_SQLSTATES: &[&str] = &["0A000", "26000"];

/// A query's result, read whole.
#[derive(Debug, Clone, PartialEq)]
pub struct PgRows {
    /// The column names, in order (shared by every result of the same statement).
    pub columns: Arc<[String]>,
    /// The rows, each with one value per column.
    pub rows: Vec<Vec<Value<'static>>>,
}

/// A prepared statement and what is known about it, cached under its original SQL text. A
/// caller that runs it more than once holds it (`PgConnection::prepared`), so the cache is
/// looked up once.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The SQL text as the caller wrote it, for errors.
    sql: Box<str>,
    statement: Statement,
    columns: Arc<[String]>,
    readers: Box<[Reader]>,
    /// The translation, with the transaction controls the statement performs.
    translated: Translated,
}

impl Prepared {
    /// How many columns its rows have.
    pub(crate) fn column_count(&self) -> usize {
        self.columns.len()
    }
}

/// Prepared statements by their original SQL text, at most `STATEMENT_CACHE_CAPACITY`, the least
/// recently used one evicted first.
#[derive(Debug)]
struct StatementCache<T> {
    /// Each statement with the tick of its last use.
    entries: HashMap<String, (Arc<T>, u64)>,
    tick: u64,
}

impl<T> Default for StatementCache<T> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            tick: 0,
        }
    }
}

impl<T> StatementCache<T> {
    fn get(&mut self, sql: &str) -> Option<Arc<T>> {
        self.tick += 1;
        let (prepared, used) = self.entries.get_mut(sql)?;
        *used = self.tick;
        Some(Arc::clone(prepared))
    }

    fn insert(&mut self, sql: &str, prepared: Arc<T>) {
        if self.entries.len() >= STATEMENT_CACHE_CAPACITY {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(sql, _)| sql.clone());
            if let Some(oldest) = oldest {
                // Dropping the driver's `Statement` closes it on the server.
                self.entries.remove(&oldest);
            }
        }
        self.tick += 1;
        self.entries.insert(sql.to_owned(), (prepared, self.tick));
    }
}

/// A session with a PostgreSQL server, driven on the process's private runtime.
///
/// Calls block the calling thread until the server answers; any thread may call, including one
/// of the caller's own tokio runtime. `Send`, not `Sync`: one session runs one statement at a
/// time, and its statement cache is not shared.
///
/// It follows its session's transaction through `BEGIN`, `COMMIT`, `ROLLBACK [TO SAVEPOINT]` and
/// every error, because PostgreSQL, unlike SQLite, aborts a transaction at its first error and
/// then answers `COMMIT` by rolling back: such a `COMMIT` returns `RolledBack`.
#[derive(Debug)]
pub struct PgConnection {
    client: Client,
    statements: RefCell<StatementCache<Prepared>>,
    /// Followed through every statement's outcome, so that a `COMMIT` that rolled back an
    /// aborted transaction is reported as an error (see `transaction.rs`).
    transaction: Cell<TransactionState>,
    /// A `BEGIN` asked for by `begin_pipelined` and not sent yet: it goes out with the next
    /// statement. Invariant: set only while `transaction` is `Idle`.
    begin_pending: Cell<bool>,
    /// `BEGIN`, translated once.
    begin: Translated,
}

impl PgConnection {
    /// Connects to the server `url` names, as `application_name = durably:<role>`.
    ///
    /// `url` is a libpq URL or key-value string: `postgresql://user@host/db`,
    /// `postgresql://user@/db?host=/socket/dir` for a Unix socket, and
    /// `options=-csearch_path%3Dschema` to pick a schema. TLS is not supported (`sslmode`
    /// `prefer`, the default, connects without it). With no `connect_timeout` in the URL, the
    /// connect gives up after 10 s.
    ///
    /// # Errors
    ///
    /// `Connect` when the URL is invalid or the server cannot be reached or refuses the session
    /// (its SQLSTATE, if it sent one, is kept); `Runtime` when the driver's runtime cannot start.
    pub fn connect(url: &str, role: &str) -> Result<Self, PgError> {
        let mut config: Config = url.parse().map_err(|error| PgError::connect(&error))?;
        config.application_name(format!("durably:{role}"));
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let client = runtime::run(async move {
            let (client, connection) = config.connect(NoTls).await?;
            // The socket task ends when the client is dropped or the session is lost; the
            // client then reports `is_closed`, and every later call fails as ConnectionLost.
            tokio::spawn(async move {
                let _ended = connection.await;
            });
            Ok::<_, tokio_postgres::Error>(client)
        })?
        .map_err(|error| PgError::connect(&error))?;
        Ok(Self {
            client,
            statements: RefCell::default(),
            transaction: Cell::default(),
            begin_pending: Cell::new(false),
            begin: translate("BEGIN"),
        })
    }

    /// Begins a transaction without a round trip of its own: `BEGIN` is sent with the next
    /// statement, without waiting for its answer (the driver usually writes both in one
    /// `sendto`), and both answers are read together. A
    /// transaction that runs no statement sends nothing, not even at its `COMMIT` or
    /// `ROLLBACK`.
    ///
    /// The cost is that a session the server has ended is noticed only when the driver has
    /// read its goodbye (`is_closed`), or else at the first statement, which then fails as
    /// `ConnectionLost` with nothing run, rather than at a `BEGIN` of its own.
    ///
    /// # Errors
    ///
    /// `ConnectionLost` when the session is known to be gone; `Server` when a transaction is
    /// already open (a bug of the caller's).
    pub fn begin_pipelined(&self) -> Result<(), PgError> {
        if self.client.is_closed() {
            let message = "the session is closed";
            return Err(PgError::new(
                PgErrorKind::ConnectionLost,
                message,
                Some("BEGIN"),
            ));
        }
        if self.begin_pending.get() || self.transaction.get() != TransactionState::Idle {
            let message = "a transaction is already open on this session";
            return Err(PgError::new(PgErrorKind::Server, message, Some("BEGIN")));
        }
        self.begin_pending.set(true);
        Ok(())
    }

    /// Translates and prepares `sql` into the connection's cache, unless it is there already;
    /// returns how many columns its rows have.
    ///
    /// # Errors
    ///
    /// The server refused the SQL (a syntax error, a parameter type it cannot infer), or a
    /// result column has a type this adapter does not read (`UnsupportedType`).
    pub fn prepare(&self, sql: &str) -> Result<usize, PgError> {
        self.prepared(sql).map(|prepared| prepared.columns.len())
    }

    /// Runs one statement and returns the number of rows it changed.
    ///
    /// # Errors
    ///
    /// A `PgError` classified by its SQLSTATE; `Parameter` or `OutOfRange` when a value does not
    /// bind to the parameter's type, `ConnectionLost` (or `CommitUnknown` for a `COMMIT`), and
    /// `RolledBack` for a `COMMIT` of a transaction an earlier error aborted.
    pub fn execute(&self, sql: &str, params: &[Value<'_>]) -> Result<u64, PgError> {
        self.execute_prepared(&*self.prepared(sql)?, params)
    }

    /// `execute` of a statement the caller holds (from `prepared`).
    pub(crate) fn execute_prepared(
        &self,
        prepared: &Prepared,
        params: &[Value<'_>],
    ) -> Result<u64, PgError> {
        let sql = &*prepared.sql;
        let bound = bind_all(prepared, params, sql)?;
        let params = as_params(&bound);
        let statement = self.client.execute(&prepared.statement, &params);
        self.run(statement, sql, &prepared.translated)
    }

    /// Runs one query and reads all of its rows.
    ///
    /// # Errors
    ///
    /// As `execute`; `UnsupportedType` at the first call when a column's type cannot be read
    /// (cast `numeric` results), `Column` when a value cannot be decoded.
    pub fn query(&self, sql: &str, params: &[Value<'_>]) -> Result<PgRows, PgError> {
        self.query_prepared(&*self.prepared(sql)?, params)
    }

    /// `query` of a statement the caller holds (from `prepared`).
    pub(crate) fn query_prepared(
        &self,
        prepared: &Prepared,
        params: &[Value<'_>],
    ) -> Result<PgRows, PgError> {
        let sql = &*prepared.sql;
        let bound = bind_all(prepared, params, sql)?;
        let params = as_params(&bound);
        let statement = self.client.query(&prepared.statement, &params);
        let rows = self.run(statement, sql, &prepared.translated)?;
        let rows = rows
            .iter()
            .map(|row| decode(prepared, row, sql))
            .collect::<Result<_, _>>()?;
        Ok(PgRows {
            columns: Arc::clone(&prepared.columns),
            rows,
        })
    }

    /// Runs SQL text of any number of statements, without parameters and untranslated
    /// (migrations and transaction control written for PostgreSQL).
    ///
    /// # Errors
    ///
    /// As `execute`, for the first statement that fails; the ones before it ran.
    pub fn batch_execute(&self, sql: &str) -> Result<(), PgError> {
        let translated = translate(sql);
        let ends = translated.statements == 1
            && matches!(
                translated.controls[..],
                [Control::Commit | Control::Rollback]
            );
        if ends && self.begin_pending.replace(false) {
            // The transaction ran no statement: the server never saw it begin.
            return Ok(());
        }
        self.run(self.client.batch_execute(sql), sql, &translated)
    }

    /// Whether the session is gone (closed or lost); every later call fails.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Waits for `statement`, a driver future not polled yet, and follows the transaction
    /// through its outcome. A pending `BEGIN` goes ahead of it, pipelined: both futures
    /// are polled together, the `BEGIN` first, and the driver queues their messages in that
    /// order.
    ///
    /// When that `BEGIN` fails its error is the answer: at the top level `BEGIN` fails only
    /// with the session, so the statement did not run either.
    fn run<T>(
        &self,
        statement: impl Future<Output = Result<T, tokio_postgres::Error>>,
        sql: &str,
        translated: &Translated,
    ) -> Result<T, PgError> {
        if !self.begin_pending.replace(false) {
            return self.settle(block_on(statement), sql, translated);
        }
        let (begun, outcome) = block_on(both(self.client.batch_execute("BEGIN"), statement));
        self.settle(begun, "BEGIN", &self.begin)?;
        self.settle(outcome, sql, translated)
    }

    /// The cached statement for `sql`, prepared (after translation) on a miss.
    pub(crate) fn prepared(&self, sql: &str) -> Result<Arc<Prepared>, PgError> {
        if let Some(hit) = self.statements.borrow_mut().get(sql) {
            return Ok(hit);
        }
        let translated = translate(sql);
        let statement = block_on(self.client.prepare(&translated.sql))
            .map_err(|error| self.refused(&error, sql, &translated, false))?;
        let columns = statement.columns();
        let readers = columns
            .iter()
            .enumerate()
            .map(|(index, column)| Reader::for_column(index, column.name(), column.type_(), sql))
            .collect::<Result<_, _>>()?;
        let names = columns
            .iter()
            .map(|column| column.name().to_owned())
            .collect();
        let prepared = Arc::new(Prepared {
            sql: sql.into(),
            statement,
            columns: names,
            readers,
            translated,
        });
        self.statements
            .borrow_mut()
            .insert(sql, Arc::clone(&prepared));
        Ok(prepared)
    }

    /// Follows the session's transaction through the outcome of running `translated`.
    fn settle<T>(
        &self,
        outcome: Result<T, tokio_postgres::Error>,
        sql: &str,
        translated: &Translated,
    ) -> Result<T, PgError> {
        let value = outcome.map_err(|error| self.refused(&error, sql, translated, true))?;
        let after = self.transaction.get().after_success(translated);
        self.transaction.set(after.state);
        if after.commit_rolled_back {
            let message = "an earlier error aborted the transaction, so COMMIT rolled it back: \
                           nothing was committed";
            return Err(PgError::new(PgErrorKind::RolledBack, message, Some(sql)));
        }
        Ok(value)
    }

    /// Classifies a failure of `sql` and follows the transaction through it. `sent`: the
    /// statement itself was sent (not only its preparation), so a `COMMIT` in it may have run.
    /// A statement the server no longer accepts is forgotten, to be prepared again.
    fn refused(
        &self,
        error: &tokio_postgres::Error,
        sql: &str,
        translated: &Translated,
        sent: bool,
    ) -> PgError {
        let error = PgError::from_driver(error, Some(sql), sent && translated.commits());
        let state = self.transaction.get();
        self.transaction.set(if error.is_connection_lost() {
            TransactionState::Idle
        } else if error.sqlstate().is_some() {
            state.after_error(translated)
        } else {
            // The driver failed before the server saw the statement.
            state
        });
        if error
            .sqlstate()
            .is_some_and(|code| STALE_STATEMENT_SQLSTATES.contains(&code))
        {
            self.statements.borrow_mut().entries.remove(sql);
        }
        error
    }
}

/// Waits for two futures at once, polling `first` before `second` each time, and returns both
/// outputs.
async fn both<A: Future, B: Future>(first: A, second: B) -> (A::Output, B::Output) {
    let (mut first, mut second) = (pin!(first), pin!(second));
    let (mut first_out, mut second_out) = (None, None);
    poll_fn(move |cx| {
        if first_out.is_none()
            && let Poll::Ready(out) = first.as_mut().poll(cx)
        {
            first_out = Some(out);
        }
        if second_out.is_none()
            && let Poll::Ready(out) = second.as_mut().poll(cx)
        {
            second_out = Some(out);
        }
        match (first_out.take(), second_out.take()) {
            (Some(first), Some(second)) => Poll::Ready((first, second)),
            (first, second) => {
                first_out = first;
                second_out = second;
                Poll::Pending
            }
        }
    })
    .await
}

/// Binds every parameter by the type the server inferred for it.
fn bind_all<'v>(
    prepared: &Prepared,
    params: &'v [Value<'_>],
    sql: &str,
) -> Result<Vec<Bound<'v>>, PgError> {
    let types = prepared.statement.params();
    if types.len() != params.len() {
        let message = format!(
            "the statement takes {} parameters, {} were given",
            types.len(),
            params.len()
        );
        return Err(PgError::new(PgErrorKind::Parameter, message, Some(sql)));
    }
    params
        .iter()
        .zip(types)
        .enumerate()
        .map(|(index, (value, ty))| bind(index + 1, value, ty, sql))
        .collect()
}

fn as_params<'b>(bound: &'b [Bound<'_>]) -> Vec<&'b (dyn ToSql + Sync)> {
    bound
        .iter()
        .map(|value| value as &(dyn ToSql + Sync))
        .collect()
}

/// Reads one row by the column readers chosen at prepare time.
fn decode(
    prepared: &Prepared,
    row: &tokio_postgres::Row,
    sql: &str,
) -> Result<Vec<Value<'static>>, PgError> {
    let columns = prepared.statement.columns();
    let mut values = Vec::with_capacity(columns.len());
    for (index, (reader, column)) in prepared.readers.iter().zip(columns).enumerate() {
        let value = row
            .try_get::<_, Raw<'_>>(index)
            .map_err(|error| PgError::from_driver(&error, Some(sql), false))
            .and_then(|raw| {
                reader.read(column.type_(), raw.0).map_err(|error| {
                    let message = format!(
                        "column {index} `{}` ({}): {error}",
                        column.name(),
                        column.type_()
                    );
                    PgError::new(PgErrorKind::Column, message, Some(sql))
                })
            })?;
        values.push(value);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_cache_evicts_the_least_recently_used() {
        let mut cache = StatementCache::default();
        for n in 0..STATEMENT_CACHE_CAPACITY {
            cache.insert(&format!("SELECT {n}"), Arc::new(n));
        }
        assert_eq!(
            cache.get("SELECT 0").as_deref(),
            Some(&0),
            "used again: now the newest"
        );
        cache.insert("SELECT new", Arc::new(usize::MAX));
        assert_eq!(cache.entries.len(), STATEMENT_CACHE_CAPACITY);
        assert!(
            cache.get("SELECT 1").is_none(),
            "the least recently used went"
        );
        assert!(cache.get("SELECT 0").is_some() && cache.get("SELECT new").is_some());
    }
}
