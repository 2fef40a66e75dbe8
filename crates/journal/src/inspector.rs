//! [`Inspector`]: a journal opened only to be read. It never writes, never migrates, holds no
//! lock instance and creates no file (no `-wal`, no `-shm`, no liveness directory), so read
//! access to the file is enough, and neither a writer's transaction nor a long migration blocks
//! it. It reads with the same queries as [`Journal`], and judges lock holders with a
//! [`Judge`] of its own, which never creates anything either.
//!
//! How it opens the file depends on what lies beside it (docs/design.md, "Inspection never
//! writes"):
//! - A WAL and its index: a writer has the journal open, or stopped without closing it. SQLite
//!   reads them as any reader does, and creates nothing, since both exist. Where this user may
//!   not write the index, SQLite reads the WAL into private memory instead.
//! - No WAL: every commit is in the database file. It is read with `immutable=1`, which takes no
//!   lock and creates nothing; after each read the file is checked to be as it was when opened,
//!   and a read that a writer's checkpoint may have mixed with newer pages is done again.
//! - A WAL with no index, or a rollback journal: reading would mean creating the index or
//!   rolling the journal back, so the file is refused as [`Error::NeedsRecovery`].
//!
//! Whoever wrote the file, its schema is not trusted: the connection runs with
//! `trusted_schema=OFF`, and every read has a deadline, checked by SQLite's progress handler,
//! so a view that never ends stops with [`Error::ReadTimeout`].

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use durably_db::{Connection, Target};
use durably_lock::{Judge, Judgement, LivenessDir, LockRow};
use rusqlite::OpenFlags;
use rusqlite::config::DbConfig;
use uuid::Uuid;

use crate::backend;
use crate::config::JournalBuilder;
use crate::error::{Error, Result};
use crate::files::{self, Siblings};
use crate::inspect::{self, Previews, Reader};
use crate::journal::Journal;
use crate::records::{EventRecord, ExecutionRecord, ListFilter, StepRecord};
use crate::seen_intent::{self, SeenIntent};
use crate::storage::{self, APPLICATION_ID};
use crate::sweep::{self, SweepReport};

/// The oldest schema version whose tables and views the reading queries understand. Migration
/// 5 changed only how `steps` is stored, so a journal read while that migration runs (the
/// reader sees version 4 until it commits) reads as well as a current one.
const SCHEMA_VERSION_READABLE_MIN: i64 = 4;

/// How many virtual-machine instructions SQLite runs between two looks at the deadline.
const DEADLINE_CHECK_OPS: i32 = 10_000;

/// Reads of a journal without a WAL attempted, each after a writer changed the file during the
/// one before, before [`Error::ChangedWhileReading`].
const SNAPSHOT_READ_ATTEMPTS_MAX: u32 = 3;

/// The most problems [`Inspector::integrity_check`] lists.
const INTEGRITY_PROBLEMS_MAX: u32 = 20;

/// A journal opened only to be read: it never writes, never migrates, holds no lock instance
/// and creates no file (no `-wal`, `-shm` or liveness directory), so read access to the file
/// is enough, and no writer's transaction blocks it. Open one with [`Journal::inspect`] or
/// [`JournalBuilder::inspect`]; docs/design.md, "Inspection never writes", says how it reads.
///
/// Each read is one read transaction, with a deadline ([`JournalBuilder::read_timeout_ms`]),
/// on a connection that trusts no schema (`trusted_schema=OFF`). With the journal's WAL beside
/// it, a read sees the commits made before it began. Without, the file is read without a lock,
/// and a read sees the commits that had reached the file; one that a writer changed meanwhile
/// is read again. One thread uses an inspector at a time (it is `Send`, not `Sync`).
#[derive(Debug)]
pub struct Inspector {
    /// The database file, with its links resolved.
    path: PathBuf,
    /// The read connection; replaced when a read without a lock found the file changed.
    conn: RefCell<Connection>,
    /// How `conn` reads the file.
    view: Cell<View>,
    /// Whether `conn` has passed the compatibility check of `check_readable`.
    checked: Cell<bool>,
    judge: Judge,
    deadline: Arc<Deadline>,
    read_timeout_ms: u64,
    busy_timeout_ms: u64,
    /// The payload cap of every read ([`JournalBuilder::payload_bytes_max`]): a payload over it
    /// is refused or left out in SQL, before it is loaded.
    payload_bytes_max: usize,
}

