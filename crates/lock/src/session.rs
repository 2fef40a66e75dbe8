//! Liveness on PostgreSQL: each instance holds a session-level advisory lock, keyed by its
//! instance id, on a dedicated session for its whole life. The server frees the key when the
//! session ends (the process exits or is killed, its host dies, the network splits past the TCP
//! keepalives, `pg_terminate_backend`), so "is the key held" is the evidence every host sees
//! alike, where pids, boot ids and liveness files mean something on one host only.
//!
//! **Invariant:** no lock row names an instance whose key this process never held. A
//! [`SessionLiveness`] exists only once its key is held, and a [`crate::Locker`] built on one
//! stamps rows with that instance id only. Once the session is lost the instance is poisoned for
//! good: the key is never taken again, because another process may already have judged the
//! instance dead and taken its locks over.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use durably_db::{Connection, params};
use uuid::Uuid;

use crate::error::{Error, Result};

/// How many fresh instance ids [`SessionLiveness::hold`] tries when the key of each is held
/// already. A 64-bit key collides with a live instance's about never; a second collision in a
/// row means something else takes advisory locks in this database with the same keys.
pub const SESSION_KEY_ATTEMPTS_MAX: u32 = 3;

/// The context string of the key derivation: keys of other uses of blake3 never collide with
/// these by construction.
const KEY_CONTEXT: &str = "durably instance";

/// The advisory-lock key of `instance`: the first 64 bits of blake3's `derive_key("durably
/// instance", uuid bytes)`, so that every process, on every host, computes the same key.
pub fn session_key(instance: &Uuid) -> i64 {
    let derived = blake3::derive_key(KEY_CONTEXT, instance.as_bytes());
    let mut first = [0_u8; 8];
    first.copy_from_slice(&derived[..8]);
    i64::from_be_bytes(first)
}

/// The granted advisory locks on single 64-bit keys (`objsubid = 1`) in this database, as
/// `pg_locks` shows them: the key's high half in `classid`, its low half in `objid`.
const HELD_KEYS: &str = "SELECT CAST(classid AS BIGINT), CAST(objid AS BIGINT) FROM pg_locks
     WHERE locktype = 'advisory' AND granted AND objsubid = 1
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";

/// Whether one key is held: [`HELD_KEYS`] narrowed to the key's halves.
const KEY_HELD: &str = "SELECT count(*) FROM pg_locks
     WHERE locktype = 'advisory' AND granted AND objsubid = 1
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND CAST(classid AS BIGINT) = ?1 AND CAST(objid AS BIGINT) = ?2";

/// The key's halves as `pg_locks` shows them (both unsigned 32-bit).
fn halves(key: i64) -> (i64, i64) {
    let bits = key.cast_unsigned();
    (
        (bits >> 32).cast_signed(),
        (bits & 0xFFFF_FFFF).cast_signed(),
    )
}

fn joined(classid: i64, objid: i64) -> i64 {
    let high = classid.cast_unsigned() & 0xFFFF_FFFF;
    let low = objid.cast_unsigned() & 0xFFFF_FFFF;
    ((high << 32) | low).cast_signed()
}

/// What the session evidence says of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionProbe {
    /// Some session holds its key: the instance is alive.
    Held,
    /// No session holds its key: the instance's session has ended.
    Free,
    /// The question could not be asked (the liveness session failed): proves nothing.
    Unreadable(String),
}

/// This instance's liveness session: a dedicated PostgreSQL connection that holds the
/// instance's advisory key, and the flag that poisons the instance once the session is lost.
/// Clones share the session.
#[derive(Clone)]
pub struct SessionLiveness {
    shared: Arc<Shared>,
}

struct Shared {
    /// The instance whose key the session holds; the nil id for an observer, which holds none.
    instance: Uuid,
    key: i64,
    /// Whether the session holds `key`: false for an observer ([`SessionLiveness::observe`]).
    holds_key: bool,
    /// The session that holds the key; also where the judge asks `pg_locks`. One statement at a
    /// time: the ping and the judges take turns.
    conn: Mutex<Connection>,
    /// Set once, never cleared: a lost session's key may be another holder's evidence of death.
    lost: AtomicBool,
}

