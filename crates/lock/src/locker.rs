//! [`Locker`]: one instance's view of the lock table.

use std::collections::HashSet;
use std::sync::Arc;

use durably_db::Connection;
use uuid::Uuid;

use crate::clock::{Clock, SystemClock, format_timestamp};
use crate::error::{Error, Result};
use crate::identity::{ProcFs, ProcessIdentity, ProcessTable};
use crate::judge::{DeathReason, Judge, Judgement, Liveness};
use crate::liveness::LivenessFile;
use crate::row::{self, Epoch, HolderRecord, LockRow, NewHolder};
use crate::session::SessionLiveness;

/// How many times one acquire re-reads a lock after losing a takeover race before giving up.
const TAKEOVER_RACES_MAX: u32 = 3;

/// How a [`Locker`] is set up. Time and process identity are injected so tests can fake them.
#[derive(Debug, Clone)]
pub struct LockerConfig {
    /// Where this instance proves it is alive: liveness files beside a SQLite database, or a
    /// PostgreSQL session holding the instance's advisory key.
    pub liveness: Liveness,
    /// Opt-in lease: when set, every lock this instance takes may be taken over once its
    /// heartbeat is older than this, even if the process is alive. `None`: no lease.
    pub lease_ms: Option<u64>,
    /// Where process facts come from.
    pub processes: Arc<dyn ProcessTable>,
    /// Where time comes from.
    pub clock: Arc<dyn Clock>,
}

impl LockerConfig {
    /// The real `/proc`, the system clock, no lease.
    pub fn new(liveness: impl Into<Liveness>) -> Self {
        Self {
            liveness: liveness.into(),
            lease_ms: None,
            processes: Arc::new(ProcFs::default()),
            clock: Arc::new(SystemClock),
        }
    }
}

/// What [`Locker::try_acquire`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the lock may be held by someone else"]
pub enum Acquire {
    /// This instance holds the lock now, at `epoch`.
    Acquired {
        /// The fencing epoch to present on every write.
        epoch: Epoch,
        /// Set when the lock was taken from a dead holder.
        took_over: Option<TakeOver>,
    },
    /// Someone else holds it and is alive or cannot be judged (a second acquire from this same
    /// instance is refused too: a lock belongs to one holder at one epoch).
    Held {
        /// The holder's record.
        holder: HolderRecord,
        /// The lock's epoch.
        epoch: Epoch,
        /// Why the holder counts as alive.
        judgement: Judgement,
    },
}

/// A takeover from a dead holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeOver {
    /// Who held the lock.
    pub from: HolderRecord,
    /// Their epoch.
    pub from_epoch: Epoch,
    /// Why they were judged dead.
    pub reason: DeathReason,
}

/// One instance (one process, one database) taking, checking and releasing locks.
///
/// It holds its liveness file (SQLite) or its liveness session (PostgreSQL) for as long as it
/// exists.
#[derive(Debug)]
pub struct Locker {
    instance_id: Uuid,
    instance_text: String,
    judge: Judge,
    lease_ms: Option<i64>,
    /// SQLite only: the file this instance keeps locked.
    _liveness_file: Option<LivenessFile>,
    /// PostgreSQL only: the session holding this instance's key. Once it is lost, every lock
    /// operation fails with [`Error::InstanceLost`] before touching a row.
    session: Option<SessionLiveness>,
}

impl Locker {
    /// Registers a new instance: reads this process's identity, and creates and locks this
    /// instance's liveness file; on PostgreSQL the instance is the one whose key the liveness
    /// session already holds.
    ///
    /// # Errors
    /// [`Error::Identity`] when `/proc` cannot be read, [`Error::LivenessDir`] when the
    /// liveness directory cannot be used, [`Error::SessionWithoutKey`] for an observing
    /// session.
    pub fn new(config: LockerConfig) -> Result<Self> {
        let own = config.processes.own_identity()?;
        let (instance_id, liveness_file, session) = match &config.liveness {
            Liveness::Files(dir) => {
                let instance_id = Uuid::new_v4();
                (instance_id, Some(dir.hold(&instance_id)?), None)
            }
            Liveness::Session(session) if session.holds_key() => {
                (session.instance_id(), None, Some(session.clone()))
            }
            Liveness::Session(_) => return Err(Error::SessionWithoutKey),
        };
        let lease_ms = config
            .lease_ms
            .map(|lease| i64::try_from(lease).unwrap_or(i64::MAX));
        Ok(Self {
            instance_id,
            instance_text: instance_id.to_string(),
            judge: Judge::new(own, config.liveness, config.processes, config.clock),
            lease_ms,
            _liveness_file: liveness_file,
            session,
        })
    }