impl Journal {
    /// Opens the journal at `target` only to read it, with the default settings: see
    /// [`Inspector`].
    ///
    /// # Errors
    /// As [`JournalBuilder::inspect`].
    pub fn inspect(target: impl Into<Target>) -> Result<Inspector> {
        Self::builder(target).inspect()
    }
}

impl Inspector {
    /// Opens the journal `config` names only to read it, and checks that it is one this
    /// durably reads. Of the settings, the busy and read timeouts, the payload cap, the clock
    /// and the process table apply; a writer's settings do not.
    pub(crate) fn open_with(config: JournalBuilder) -> Result<Self> {
        #[cfg(feature = "postgres")]
        if let Target::Postgres(url) = &config.target {
            let url = url.clone();
            return Self::open_postgres(config, &url);
        }
        let path = resolve(backend::sqlite_path(&config.target)?)?;
        files::check_path_length(&path)?;
        let own = config.processes.own_identity()?;
        let liveness = LivenessDir::beside(&path);
        let judge = Judge::new(own, liveness, config.processes, config.clock);
        let deadline = Arc::new(Deadline::new());
        let (conn, view) = connect(&path, &deadline, config.busy_timeout_ms)?;
        let inspector = Self {
            path,
            conn: RefCell::new(conn),
            view: Cell::new(view),
            checked: Cell::new(false),
            judge,
            deadline,
            read_timeout_ms: config.read_timeout_ms,
            busy_timeout_ms: config.busy_timeout_ms,
            payload_bytes_max: config.payload_bytes_max,
        };
        // The first read checks the file before anything else is read from it.
        inspector.read(|_| Ok(()))?;
        Ok(inspector)
    }

    /// The inspector of the journal in the PostgreSQL database `url` names: one read-only
    /// session (see `pg::readers::inspector_session`), checked before its first read.
    #[cfg(feature = "postgres")]
    fn open_postgres(config: JournalBuilder, url: &durably_db::PgUrl) -> Result<Self> {
        let path = PathBuf::from(url.to_string());
        let conn = crate::pg::readers::inspector_session(url, &path, &config)?;
        let own = config.processes.own_identity()?;
        let judge = Judge::new(
            own,
            crate::pg::liveness::observe(url, &path)?,
            config.processes,
            config.clock,
        );
        let inspector = Self {
            path,
            conn: RefCell::new(conn),
            view: Cell::new(View::Server),
            checked: Cell::new(false),
            judge,
            deadline: Arc::new(Deadline::new()),
            read_timeout_ms: config.read_timeout_ms,
            busy_timeout_ms: config.busy_timeout_ms,
            payload_bytes_max: config.payload_bytes_max,
        };
        inspector.read(|_| Ok(()))?;
        Ok(inspector)
    }

    /// The database file, with its links resolved; on PostgreSQL, the URL with its password
    /// hidden.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The judge of lock holders, as this process sees them.
    pub fn judge(&self) -> &Judge {
        &self.judge
    }

    /// The largest payload a read returns, in bytes ([`JournalBuilder::payload_bytes_max`]).
    pub fn payload_bytes_max(&self) -> usize {
        self.payload_bytes_max
    }