impl fmt::Debug for SessionLiveness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLiveness")
            .field("instance", &self.shared.instance)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl SessionLiveness {
    /// Takes the advisory key of a new instance id on `conn`, a session of its own that nothing
    /// else uses, before anything is written under that id. A key held already (a collision)
    /// makes it draw a new id, at most [`SESSION_KEY_ATTEMPTS_MAX`] times.
    ///
    /// # Errors
    /// [`Error::Storage`] when the server fails; [`Error::SessionKeyCollisions`] when every
    /// key tried was held.
    pub fn hold(conn: Connection) -> Result<Self> {
        Self::hold_with(conn, Uuid::new_v4)
    }

    /// [`Self::hold`] with the instance ids drawn from `ids` (tests force a collision).
    ///
    /// # Errors
    /// As [`Self::hold`].
    pub fn hold_with(conn: Connection, mut ids: impl FnMut() -> Uuid) -> Result<Self> {
        for _ in 0..SESSION_KEY_ATTEMPTS_MAX {
            let instance = ids();
            let key = session_key(&instance);
            let taken: bool =
                conn.query_row("SELECT pg_try_advisory_lock(?1)", params![key], |row| {
                    row.get(0)
                })?;
            if taken {
                return Ok(Self {
                    shared: Arc::new(Shared {
                        instance,
                        key,
                        holds_key: true,
                        conn: Mutex::new(conn),
                        lost: AtomicBool::new(false),
                    }),
                });
            }
            tracing::warn!(%instance, "the advisory key of a new instance id is held; drawing another id");
        }
        Err(Error::SessionKeyCollisions {
            attempts: SESSION_KEY_ATTEMPTS_MAX,
        })
    }

    /// A session that holds no key and only judges others (a program that reads a journal, such
    /// as an inspector): a [`crate::Locker`] refuses it, so it can never stamp a lock row.
    pub fn observe(conn: Connection) -> Self {
        Self {
            shared: Arc::new(Shared {
                instance: Uuid::nil(),
                key: session_key(&Uuid::nil()),
                holds_key: false,
                conn: Mutex::new(conn),
                lost: AtomicBool::new(false),
            }),
        }
    }

    /// Whether this session holds an instance's key (false for an observer).
    pub fn holds_key(&self) -> bool {
        self.shared.holds_key
    }

    /// The instance whose key this session holds (the nil id for an observer).
    pub fn instance_id(&self) -> Uuid {
        self.shared.instance
    }

    /// The advisory key this session holds.
    pub fn key(&self) -> i64 {
        self.shared.key
    }

    /// Whether the session was lost: from then on the instance writes nothing.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.load(Ordering::SeqCst)
    }

    /// Poisons the instance for good (a failed ping, a lost connection).
    pub fn mark_lost(&self) {
        if !self.shared.lost.swap(true, Ordering::SeqCst) {
            tracing::error!(
                instance = %self.shared.instance,
                "the liveness session is lost: this instance writes nothing more"
            );
        }
    }

    /// Fails with [`Error::InstanceLost`] once the session was lost.
    ///
    /// # Errors
    /// [`Error::InstanceLost`].
    pub fn ensure_live(&self) -> Result<()> {
        if self.is_lost() {
            return Err(Error::InstanceLost {
                instance: self.shared.instance,
            });
        }
        Ok(())
    }

    /// Checks that the session still holds this instance's key, and poisons the instance when
    /// it does not or cannot say. A lost instance stays lost.
    ///
    /// # Errors
    /// [`Error::InstanceLost`] when the session is (or was) lost.
    pub fn ping(&self) -> Result<()> {
        self.ensure_live()?;
        let (high, low) = halves(self.shared.key);
        let held = self.with_conn(|conn| {
            conn.query_row(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
                   AND objsubid = 1 AND pid = pg_backend_pid()
                   AND CAST(classid AS BIGINT) = ?1 AND CAST(objid AS BIGINT) = ?2",
                params![high, low],
                |row| row.get::<_, i64>(0),
            )
        });
        // Exactly one granted lock on the key, by this very session; anything else (none, an
        // error, a lost connection) means the key may be free for others to judge by.
        if matches!(held, Ok(1)) {
            return Ok(());
        }
        self.mark_lost();
        self.ensure_live()
    }

    /// Pings the session every `interval` on a thread of its own, which ends once the session
    /// is lost or every clone of this `SessionLiveness` is dropped (the session then closes,
    /// freeing the key).
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn keep_pinging(&self, interval: Duration) -> std::io::Result<()> {
        let shared = Arc::downgrade(&self.shared);
        thread::Builder::new()
            .name("durably-liveness".to_owned())
            .spawn(move || {
                loop {
                    thread::sleep(interval);
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    if (Self { shared }).ping().is_err() {
                        return;
                    }
                }
            })
            .map(drop)
    }

    /// Whether some session holds the key of `instance`.
    pub fn probe(&self, instance: &Uuid) -> SessionProbe {
        let (high, low) = halves(session_key(instance));
        match self.with_conn(|conn| {
            conn.query_row(KEY_HELD, params![high, low], |row| row.get::<_, i64>(0))
        }) {
            Ok(0) => SessionProbe::Free,
            Ok(_) => SessionProbe::Held,
            Err(error) => SessionProbe::Unreadable(error.to_string()),
        }
    }

    /// Every advisory key held in this database right now, read at once: what one sweep pass
    /// judges all holders by.
    ///
    /// # Errors
    /// [`Error::Storage`] when the liveness session fails.
    pub fn held_keys(&self) -> Result<HashSet<i64>> {
        self.with_conn(|conn| {
            let mut statement = conn.prepare_cached(HELD_KEYS)?;
            let rows = statement.query_map([], |row| {
                Ok(joined(row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
            })?;
            rows.collect::<durably_db::Result<HashSet<i64>>>()
        })
        .map_err(Error::from)
    }

    fn with_conn<T>(
        &self,
        work: impl FnOnce(&Connection) -> durably_db::Result<T>,
    ) -> durably_db::Result<T> {
        let conn = self
            .shared
            .conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        work(&conn)
    }
}

/// Held keys read once, for one sweep pass; or the error that reading them met, which makes
/// every holder unknown (alive).
#[derive(Debug, Clone)]
pub(crate) struct HeldKeys(Arc<std::result::Result<HashSet<i64>, String>>);

impl HeldKeys {
    pub(crate) fn load(session: &SessionLiveness) -> Self {
        Self(Arc::new(
            session.held_keys().map_err(|error| error.to_string()),
        ))
    }

    pub(crate) fn probe(&self, instance: &Uuid) -> SessionProbe {
        match &*self.0 {
            Ok(keys) if keys.contains(&session_key(instance)) => SessionProbe::Held,
            Ok(_) => SessionProbe::Free,
            Err(error) => SessionProbe::Unreadable(error.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_splits_into_the_halves_pg_locks_shows_and_back() {
        for key in [0, 1, -1, i64::MIN, i64::MAX, 0x1234_5678_9abc_def0] {
            let (high, low) = halves(key);
            assert!((0..=i64::from(u32::MAX)).contains(&high), "{key}");
            assert!((0..=i64::from(u32::MAX)).contains(&low), "{key}");
            assert_eq!(joined(high, low), key);
        }
    }

    #[test]
    fn the_key_is_a_pure_function_of_the_instance() {
        let instance = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(session_key(&instance), session_key(&instance));
        assert_ne!(session_key(&instance), session_key(&Uuid::nil()));
        let derived = blake3::derive_key("durably instance", instance.as_bytes());
        assert_eq!(
            session_key(&instance).to_be_bytes(),
            derived[..8],
            "the first 64 bits, big-endian"
        );
    }
}
