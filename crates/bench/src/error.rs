//! The harness's one error type.

use std::path::PathBuf;

/// Everything that can stop a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The journal under test failed.
    #[error("journal: {0}")]
    Journal(#[from] durably::Error),
    /// The runtime under test failed.
    #[error("runtime: {0}")]
    Runtime(#[from] durably::runtime::Error),
    /// The scheduler under test failed.
    #[error("scheduler: {0}")]
    Scheduler(#[from] durably::scheduler::Error),
    /// The raw-SQLite baseline or the bulk pre-fill failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] durably::sqlite::rusqlite::Error),
    /// The baseline, or the PostgreSQL schema around a scenario, failed.
    #[error("database: {0}")]
    Db(#[from] durably::db::Error),
    /// The run cannot start as asked (a backend that is not built in or not reachable).
    #[error("{0}")]
    Setup(String),
    /// A file or process operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or program concerned.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A benchmark task panicked or was cancelled.
    #[error("a benchmark task did not finish: {0}")]
    Join(#[from] tokio::task::JoinError),
    /// A multiprocess worker failed or printed something unexpected.
    #[error("multiprocess worker: {0}")]
    Worker(String),
    /// A step the benchmark ran returned something it should not have.
    #[error("unexpected step outcome: {0}")]
    Unexpected(String),
}

/// The harness's result type.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

impl BenchError {
    /// An I/O error with what was being done and to which path.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