    /// Runs `work` in one read transaction, under the read timeout. Without a WAL beside the
    /// journal, `work` may run again, on a fresh connection, when a writer changed the file
    /// while it ran.
    ///
    /// # Errors
    /// `work`'s own error, [`Error::ReadTimeout`], [`Error::ChangedWhileReading`], or a
    /// storage error.
    pub fn read<T>(&self, work: impl Fn(&Connection) -> Result<T>) -> Result<T> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.read_once(&work) {
                Ok(Some(value)) => return Ok(value),
                Ok(None) if attempts < SNAPSHOT_READ_ATTEMPTS_MAX => self.reconnect()?,
                Ok(None) => {
                    return Err(Error::ChangedWhileReading {
                        path: self.path.clone(),
                        attempts,
                    });
                }
                Err(error) => return Err(error.at_path(&self.path)),
            }
        }
    }

    /// One execution's row.
    ///
    /// # Errors
    /// As [`Inspector::read`]; [`Error::PayloadTooLarge`] for a stored payload over the cap,
    /// [`Error::Inconsistent`] for a damaged row.
    pub fn get(&self, id: Uuid) -> Result<Option<ExecutionRecord>> {
        self.read(|conn| inspect::get(conn, id, self.payload_bytes_max))
    }

    /// Executions, newest first, filtered.
    ///
    /// # Errors
    /// As [`Inspector::get`].
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<ExecutionRecord>> {
        self.read(|conn| inspect::list(conn, filter, self.payload_bytes_max))
    }

    /// All of one execution's steps, in order. An execution can have any number of steps:
    /// [`Inspector::steps_page`] reads them a page at a time.
    ///
    /// # Errors
    /// As [`Inspector::get`].
    pub fn steps(&self, id: Uuid) -> Result<Vec<StepRecord>> {
        self.read(|conn| inspect::steps_page(conn, id, None, None, self.payload_bytes_max))
    }

    /// At most `limit` of one execution's steps, in order, starting after step `after` (from
    /// the first step when `None`), as [`Journal::steps_page`].
    ///
    /// # Errors
    /// As [`Inspector::get`].
    pub fn steps_page(&self, id: Uuid, after: Option<u32>, limit: u32) -> Result<Vec<StepRecord>> {
        let bytes_max = self.payload_bytes_max;
        self.read(|conn| inspect::steps_page(conn, id, after, Some(limit), bytes_max))
    }

    /// All of one execution's audit events, in order. [`Inspector::events_page`] reads them a
    /// page at a time.
    ///
    /// # Errors
    /// As [`Inspector::get`].
    pub fn events(&self, id: Uuid) -> Result<Vec<EventRecord>> {
        self.read(|conn| inspect::events_page(conn, id, None, None, self.payload_bytes_max))
    }

    /// At most `limit` of one execution's audit events, in order, starting after the event
    /// with id `after` (from the first when `None`), as [`Journal::events_page`].
    ///
    /// # Errors
    /// As [`Inspector::get`].
    pub fn events_page(
        &self,
        id: Uuid,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<EventRecord>> {
        let bytes_max = self.payload_bytes_max;
        self.read(|conn| inspect::events_page(conn, id, after, Some(limit), bytes_max))
    }

    /// The same readings with payloads as previews ([`crate::PayloadPreview`]), for listings
    /// that show payloads to people: a payload of any size costs them at most the payload cap.
    pub fn previews(&self) -> Previews<'_> {
        Previews::of(Reader::Inspector(self))
    }

    /// Every held lock with this process's judgement of its holder.
    ///
    /// # Errors
    /// As [`Inspector::read`]; a damaged lock row.
    pub fn lock_holders(&self) -> Result<Vec<(LockRow, Judgement)>> {
        let rows = self.read(|conn| Ok(durably_lock::held(conn)?))?;
        Ok(inspect::judged(rows, &self.judge))
    }

    /// Which intent step `seq` is now, if it is in the ambiguous window, as
    /// [`crate::Operator::seen_intent`] answers it.
    ///
    /// # Errors
    /// [`Error::Locked`] while a live process holds the execution,
    /// [`Error::LeaseExpiredHolderAlive`] while one whose lease expired may still run; as
    /// [`Inspector::read`].
    pub fn seen_intent(&self, id: Uuid, seq: u32) -> Result<Option<SeenIntent>> {
        let found = self.read(|conn| seen_intent::with_holders(conn, id, seq))?;
        // An inspector holds no lock, so no lock is a leak of its own.
        seen_intent::unless_held(found, id, seq, &self.judge, |_| false)
    }

    /// What the crash-orphan sweep would do now: a dry run of [`crate::Operator::sweep`].
    ///
    /// # Errors
    /// As [`Inspector::read`].
    pub fn sweep_preview(&self) -> Result<SweepReport> {
        self.read(|conn| sweep::preview(conn, &self.judge))
    }

    /// SQLite's `PRAGMA integrity_check`: the problems it finds (at most 20), none when the
    /// file is sound. On PostgreSQL the server keeps its own storage sound (and `amcheck`
    /// checks it), so this only reads the schema's version and finds nothing.
    ///
    /// # Errors
    /// As [`Inspector::read`]; [`Error::Corrupt`] when the damage stops the check itself.
    pub fn integrity_check(&self) -> Result<Vec<String>> {
        self.read(|conn| {
            if conn.as_sqlite().is_none() {
                return Ok(Vec::new());
            }
            let mut statement =
                conn.prepare(&format!("PRAGMA integrity_check({INTEGRITY_PROBLEMS_MAX})"))?;
            let found = statement
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<durably_db::Result<Vec<_>>>()?;
            Ok(if found == ["ok"] { Vec::new() } else { found })
        })
    }

    /// One read transaction; `None` when the journal was read without a lock and changed
    /// meanwhile, so what was read may mix two states of the file.
    fn read_once<T>(&self, work: &impl Fn(&Connection) -> Result<T>) -> Result<Option<T>> {
        let value = {
            let conn = self.conn.borrow();
            self.deadline.arm(self.read_timeout_ms);
            let value = in_read_transaction(&conn, |conn| {
                if !self.checked.get() {
                    self.check_readable(conn)?;
                }
                work(conn)
            });
            if self.deadline.disarm() || value.as_ref().is_err_and(|error| self.timed_out(error)) {
                return Err(Error::ReadTimeout {
                    path: self.path.clone(),
                    timeout_ms: self.read_timeout_ms,
                });
            }
            value
        };
        if let View::Snapshot(opened) = self.view.get()
            && FileState::of(&self.path)? != opened
        {
            return Ok(None);
        }
        let value = value?;
        self.checked.set(true);
        Ok(Some(value))
    }

    /// Refuses what this build does not read (see the free function of the same name).
    fn check_readable(&self, conn: &Connection) -> Result<()> {
        match self.view.get() {
            #[cfg(feature = "postgres")]
            View::Server => {
                crate::pg::readers::check_readable(conn, &self.path, SCHEMA_VERSION_READABLE_MIN)
            }
            View::Live | View::Snapshot(_) => check_readable(conn, &self.path),
        }
    }

    /// Whether `error` is the server stopping a read at the read timeout (SQLite's reads are
    /// stopped by the deadline instead).
    fn timed_out(&self, error: &Error) -> bool {
        match self.view.get() {
            #[cfg(feature = "postgres")]
            View::Server => crate::pg::readers::timed_out(error),
            View::Live | View::Snapshot(_) => {
                let _ = error;
                false
            }
        }
    }

    /// Opens the file again, deciding afresh how to read it.
    fn reconnect(&self) -> Result<()> {
        let (conn, view) = connect(&self.path, &self.deadline, self.busy_timeout_ms)?;
        *self.conn.borrow_mut() = conn;
        self.view.set(view);
        self.checked.set(false);
        Ok(())
    }
}