    /// The liveness session, on PostgreSQL.
    pub fn session(&self) -> Option<&SessionLiveness> {
        self.session.as_ref()
    }

    /// Fails once this instance's liveness session was lost (never on SQLite): the check every
    /// request makes before it begins.
    ///
    /// # Errors
    /// [`Error::InstanceLost`].
    pub fn ensure_live(&self) -> Result<()> {
        self.session
            .as_ref()
            .map_or(Ok(()), SessionLiveness::ensure_live)
    }

    /// This instance's UUID.
    pub fn instance_id(&self) -> Uuid {
        self.instance_id
    }

    /// This process's identity, as stamped on lock rows.
    pub fn identity(&self) -> &ProcessIdentity {
        self.judge.own_identity()
    }

    /// The judge this instance uses.
    pub fn judge(&self) -> &Judge {
        &self.judge
    }

    fn now(&self) -> String {
        format_timestamp(self.judge.clock().now())
    }

    /// Tries to take `resource`: a free lock is taken at once; a lock whose holder is judged dead
    /// is taken over by compare-and-swap; otherwise the holder is returned. Runs on the caller's
    /// connection, so the caller's transaction decides whether it sticks.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a damaged lock row, [`Error::Storage`] for SQLite.
    pub fn try_acquire(&self, conn: &Connection, resource: &str) -> Result<Acquire> {
        self.try_acquire_within(conn, resource, TAKEOVER_RACES_MAX)
    }

    fn try_acquire_within(
        &self,
        conn: &Connection,
        resource: &str,
        races_left: u32,
    ) -> Result<Acquire> {
        self.ensure_live()?;
        let now = self.now();
        let new = self.new_holder(&now);
        if let Some(epoch) = row::claim_free(conn, resource, &new)? {
            return Ok(Acquire::Acquired {
                epoch,
                took_over: None,
            });
        }
        let Some(LockRow {
            epoch,
            holder: Some(holder),
            ..
        }) = row::read(conn, resource)?
        else {
            return Err(Error::Corrupt {
                resource: resource.to_owned(),
                reason: "the row is neither free nor held".to_owned(),
            });
        };
        let judgement = self.judge.judge(&holder);
        let Judgement::Dead(reason) = judgement else {
            return Ok(Acquire::Held {
                holder,
                epoch,
                judgement,
            });
        };
        fail::fail_point!("lock::between-judgement-and-takeover", |_| {
            std::process::abort()
        });
        match row::swap_holder(conn, resource, epoch, &new)? {
            Some(new_epoch) => Ok(Acquire::Acquired {
                epoch: new_epoch,
                took_over: Some(TakeOver {
                    from: holder,
                    from_epoch: epoch,
                    reason,
                }),
            }),
            // Another contender took it over between our read and our swap: look again, a
            // bounded number of times.
            None if races_left > 0 => self.try_acquire_within(conn, resource, races_left - 1),
            None => Err(Error::Contended {
                resource: resource.to_owned(),
            }),
        }
    }

    /// Takes `resource` over from the holder at `expected` epoch, by compare-and-swap. Returns
    /// the new epoch, or `None` when the epoch had already moved (another contender won).
    /// The caller must have judged the holder dead.
    ///
    /// # Errors
    /// [`Error::Storage`].
    pub fn take_over(
        &self,
        conn: &Connection,
        resource: &str,
        expected: Epoch,
    ) -> Result<Option<Epoch>> {
        self.ensure_live()?;
        let now = self.now();
        row::swap_holder(conn, resource, expected, &self.new_holder(&now))
    }

