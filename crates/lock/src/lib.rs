//! Exclusive-open locks as pid-stamped SQLite rows.
//!
//! A lock is a row in the `locks` table (see `schema/0001_locks.sql`). Its holder is stamped
//! with an instance UUID, pid, process start time, boot id, pid-namespace inode and host name,
//! and each instance keeps a liveness file beside the database locked with `flock` for its whole
//! life. A holder is judged dead only on evidence that nothing contradicts (its liveness file is
//! free while its pid cannot be shown to run, the host rebooted, its pid is gone, reused or a
//! zombie), or when it opted into a lease and let it expire. The liveness directory and its
//! files count only when no other user could have made them (see [`LivenessDir`]).
//! Every acquire and takeover bumps a fencing epoch; a write fenced by a stale epoch fails with
//! [`Error::LockLost`].
//!
//! On PostgreSQL, where holders may run on any host, the evidence is a session instead
//! ([`Liveness::Session`]): each instance holds an advisory lock on its [`session_key`] on a
//! dedicated session ([`SessionLiveness`]), and a holder is alive exactly while `pg_locks` shows
//! its key held; pids, boot ids and files are stamped but never judged there. A fence locks the
//! lock row `FOR SHARE`, so a takeover's epoch swap waits for the fenced writes in flight. An
//! instance whose session is lost fails every lock operation with [`Error::InstanceLost`].
//!
//! Every operation runs on the caller's connection, inside the caller's transaction, so a lock
//! change commits atomically with the caller's own rows.
//!
//! ```
//! use durably_lock::{Acquire, LivenessDir, Locker, LockerConfig, MIGRATION_SQL};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let database = dir.path().join("journal.db");
//! let conn = durably_db::Connection::from(rusqlite::Connection::open(&database)?);
//! conn.execute_batch(MIGRATION_SQL)?;
//!
//! let liveness = LivenessDir::beside(&database);
//! let first = Locker::new(LockerConfig::new(liveness.clone()))?;
//! let second = Locker::new(LockerConfig::new(liveness))?;
//!
//! let Acquire::Acquired { epoch, .. } = first.try_acquire(&conn, "execution-1")? else {
//!     panic!("a fresh lock is free");
//! };
//! // The holder is alive (its liveness file is locked), so the second instance is refused.
//! assert!(matches!(second.try_acquire(&conn, "execution-1")?, Acquire::Held { .. }));
//! first.fence(&conn, "execution-1", epoch)?;
//! first.release(&conn, "execution-1", epoch)?;
//! assert!(matches!(
//!     second.try_acquire(&conn, "execution-1")?,
//!     Acquire::Acquired { epoch: 2, .. }
//! ));
//! # Ok(())
//! # }
//! ```

mod checked_dir;
mod clock;
mod error;
mod identity;
mod judge;
mod liveness;
mod locker;
mod row;
mod session;

pub use checked_dir::Refusal;
pub use clock::{Clock, SystemClock, format_timestamp, parse_timestamp};
pub use error::{Error, Result};
pub use identity::{ProcFs, ProcessIdentity, ProcessStat, ProcessTable};
pub use judge::{DeathReason, Judge, Judgement, Liveness};
pub use liveness::{LivenessDir, LivenessFile, Probe};
pub use locker::{Acquire, Locker, LockerConfig, TakeOver};
pub use row::{Epoch, HolderRecord, LockRow, held, held_readable, read};
pub use session::{SESSION_KEY_ATTEMPTS_MAX, SessionLiveness, SessionProbe, session_key};

/// The migration that creates the `locks` table (`schema/0001_locks.sql`). The journal applies
/// it with its other migrations; it is exported for programs that use locks on their own.
pub const MIGRATION_SQL: &str = include_str!("../../../schema/0001_locks.sql");