/// How the connection reads the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    /// With SQLite's locks, its WAL and its index, as any reader.
    Live,
    /// With `immutable=1`: no lock and no WAL; each read checks that the file is still as it
    /// was when opened.
    Snapshot(FileState),
    /// A PostgreSQL session: the server gives each read transaction its snapshot.
    #[cfg(feature = "postgres")]
    Server,
}

/// What changes when anyone writes the database file: a checkpoint, or a file put in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileState {
    device: u64,
    inode: u64,
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileState {
    fn of(path: &Path) -> Result<Self> {
        let found = std::fs::symlink_metadata(path).map_err(|source| Error::Io {
            action: "look at the database file",
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            device: found.dev(),
            inode: found.ino(),
            size: found.size(),
            modified: (found.mtime(), found.mtime_nsec()),
            changed: (found.ctime(), found.ctime_nsec()),
        })
    }
}

/// The deadline of the read in progress, which SQLite's progress handler looks at.
#[derive(Debug)]
struct Deadline {
    /// What `due_ns` counts from.
    start: Instant,
    /// Nanoseconds after `start` at which the read is stopped; 0 while no read runs.
    due_ns: AtomicU64,
    /// Set by the progress handler when it stopped a read.
    fired: AtomicBool,
}

impl Deadline {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            due_ns: AtomicU64::new(0),
            fired: AtomicBool::new(false),
        }
    }

    /// Starts the deadline of a read that may run `timeout_ms`.
    fn arm(&self, timeout_ms: u64) {
        self.fired.store(false, Ordering::Relaxed);
        let due = self.start.elapsed() + Duration::from_millis(timeout_ms);
        self.due_ns
            .store((due.as_nanos() as u64).max(1), Ordering::Relaxed);
    }

    /// Ends the read's deadline; whether it stopped the read.
    fn disarm(&self) -> bool {
        self.due_ns.store(0, Ordering::Relaxed);
        self.fired.load(Ordering::Relaxed)
    }

    /// The progress handler: `true` (stop the statement) once the deadline has passed.
    fn passed(&self) -> bool {
        let due = self.due_ns.load(Ordering::Relaxed);
        let passed = due != 0 && self.start.elapsed().as_nanos() as u64 >= due;
        if passed {
            self.fired.store(true, Ordering::Relaxed);
        }
        passed
    }
}