    /// Releases `resource` held at `epoch`.
    ///
    /// # Errors
    /// [`Error::LockLost`] when this instance no longer holds it at that epoch.
    pub fn release(&self, conn: &Connection, resource: &str, epoch: Epoch) -> Result<()> {
        let now = self.now();
        if row::clear_holder(conn, resource, &self.instance_text, epoch, &now)? {
            Ok(())
        } else {
            Err(Self::lost(conn, resource, epoch))
        }
    }

    /// Releases `resource` for a holder judged dead (the orphan sweep), if it is still at
    /// `epoch`. Returns whether it did.
    ///
    /// # Errors
    /// [`Error::Storage`].
    pub fn release_dead(
        &self,
        conn: &Connection,
        resource: &str,
        holder: &HolderRecord,
        epoch: Epoch,
    ) -> Result<bool> {
        let now = self.now();
        row::clear_holder(conn, resource, &holder.instance_id, epoch, &now)
    }

    /// The fence check: succeeds only while this instance holds `resource` at `epoch`. Every
    /// fenced write runs this in the same transaction, before writing. On PostgreSQL it locks
    /// the lock row `FOR SHARE` until the transaction ends, so a takeover's compare-and-swap
    /// waits for the write, and a write after the takeover sees the new epoch.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the epoch moved or the lock was released,
    /// [`Error::InstanceLost`] once the liveness session was lost.
    pub fn fence(&self, conn: &Connection, resource: &str, epoch: Epoch) -> Result<()> {
        self.ensure_live()?;
        if row::is_held_by(conn, resource, &self.instance_text, epoch)? {
            Ok(())
        } else {
            Err(Self::lost(conn, resource, epoch))
        }
    }

    /// Refreshes the heartbeat of a lease.
    ///
    /// # Errors
    /// [`Error::LockLost`] when this instance no longer holds `resource` at `epoch`.
    pub fn heartbeat(&self, conn: &Connection, resource: &str, epoch: Epoch) -> Result<()> {
        self.ensure_live()?;
        let now = self.now();
        if row::touch(conn, resource, &self.instance_text, epoch, &now)? {
            Ok(())
        } else {
            Err(Self::lost(conn, resource, epoch))
        }
    }

    /// Every held lock whose holder is judged dead, with the reason.
    ///
    /// # Errors
    /// [`Error::Corrupt`] or [`Error::Storage`].
    pub fn dead_holders(&self, conn: &Connection) -> Result<Vec<(LockRow, DeathReason)>> {
        self.judge.dead_holders(conn)
    }

    /// Removes the liveness files of dead instances that no held lock row names any more
    /// (files still named are the evidence of their holder's death, kept until the lock is
    /// reclaimed). The crash-orphan sweep calls this after reclaiming, so files do not pile up.
    /// On PostgreSQL there are no files: it removes nothing.
    ///
    /// # Errors
    /// [`Error::Corrupt`] or [`Error::Storage`] reading the lock rows, [`Error::LivenessDir`]
    /// when the directory cannot be listed.
    pub fn remove_dead_liveness_files(&self, conn: &Connection) -> Result<usize> {
        let Liveness::Files(dir) = self.judge.liveness() else {
            return Ok(0);
        };
        let still_named: HashSet<Uuid> = row::held_readable(conn)?
            .iter()
            .filter_map(|lock| lock.holder.as_ref())
            .filter_map(|holder| Uuid::parse_str(&holder.instance_id).ok())
            .collect();
        dir.remove_dead(&still_named)
    }

    fn lost(conn: &Connection, resource: &str, epoch: Epoch) -> Error {
        Error::LockLost {
            resource: resource.to_owned(),
            epoch,
            now: row::describe(conn, resource),
        }
    }

    fn new_holder<'a>(&'a self, now: &'a str) -> NewHolder<'a> {
        let own = self.judge.own_identity();
        NewHolder {
            instance_id: &self.instance_text,
            pid: own.pid,
            start_time: own.start_time,
            boot_id: &own.boot_id,
            pid_ns: own.pid_ns,
            hostname: &own.hostname,
            now,
            lease_ms: self.lease_ms,
        }
    }
}
