//! The watcher: one thread per client that polls the change probe
//! ([`crate::store::data_version`]) and tells waiters when another connection committed, so a
//! handle awaiting a result started in another process wakes within one poll, without a
//! table scan.

use std::path::Path;
use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::store;

/// How often the watcher reads `data_version`: the longest a waiter sleeps through a commit.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Starts a watcher on the journal at `path`. The returned channel's value changes after every
/// commit of another connection; waiters subscribe to it and re-read what they wait for when
/// it does. Changes the process makes itself may also be announced through its sender at
/// once. The thread ends at its next poll after every receiver is dropped.
pub(crate) fn start(path: &Path) -> Result<(watch::Sender<u64>, watch::Receiver<u64>)> {
    let conn = store::open_change_probe(path)?;
    let mut seen = store::data_version(&conn)?;
    let (changes, receiver) = watch::channel(0_u64);
    let announcer = changes.clone();
    std::thread::Builder::new()
        .name("durably-runtime-watcher".to_owned())
        .spawn(move || {
            while !changes.is_closed() {
                std::thread::sleep(POLL_INTERVAL);
                match store::data_version(&conn) {
                    Ok(version) if version == seen => continue,
                    Ok(version) => seen = version,
                    // Waiters are woken anyway: they re-read through the journal, which
                    // reports the condition to each of them.
                    Err(error) => {
                        tracing::warn!(%error, "runtime watcher cannot read data_version");
                    }
                }
                changes.send_modify(|count| *count = count.wrapping_add(1));
            }
        })
        .map_err(Error::Watcher)?;
    Ok((announcer, receiver))
}

/// The error of a wait whose watcher thread has ended.
pub(crate) fn ended() -> Error {
    Error::Watcher(std::io::Error::other("the watcher thread ended"))
}