/// Resolves the links of `path`, which must exist: a reader never creates a file.
fn resolve(path: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(path).map_err(|source| match std::fs::symlink_metadata(path) {
        Ok(found) if found.file_type().is_symlink() => Error::DanglingSymlink {
            path: path.to_owned(),
            target: std::fs::read_link(path).unwrap_or_default(),
        },
        _ => Error::Io {
            action: "find the database file",
            path: path.to_owned(),
            source,
        },
    })
}

/// Opens a read connection to the journal at `path` as what lies beside it allows (see the
/// module documentation), without creating anything.
fn connect(
    path: &Path,
    deadline: &Arc<Deadline>,
    busy_timeout_ms: u64,
) -> Result<(Connection, View)> {
    let main = files::check_to_read(path)?;
    files::check_siblings(path, main, Siblings::Reading)?;
    let opened = FileState::of(path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let wal = files::sibling(path, "-wal");
    let (conn, view) = if !exists(&wal)? {
        let journal = files::sibling(path, "-journal");
        if std::fs::symlink_metadata(&journal).is_ok_and(|found| found.len() > 0) {
            return Err(Error::NeedsRecovery {
                path: path.to_owned(),
                reason: format!(
                    "the rollback journal {} holds a write that was interrupted or is under way",
                    journal.display()
                ),
            });
        }
        files::check_readable(path)?;
        let snapshot = rusqlite::Connection::open_with_flags(
            snapshot_uri(path),
            flags | OpenFlags::SQLITE_OPEN_URI,
        );
        (snapshot, View::Snapshot(opened))
    } else if !exists(&files::sibling(path, "-shm"))? {
        return Err(Error::NeedsRecovery {
            path: path.to_owned(),
            reason: format!(
                "its WAL {} has no index (-shm) beside it, and a reader does not create one",
                wal.display()
            ),
        });
    } else {
        for file in [path.to_owned(), wal, files::sibling(path, "-shm")] {
            files::check_readable(&file)?;
        }
        (
            rusqlite::Connection::open_with_flags(path, flags),
            View::Live,
        )
    };
    let conn = conn.map_err(|error| Error::from(error).at_path(path))?;
    configure(&conn, deadline, busy_timeout_ms).map_err(|error| error.at_path(path))?;
    Ok((Connection::from(conn), view))
}

/// The reader's settings (the read pool's, see `storage::configure_reader`), the ones only
/// an inspector needs, and the progress handler that enforces `deadline`.
fn configure(
    conn: &rusqlite::Connection,
    deadline: &Arc<Deadline>,
    busy_timeout_ms: u64,
) -> Result<()> {
    storage::configure_reader(conn, busy_timeout_ms)?;
    let trusted: i64 = conn.query_row("PRAGMA trusted_schema", [], |row| row.get(0))?;
    if trusted != 0 {
        return Err(Error::Pragma {
            pragma: "trusted_schema",
            wanted: "0".to_owned(),
            actual: trusted.to_string(),
        });
    }
    // A read-only connection cannot checkpoint anyway; this says so to SQLite as well.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    let handler = Arc::clone(deadline);
    conn.progress_handler(DEADLINE_CHECK_OPS, Some(move || handler.passed()))?;
    Ok(())
}

/// Whether a file exists at `path` (a link counts, and is not followed).
fn exists(path: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(Error::Io {
            action: "look at the file beside the database",
            path: path.to_owned(),
            source,
        }),
    }
}

