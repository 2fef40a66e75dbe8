//! Shared helpers for the integration tests of `durably-tests`: a scratch directory, bounded
//! waits, helper processes driven over pipes, an integrity check and a runtime. What only one
//! family of tests needs sits in its submodule: [`lock`], [`journal`] and [`scheduler`].

// Each test file uses a different subset of these helpers, and like the tests themselves they
// fail the test by panicking.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc
)]

pub mod journal;
pub mod lock;
mod process;
pub mod runtime;
pub mod scheduler;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use process::{Driven, spawn, wait_exit};

/// How long any single wait for a child or a condition may take before the test fails.
pub const WAIT_MAX: Duration = Duration::from_secs(20);

/// How often a bounded wait looks again at what it waits for.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// The uid and gid of `nobody`, for running a child without root's powers.
pub const NOBODY: u32 = 65_534;

/// Whether this process runs as root, so it can act as, and for, another user.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A scratch directory with a database path and a ledger path in it; neither file exists until
/// something creates it. The `lock`, `journal` and `scheduler` submodules add what their tests
/// need to it.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    pub database: PathBuf,
    /// The file the helper processes' effects append their lines to.
    pub ledger: PathBuf,
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("journal.db");
        let ledger = dir.path().join("ledger.txt");
        Self {
            dir,
            database,
            ledger,
        }
    }
}

/// The names in directory `dir`, sorted.
pub fn directory_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The path of the file SQLite keeps beside the database at `path` under `suffix` (`-wal`,
/// `-shm`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The lines of the file at `path`; none if there is no such file yet.
pub fn read_lines(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => panic!("cannot read {}: {error}", path.display()),
    }
}

/// Polls `condition` until it holds, failing the test with `what` after [`WAIT_MAX`]. Used only
/// to observe state that has no pipe to signal it: a process stopped or a zombie, a row or a
/// ledger line written by another process.
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT_MAX:?} waiting until {what}"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// `PRAGMA integrity_check` on a fresh read-only connection.
pub fn integrity(path: &Path) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap()
}

/// Every row of `sql` (no parameters) in the database at `path`, as pairs of its first two
/// columns.
pub fn query_pairs<A, B>(path: &Path, sql: &str) -> Vec<(A, B)>
where
    A: rusqlite::types::FromSql,
    B: rusqlite::types::FromSql,
{
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut statement = conn.prepare(sql).unwrap();
    statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// A single-threaded runtime, for tests that drive the journal's async API from plain `#[test]`s.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
