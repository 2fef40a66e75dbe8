//! The watcher: one thread per client that relays the journal's change feed
//! ([`durably_journal::Journal::changes`]) to the client's waiters, so a handle awaiting a
//! result started in another process (or on another host) wakes when that process commits,
//! without a table scan. The client announces its own commits on the same channel at once
//! ([`crate::Client`]'s `announce_change`).

use tokio::sync::watch;

use crate::error::{Error, Result};

/// Starts a watcher relaying `journal`'s change feed. The returned channel's value changes
/// after every change the feed reports; waiters subscribe to it and re-read what they wait for
/// when it does. Changes the process makes itself may also be announced through its sender at
/// once. The thread ends once every receiver is dropped.
pub(crate) fn start(
    journal: &durably_journal::Journal,
) -> Result<(watch::Sender<u64>, watch::Receiver<u64>)> {
    let mut feed = journal.changes()?;
    let (changes, receiver) = watch::channel(0_u64);
    let announcer = changes.clone();
    let relay = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(Error::Watcher)?;
    std::thread::Builder::new()
        .name("durably-runtime-watcher".to_owned())
        .spawn(move || {
            relay.block_on(async move {
                loop {
                    tokio::select! {
                        () = changes.closed() => return,
                        changed = feed.changed() => {
                            // The feed ends only with its journal, which the client holds.
                            if changed.is_err() {
                                return;
                            }
                            changes.send_modify(|count| *count = count.wrapping_add(1));
                        }
                    }
                }
            });
        })
        .map_err(Error::Watcher)?;
    Ok((announcer, receiver))
}

/// The error of a wait whose watcher thread has ended.
pub(crate) fn ended() -> Error {
    Error::Watcher(std::io::Error::other("the watcher thread ended"))
}