/// The URI that opens `path` read-only with `immutable=1`: SQLite then takes no lock and never
/// looks for a WAL or creates one. Every byte of the path but the unreserved ones and `/` is
/// percent-encoded, so that no `?`, `#` or `%` in a name can end the path or add a parameter.
fn snapshot_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            let _ = write!(uri, "%{byte:02X}");
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Runs `work` in one read transaction.
fn in_read_transaction<T>(
    conn: &Connection,
    work: impl FnOnce(&Connection) -> Result<T>,
) -> Result<T> {
    let transaction = conn.transaction()?;
    let value = work(&transaction)?;
    transaction.commit()?;
    Ok(value)
}

/// Refuses, as a writer's open would and before any query, a file that is not a journal this
/// durably reads: another application's and a newer durably's (both by
/// `storage::check_header`), one with no journal in it yet, and one older than the reading
/// queries understand. A reader never migrates.
fn check_readable(conn: &Connection, path: &Path) -> Result<()> {
    storage::check_header(backend::sqlite(conn)?, path)?;
    let (application_id, version): (i64, i64) = conn.query_row(
        "SELECT (SELECT application_id FROM pragma_application_id()),
                (SELECT user_version FROM pragma_user_version())",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    if application_id != APPLICATION_ID {
        // The header check passes a file without our id only when it is new: no tables.
        return Err(Error::NotAJournal {
            path: path.to_owned(),
            reason: "it is an SQLite database with no tables, which no durably program has \
                     opened yet"
                .to_owned(),
        });
    }
    if version < SCHEMA_VERSION_READABLE_MIN {
        return Err(Error::SchemaTooOld {
            path: path.to_owned(),
            found: version,
            oldest: SCHEMA_VERSION_READABLE_MIN,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::snapshot_uri;
    use std::path::Path;

    #[test]
    fn a_snapshot_uri_encodes_every_byte_that_could_end_the_path() {
        assert_eq!(
            snapshot_uri(Path::new("/tmp/a b/j?x#y%z.db")),
            "file:/tmp/a%20b/j%3Fx%23y%25z.db?immutable=1"
        );
    }
}
