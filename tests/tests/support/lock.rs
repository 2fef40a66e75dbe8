//! Helpers for the `lock_*` tests: a database set up as the journal sets it up, the
//! `lock_holder` child, crafted lock rows, and an injected clock and process table.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use durably_db::{Connection, params};
use durably_lock::{
    Clock, Error, LivenessDir, Locker, LockerConfig, MIGRATION_SQL, ProcFs, ProcessIdentity,
    ProcessStat, ProcessTable, Result, format_timestamp,
};

pub use durably_tests::immediate::immediate;

use super::{Driven, Scratch};

impl Scratch {
    /// A scratch directory with a migrated lock database in it.
    pub fn with_lock_tables() -> Self {
        let scratch = Self::new();
        let conn = open(&scratch.database);
        conn.execute_batch(MIGRATION_SQL).unwrap();
        // The table that fenced writes go to, so a test can see which writes got through.
        conn.execute_batch(
            "CREATE TABLE fenced_writes (resource TEXT NOT NULL, epoch INTEGER NOT NULL,
                                         pid INTEGER NOT NULL) STRICT;",
        )
        .unwrap();
        scratch
    }

    pub fn conn(&self) -> Connection {
        open(&self.database)
    }

    pub fn liveness(&self) -> LivenessDir {
        LivenessDir::beside(&self.database)
    }

    pub fn locker(&self) -> Locker {
        Locker::new(LockerConfig::new(self.liveness())).unwrap()
    }

    /// The names of the files in the liveness directory, sorted.
    pub fn liveness_files(&self) -> Vec<String> {
        let mut names: Vec<String> = match std::fs::read_dir(self.liveness().path()) {
            Ok(entries) => entries
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => panic!("cannot list the liveness directory: {error}"),
        };
        names.sort();
        names
    }
}

/// Opens `database` as the tests share it: WAL, a busy timeout, and `synchronous=NORMAL` (these
/// tests are about exclusion and liveness, not power loss, and NORMAL keeps them fast).
pub fn open(database: &Path) -> Connection {
    let conn = rusqlite::Connection::open(database).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.execute_batch("PRAGMA synchronous = NORMAL").unwrap();
    Connection::from(conn)
}

/// Inserts a held lock row exactly as given, bypassing the locker: how a test crafts holders
/// that are dead, reused, foreign or nonsensical.
pub fn insert_holder(
    conn: &Connection,
    resource: &str,
    epoch: i64,
    holder: &ProcessIdentity,
    instance_id: &str,
) {
    let now = format_timestamp(Utc::now());
    conn.execute(
        "INSERT INTO locks (resource, epoch, instance_id, pid, start_time, boot_id, pid_ns,
                            hostname, acquired_at, heartbeat_at, lease_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, NULL)",
        params![
            resource,
            epoch,
            instance_id,
            holder.pid,
            holder.start_time,
            holder.boot_id,
            holder.pid_ns,
            holder.hostname,
            now
        ],
    )
    .unwrap();
}

/// This process's identity as the real `/proc` reports it.
pub fn own_identity() -> ProcessIdentity {
    ProcFs::default().own_identity().unwrap()
}

/// A holder that is certainly dead: this process's pid with another start time, as if the pid
/// had been reused. Its instance has no liveness file, so only the pid tests can judge it.
pub fn reused_pid_holder() -> ProcessIdentity {
    let mut holder = own_identity();
    holder.start_time += 1;
    holder
}

/// Reads `/proc/<pid>/stat` state (field 3) with the real procfs; `None` once the pid is gone.
pub fn process_state(pid: u32) -> Option<char> {
    ProcFs::default()
        .stat(i64::from(pid))
        .unwrap()
        .map(|stat| stat.state)
}

/// Sends `signal` to `pid`, a child of this process.
fn signal(pid: u32, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).unwrap();
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped child.
    let result = unsafe { libc::kill(pid, signal) };
    assert_eq!(
        result,
        0,
        "kill({pid}, {signal}): {}",
        std::io::Error::last_os_error()
    );
}

/// Stops child `pid` with SIGSTOP and waits until `/proc` shows it stopped.
pub fn stop(pid: u32) {
    signal(pid, libc::SIGSTOP);
    super::wait_until("the child is stopped", || process_state(pid) == Some('T'));
}

/// Continues stopped child `pid` with SIGCONT and waits until `/proc` shows it running.
pub fn resume(pid: u32) {
    signal(pid, libc::SIGCONT);
    super::wait_until("the child runs again", || process_state(pid) != Some('T'));
}

/// A clock that stands still until a test moves it.
#[derive(Debug)]
pub struct TestClock(Mutex<DateTime<Utc>>);

impl TestClock {
    pub fn at(time: DateTime<Utc>) -> Arc<Self> {
        Arc::new(Self(Mutex::new(time)))
    }

    pub fn advance(&self, by: chrono::Duration) {
        let mut now = self.0.lock().unwrap();
        *now += by;
    }
}

impl Clock for TestClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

/// What a fake `/proc/<pid>/stat` lookup returns.
#[derive(Debug, Clone)]
pub enum FakeStat {
    Running(ProcessStat),
    Missing,
    /// The entry exists but cannot be read.
    Broken,
}

/// A process table a test fills in; a pid it does not know is missing.
#[derive(Debug)]
pub struct FakeProcesses {
    pub own: ProcessIdentity,
    pub pids: Mutex<HashMap<i64, FakeStat>>,
}

impl FakeProcesses {
    pub fn new(own: ProcessIdentity) -> Arc<Self> {
        Arc::new(Self {
            own,
            pids: Mutex::new(HashMap::new()),
        })
    }

    pub fn set(&self, pid: i64, stat: FakeStat) {
        self.pids.lock().unwrap().insert(pid, stat);
    }
}

impl ProcessTable for FakeProcesses {
    fn own_identity(&self) -> Result<ProcessIdentity> {
        Ok(self.own.clone())
    }

    fn stat(&self, pid: i64) -> Result<Option<ProcessStat>> {
        match self.pids.lock().unwrap().get(&pid).cloned() {
            Some(FakeStat::Running(stat)) => Ok(Some(stat)),
            Some(FakeStat::Missing) | None => Ok(None),
            Some(FakeStat::Broken) => Err(Error::Identity {
                path: PathBuf::from(format!("/fake/{pid}/stat")),
                source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
            }),
        }
    }
}

/// The `lock_holder` helper for `database` and `resource`, started and registered: returns the
/// child with its instance id.
pub fn spawn_holder(database: &Path, resource: &str, extra: &[&str]) -> (Driven, String) {
    let database = database.to_str().unwrap();
    let mut args = vec![database, resource];
    args.extend_from_slice(extra);
    let mut holder = Driven::spawn(env!("CARGO_BIN_EXE_lock_holder"), &args);
    let ready = holder.expect("ready");
    assert_eq!(
        ready[1],
        holder.pid().to_string(),
        "the helper reports its own pid"
    );
    (holder, ready[0].clone())
}
