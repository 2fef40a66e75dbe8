//! Judging whether a lock holder is alive, weighing its liveness file against the process tests
//! so that neither can overturn the other into a death. Staleness alone never proves death: only
//! an opt-in lease that the holder itself asked for can be forfeited by time.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use durably_db::Connection;
use uuid::Uuid;

use crate::clock::{Clock, parse_timestamp};
use crate::error::Result;
use crate::identity::{ProcessIdentity, ProcessTable};
use crate::liveness::{LivenessDir, Probe};
use crate::row::{self, HolderRecord, LockRow};
use crate::session::{HeldKeys, SessionLiveness, SessionProbe};

/// Why a holder is known to be dead.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeathReason {
    /// Its liveness file was not locked by anyone: the instance has exited.
    LivenessFileUnlocked,
    /// It was recorded under another boot of this host.
    BootIdChanged {
        /// The holder's boot id.
        holder: String,
    },
    /// Its pid does not exist in our (shared) pid namespace.
    NoSuchProcess {
        /// The recorded pid.
        pid: i64,
    },
    /// Its pid exists but belongs to a later process: the pid was reused.
    PidReused {
        /// The recorded pid.
        pid: i64,
        /// The recorded start time.
        recorded_start: i64,
        /// The start time of the process that has the pid now.
        current_start: i64,
    },
    /// Its process has exited and waits to be reaped.
    Zombie {
        /// The recorded pid.
        pid: i64,
    },
    /// No PostgreSQL session holds its advisory key: its liveness session has ended (the
    /// process exited or was killed, its host or network failed past the TCP keepalives, or
    /// its session was terminated).
    SessionEnded,
    /// It opted into a lease and did not heartbeat in time; it forfeits the lock even if alive.
    LeaseExpired {
        /// The last heartbeat.
        heartbeat_at: String,
        /// The lease length.
        lease_ms: i64,
    },
}

impl fmt::Display for DeathReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LivenessFileUnlocked => write!(f, "its liveness file is no longer locked"),
            Self::BootIdChanged { holder } => {
                write!(
                    f,
                    "it ran under boot {holder}, and this host has rebooted since"
                )
            }
            Self::NoSuchProcess { pid } => write!(f, "pid {pid} no longer exists"),
            Self::PidReused {
                pid,
                recorded_start,
                current_start,
            } => write!(
                f,
                "pid {pid} was reused (recorded start time {recorded_start}, now {current_start})"
            ),
            Self::Zombie { pid } => write!(f, "pid {pid} has exited (zombie)"),
            Self::SessionEnded => write!(f, "its liveness session has ended"),
            Self::LeaseExpired {
                heartbeat_at,
                lease_ms,
            } => write!(
                f,
                "its {lease_ms} ms lease expired (last heartbeat {heartbeat_at})"
            ),
        }
    }
}

/// The verdict on one holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// The holder is alive, with the evidence.
    Alive(String),
    /// The holder is dead, with the reason; its lock may be taken over.
    Dead(DeathReason),
    /// The holder cannot be judged (another host or pid namespace, a damaged record). It counts
    /// as alive: its lock is never taken over.
    Unknown(String),
}

impl Judgement {
    /// Whether the holder's lock may be taken over.
    pub fn is_dead(&self) -> bool {
        matches!(self, Self::Dead(_))
    }
}

impl fmt::Display for Judgement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Alive(reason) => write!(f, "alive: {reason}"),
            Self::Dead(reason) => write!(f, "dead: {reason}"),
            Self::Unknown(reason) => write!(f, "cannot be judged, counted alive: {reason}"),
        }
    }
}

/// Where the evidence of a holder's life comes from.
#[derive(Debug, Clone)]
pub enum Liveness {
    /// SQLite: liveness files beside the database, weighed with the process tests.
    Files(LivenessDir),
    /// PostgreSQL: the holder's advisory key in `pg_locks`, asked through this instance's own
    /// liveness session. Pids, start times and boot ids are stamped but never judged.
    Session(SessionLiveness),
}

impl From<LivenessDir> for Liveness {
    fn from(dir: LivenessDir) -> Self {
        Self::Files(dir)
    }
}

impl From<SessionLiveness> for Liveness {
    fn from(session: SessionLiveness) -> Self {
        Self::Session(session)
    }
}

/// The session evidence a judge reads: asked per holder, or read once for a sweep pass.
#[derive(Debug, Clone)]
enum SessionEvidence {
    Live,
    Pass(HeldKeys),
}

/// Judges lock holders from this process's point of view.
#[derive(Debug, Clone)]
pub struct Judge {
    own: ProcessIdentity,
    liveness: Liveness,
    session_evidence: SessionEvidence,
    processes: Arc<dyn ProcessTable>,
    clock: Arc<dyn Clock>,
}

impl Judge {
    /// A judge that sees the world as `own` sees it.
    ///
    /// A judge never creates or writes anything: its probes open liveness files read-only and
    /// never create the liveness directory. So a program that only reads a journal judges
    /// holders with a judge of its own (`own` from [`ProcessTable::own_identity`],
    /// [`LivenessDir::beside`] the journal) and no [`crate::Locker`], which would create the
    /// directory and a liveness file.
    pub fn new(
        own: ProcessIdentity,
        liveness: impl Into<Liveness>,
        processes: Arc<dyn ProcessTable>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            own,
            liveness: liveness.into(),
            session_evidence: SessionEvidence::Live,
            processes,
            clock,
        }
    }

    /// Judges `holder`. The liveness file and the process tests are weighed together: where
    /// the process tests apply (same boot, same pid namespace, a readable `/proc`) they decide,
    /// and a free file against a pid that runs with its recorded start time makes the holder
    /// unknown; elsewhere the file decides. An expired opt-in lease then overrides "alive" and "unknown", because the
    /// holder promised to heartbeat and fencing keeps a late holder out of the journal.
    pub fn judge(&self, holder: &HolderRecord) -> Judgement {
        let verdict = self.judge_evidence(holder);
        if verdict.is_dead() {
            return verdict;
        }
        match self.lease_expiry(holder) {
            Some(reason) => Judgement::Dead(reason),
            None => verdict,
        }
    }

    /// Judges `holder` on the evidence alone (its liveness file and the process tests, or on
    /// PostgreSQL its advisory key), without
    /// its lease: whether the holder's process may still be running, and so may still act
    /// outside the journal, whatever [`Judge::judge`] says of its lock. A holder whose lease
    /// expired is dead to the lock but, if this says anything short of dead, not to the world.
    pub fn judge_evidence(&self, holder: &HolderRecord) -> Judgement {
        let Ok(instance_id) = Uuid::parse_str(&holder.instance_id) else {
            return Judgement::Unknown(format!(
                "instance id {:?} is not a UUID",
                holder.instance_id
            ));
        };
        match &self.liveness {
            Liveness::Files(dir) => weigh(dir.probe(&instance_id), self.judge_process(holder)),
            Liveness::Session(session) => {
                let probe = match &self.session_evidence {
                    SessionEvidence::Live => session.probe(&instance_id),
                    SessionEvidence::Pass(keys) => keys.probe(&instance_id),
                };
                judge_session(probe)
            }
        }
    }

    /// A judge for one pass over many holders: on PostgreSQL it reads every held key once,
    /// now, and judges by that snapshot (a takeover still judges again, live, under its row
    /// locks); on SQLite it is this judge.
    #[must_use]
    pub fn pass(&self) -> Self {
        let mut pass = self.clone();
        if let Liveness::Session(session) = &self.liveness {
            pass.session_evidence = SessionEvidence::Pass(HeldKeys::load(session));
        }
        pass
    }

    /// The verdict of the process tests alone: boot, pid namespace, pid and start time.
    fn judge_process(&self, holder: &HolderRecord) -> Judgement {
        if Uuid::parse_str(&holder.boot_id).is_err() {
            return Judgement::Unknown(format!("boot id {:?} is not a UUID", holder.boot_id));
        }
        if holder.boot_id != self.own.boot_id {
            if holder.hostname != self.own.hostname {
                return Judgement::Unknown(format!(
                    "it runs on another host ({:?}) or a renamed one; other hosts are not judged",
                    holder.hostname
                ));
            }
            return Judgement::Dead(DeathReason::BootIdChanged {
                holder: holder.boot_id.clone(),
            });
        }
        if holder.pid_ns != self.own.pid_ns {
            return Judgement::Unknown(format!(
                "it runs in another pid namespace ({}), whose pids mean nothing here",
                holder.pid_ns
            ));
        }
        self.judge_pid(holder)
    }

    fn judge_pid(&self, holder: &HolderRecord) -> Judgement {
        let pid = holder.pid;
        if pid <= 0 || pid > i64::from(i32::MAX) {
            return Judgement::Unknown(format!("pid {pid} is not a valid pid"));
        }
        match self.processes.stat(pid) {
            Ok(None) => Judgement::Dead(DeathReason::NoSuchProcess { pid }),
            Ok(Some(stat)) if stat.start_time != holder.start_time => {
                Judgement::Dead(DeathReason::PidReused {
                    pid,
                    recorded_start: holder.start_time,
                    current_start: stat.start_time,
                })
            }
            Ok(Some(stat)) if stat.has_exited() => Judgement::Dead(DeathReason::Zombie { pid }),
            Ok(Some(_)) => Judgement::Alive(format!("pid {pid} runs with the recorded start time")),
            Err(error) => Judgement::Unknown(format!("cannot read pid {pid}: {error}")),
        }
    }

    /// Every held lock whose holder is judged dead, with the reason. A lock row that does not
    /// read as a lock is skipped with a warning, and so never judged dead.
    ///
    /// # Errors
    /// [`crate::Error::Corrupt`] or [`crate::Error::Storage`].
    pub fn dead_holders(&self, conn: &Connection) -> Result<Vec<(LockRow, DeathReason)>> {
        let judge = self.pass();
        let mut dead = Vec::new();
        for lock in row::held_readable(conn)? {
            if let Some(holder) = &lock.holder
                && let Judgement::Dead(reason) = judge.judge(holder)
            {
                dead.push((lock, reason));
            }
        }
        Ok(dead)
    }

    fn lease_expiry(&self, holder: &HolderRecord) -> Option<DeathReason> {
        let lease_ms = holder.lease_ms.filter(|lease| *lease > 0)?;
        let heartbeat = parse_timestamp(&holder.heartbeat_at)?;
        let deadline = heartbeat.checked_add_signed(chrono::Duration::milliseconds(lease_ms))?;
        (self.now() > deadline).then(|| DeathReason::LeaseExpired {
            heartbeat_at: holder.heartbeat_at.clone(),
            lease_ms,
        })
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// This process's identity, as the judge uses it.
    pub fn own_identity(&self) -> &ProcessIdentity {
        &self.own
    }

    /// Where the judge's evidence of life comes from.
    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// The clock the judge reads lease deadlines from.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

/// The verdict of the session evidence: the key is the whole evidence on PostgreSQL, where a
/// holder may run on any host.
fn judge_session(probe: SessionProbe) -> Judgement {
    match probe {
        SessionProbe::Held => Judgement::Alive("a session holds its advisory key".to_owned()),
        SessionProbe::Free => Judgement::Dead(DeathReason::SessionEnded),
        SessionProbe::Unreadable(error) => {
            Judgement::Unknown(format!("cannot read the held advisory keys: {error}"))
        }
    }
}

/// Weighs the liveness file against the process tests. Neither kind of evidence can overturn
/// the other into a death:
///
/// - The process tests are conclusive where they apply (same boot, same pid namespace, a
///   readable `/proc`): a pid that is gone or reused, or a host that rebooted, is dead even if
///   someone holds its liveness file locked (a bare-`fork` child, or anyone else who opened
///   it). And a pid that runs with the recorded start time is never dead because of a free
///   file: that contradiction makes the holder unknown, which counts as alive. A zombie state
///   is the one process verdict a locked file contradicts: it is also how a process looks
///   whose main thread exited while its other threads (and its descriptors) live on.
/// - Where the process tests cannot decide (another pid namespace or host, an unreadable
///   `/proc` entry), the file decides: locked is alive, free is dead.
///
/// So a free file can kill only a holder whose pid cannot be checked, and a locked file can
/// save only such a holder; in both cases the file sits in a directory that only the journal's
/// owner (or root) can write to.
fn weigh(file: Probe, process: Judgement) -> Judgement {
    match (file, process) {
        // Both agree, or the file is the only evidence there is.
        (Probe::Free, Judgement::Dead(_) | Judgement::Unknown(_)) => {
            Judgement::Dead(DeathReason::LivenessFileUnlocked)
        }
        // A process whose main thread exited while its other threads run shows as a zombie,
        // and it still holds its file; a real zombie has closed every descriptor.
        (Probe::Held, Judgement::Dead(DeathReason::Zombie { pid })) => Judgement::Unknown(format!(
            "pid {pid} shows as a zombie, yet its liveness file is locked (as when the main \
                 thread exited and other threads run on); contradicting evidence proves nothing"
        )),
        // Conclusive process tests: whoever holds the file, it is not the recorded process.
        (_, dead @ Judgement::Dead(_)) => dead,
        (Probe::Free, Judgement::Alive(why)) => Judgement::Unknown(format!(
            "its liveness file is free, yet {why}; contradicting evidence proves nothing"
        )),
        (Probe::Held, Judgement::Alive(_) | Judgement::Unknown(_)) => {
            Judgement::Alive("its liveness file is locked".to_owned())
        }
        (Probe::Missing, Judgement::Unknown(why)) => {
            Judgement::Unknown(format!("{why}; it has no liveness file here"))
        }
        (Probe::Untrusted(file), Judgement::Unknown(why)) => {
            Judgement::Unknown(format!("{why}; {file}, which proves nothing"))
        }
        (Probe::Unreadable(error), Judgement::Unknown(why)) => Judgement::Unknown(format!(
            "{why}; its liveness file cannot be probed ({error})"
        )),
        (Probe::Missing | Probe::Untrusted(_) | Probe::Unreadable(_), alive) => alive,
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use super::*;
    use crate::clock::SystemClock;
    use crate::identity::ProcFs;

    /// A judge of this process with the real `/proc`, probing `dir`; with its identity and
    /// directory.
    fn setup(dir: &std::path::Path) -> (Judge, ProcessIdentity, LivenessDir) {
        let liveness = LivenessDir::at(dir);
        let own = ProcFs::default().own_identity().unwrap();
        let judge = Judge::new(
            own.clone(),
            liveness.clone(),
            Arc::new(ProcFs::default()),
            Arc::new(SystemClock),
        );
        (judge, own, liveness)
    }

    fn record(instance_id: &Uuid, holder: &ProcessIdentity) -> HolderRecord {
        HolderRecord {
            instance_id: instance_id.to_string(),
            pid: holder.pid,
            start_time: holder.start_time,
            boot_id: holder.boot_id.clone(),
            pid_ns: holder.pid_ns,
            hostname: holder.hostname.clone(),
            acquired_at: "2026-01-01T00:00:00.000Z".to_owned(),
            heartbeat_at: "2026-01-01T00:00:00.000Z".to_owned(),
            lease_ms: None,
        }
    }

    /// A free, regular liveness file for `instance_id`, as a forger would leave one.
    fn free_file(liveness: &LivenessDir, instance_id: &Uuid) -> File {
        File::create(liveness.path().join(format!("{instance_id}.live"))).unwrap()
    }

    #[test]
    fn a_free_file_cannot_kill_a_pid_that_runs_with_its_start_time() {
        let dir = tempfile::tempdir().unwrap();
        let (judge, own, liveness) = setup(dir.path());
        let instance = Uuid::new_v4();
        drop(free_file(&liveness, &instance));
        let verdict = judge.judge(&record(&instance, &own));
        let Judgement::Unknown(why) = &verdict else {
            panic!("a running pid with its recorded start time was judged {verdict}");
        };
        assert!(why.contains("contradicting evidence"), "{why}");
    }

    #[test]
    fn a_locked_file_cannot_keep_a_dead_pid_alive() {
        let dir = tempfile::tempdir().unwrap();
        let (judge, own, liveness) = setup(dir.path());
        let instance = Uuid::new_v4();
        // Someone other than the holder keeps its liveness file locked.
        let intruder = free_file(&liveness, &instance);
        intruder.lock().unwrap();
        let mut reused = own.clone();
        reused.start_time += 1;
        let mut other_boot = own.clone();
        other_boot.boot_id = Uuid::new_v4().to_string();
        for holder in [reused, other_boot] {
            let verdict = judge.judge(&record(&instance, &holder));
            assert!(
                matches!(
                    verdict,
                    Judgement::Dead(
                        DeathReason::PidReused { .. } | DeathReason::BootIdChanged { .. }
                    )
                ),
                "{verdict}"
            );
        }
    }

    /// Every pid is a zombie with the recorded start time.
    #[derive(Debug)]
    struct Zombies(ProcessIdentity);

    impl ProcessTable for Zombies {
        fn own_identity(&self) -> crate::Result<ProcessIdentity> {
            Ok(self.0.clone())
        }

        fn stat(&self, _pid: i64) -> crate::Result<Option<crate::ProcessStat>> {
            Ok(Some(crate::ProcessStat {
                start_time: self.0.start_time,
                state: 'Z',
            }))
        }
    }

    #[test]
    fn a_zombie_with_a_locked_file_is_unknown_and_without_one_dead() {
        let dir = tempfile::tempdir().unwrap();
        let (_, own, liveness) = setup(dir.path());
        let judge = Judge::new(
            own.clone(),
            liveness.clone(),
            Arc::new(Zombies(own.clone())),
            Arc::new(SystemClock),
        );
        let instance = Uuid::new_v4();
        let pid = own.pid;
        assert_eq!(
            judge.judge(&record(&instance, &own)),
            Judgement::Dead(DeathReason::Zombie { pid })
        );
        let file = free_file(&liveness, &instance);
        file.lock().unwrap();
        let verdict = judge.judge(&record(&instance, &own));
        assert!(
            matches!(&verdict, Judgement::Unknown(why) if why.contains("zombie")),
            "{verdict}"
        );
        drop(file);
        assert_eq!(
            judge.judge(&record(&instance, &own)),
            Judgement::Dead(DeathReason::LivenessFileUnlocked)
        );
    }

    #[test]
    fn where_pids_mean_nothing_the_file_decides() {
        let dir = tempfile::tempdir().unwrap();
        let (judge, own, liveness) = setup(dir.path());
        let mut elsewhere = own.clone();
        elsewhere.pid_ns += 1;
        let instance = Uuid::new_v4();
        let verdict = judge.judge(&record(&instance, &elsewhere));
        assert!(
            matches!(&verdict, Judgement::Unknown(why) if why.contains("no liveness file")),
            "{verdict}"
        );
        let file = free_file(&liveness, &instance);
        file.lock().unwrap();
        assert!(matches!(
            judge.judge(&record(&instance, &elsewhere)),
            Judgement::Alive(_)
        ));
        drop(file);
        assert_eq!(
            judge.judge(&record(&instance, &elsewhere)),
            Judgement::Dead(DeathReason::LivenessFileUnlocked)
        );
    }
}
