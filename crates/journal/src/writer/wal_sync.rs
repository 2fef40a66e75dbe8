//! The syncer: makes committed batches durable off the writer thread, so that the fsync of one
//! batch overlaps the statements of the next (pipelined group commit).
//!
//! With [`Durability::Full`](crate::Durability::Full) the write connection commits with
//! `synchronous=NORMAL`: COMMIT appends the batch's frames to the WAL with `write()` and returns
//! without an fsync. The writer hands the committed batch here and starts the next one; this
//! thread fsyncs the WAL file and only then acknowledges. One fsync covers every batch committed
//! before it began, so batches that queue up while the disk is busy share it.
//!
//! Invariant: a request is acknowledged only after an fsync of the WAL that began after its
//! batch's COMMIT had returned. SQLite appends frames in commit order and recovery keeps a
//! prefix of them, so a durable commit implies every earlier commit is durable too. SQLite
//! still syncs what `synchronous=NORMAL` syncs: a restarted WAL's header, and both files around a
//! checkpoint, so the file is never corrupted by the unsynced tail.
//!
//! What changes against `synchronous=FULL`: another connection may read a batch up to one fsync
//! before it is durable. Nothing the engine acknowledges depends on such a read, and a power loss
//! in that window loses the batch as if it had never committed.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::thread::JoinHandle;

use super::{BATCH_REQUESTS_MAX, Counters, Job, fail_all};
use crate::error::Error;
use crate::telemetry;

/// What makes the WAL durable: an fsync of its file in production, a stand-in in tests.
pub(crate) trait WalSync: Send + Sync {
    /// Blocks until every frame written to the WAL so far is on stable storage.
    ///
    /// # Errors
    /// The I/O error of the fsync; nothing written since the last success is known durable.
    fn sync(&self) -> std::io::Result<()>;
}

impl WalSync for std::fs::File {
    fn sync(&self) -> std::io::Result<()> {
        // The WAL only grows between checkpoints, and `fdatasync` also writes the size when
        // that is needed to read the data back.
        self.sync_data()
    }
}

/// A committed batch waiting for its fsync.
type Committed = Vec<Box<dyn Job>>;

/// The WAL and what its syncs have come to, shared by the writer and the syncer thread.
struct Shared {
    wal: Box<dyn WalSync>,
    counters: Arc<Counters>,
    /// Held for each fsync and the verdict on it. Linux reports a failed write-back to the
    /// next fsync of the file description and not again, so two fsyncs at once could see one
    /// fail and the other succeed for the same lost pages; one at a time, the failure is
    /// recorded before any later fsync can succeed.
    syncing: Mutex<()>,
    /// Set by the first failed fsync, never cleared.
    failure: OnceLock<String>,
}

impl Shared {
    /// Syncs the WAL (unless an earlier sync failed) while `syncing` is held, then
    /// acknowledges `batches`, or fails them when the WAL is not known durable. The batches
    /// are left empty, with their capacity.
    fn sync_and_acknowledge(&self, syncing: MutexGuard<'_, ()>, batches: &mut [Committed]) {
        let verdict = match self.failure.get() {
            Some(reason) => Err(reason.clone()),
            None => match self.timed_sync() {
                Ok(()) => {
                    self.counters.syncs.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
                Err(error) => {
                    let reason = format!(
                        "the WAL could not be synced to disk ({error}); this journal refuses \
                         further writes: restart the program to reopen it"
                    );
                    let _ = self.failure.set(reason.clone());
                    Err(reason)
                }
            },
        };
        drop(syncing);
        match verdict {
            Ok(()) => {
                for batch in batches {
                    batch.drain(..).for_each(|job| job.finish(None));
                }
            }
            Err(reason) => {
                let error = Error::CommitFailed { reason };
                for batch in batches {
                    fail_all(batch, &error, &self.counters);
                }
            }
        }
    }

    /// One fsync of the WAL, timed for [`telemetry::METRIC_FSYNC_SECONDS`].
    fn timed_sync(&self) -> std::io::Result<()> {
        let began = std::time::Instant::now();
        let synced = self.wal.sync();
        telemetry::fsynced(began.elapsed());
        synced
    }

    /// Waits for any fsync under way, then holds the right to the next one.
    fn wait_to_sync(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data, so a panic while it was held leaves nothing to repair.
        self.syncing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The right to the next fsync, unless one is under way.
    fn try_to_sync(&self) -> Option<MutexGuard<'_, ()>> {
        match self.syncing.try_lock() {
            Ok(syncing) => Some(syncing),
            // As in `wait_to_sync`: nothing to repair.
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// The handle the writer thread holds on the syncer thread. Dropping it acknowledges (or fails)
/// everything handed over, then waits for the thread to end.
pub(super) struct Syncer {
    shared: Arc<Shared>,
    sender: Option<mpsc::Sender<Committed>>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Starts the syncer thread on `wal`.
    pub(super) fn start(wal: Box<dyn WalSync>, counters: Arc<Counters>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            wal,
            counters,
            syncing: Mutex::new(()),
            failure: OnceLock::new(),
        });
        let (sender, receiver) = mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("durably-syncer".to_owned())
            .spawn(move || run(&thread_shared, &receiver))?;
        Ok(Self {
            shared,
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    /// Has a committed batch acknowledged once durable, and leaves `batch` empty for the next.
    ///
    /// With `more_queued`, the writer has a next batch to run, and the syncer thread syncs
    /// while it does. Without, the writer has nothing else to do and syncs on its own thread:
    /// waking the syncer costs a lone caller tens of microseconds on a virtual machine, where
    /// an idle CPU must be woken first. If the syncer thread is in an fsync at that moment, the
    /// batch goes to it all the same: its next fsync, right after, covers the batch, and the
    /// writer is free for the next request meanwhile.
    pub(super) fn acknowledge(&self, batch: &mut Committed, more_queued: bool) {
        if !more_queued && let Some(syncing) = self.shared.try_to_sync() {
            return self
                .shared
                .sync_and_acknowledge(syncing, std::slice::from_mut(batch));
        }
        let Some(sender) = &self.sender else {
            return;
        };
        let handed = std::mem::replace(batch, Vec::with_capacity(BATCH_REQUESTS_MAX));
        if let Err(mpsc::SendError(mut handed)) = sender.send(handed) {
            // The thread is gone (a request's drop panicked in it): sync here instead.
            self.shared.sync_and_acknowledge(
                self.shared.wait_to_sync(),
                std::slice::from_mut(&mut handed),
            );
        }
    }

    /// The syncer thread's id, while it runs.
    pub(super) fn thread_id(&self) -> Option<std::thread::ThreadId> {
        self.thread.as_ref().map(|thread| thread.thread().id())
    }

    /// Why the writer must refuse new batches: a failed fsync leaves every later commit's
    /// durability unknown (the kernel may have dropped the dirty pages and will not say so
    /// again), so the journal stops writing until it is reopened.
    pub(super) fn refusal(&self) -> Option<Error> {
        self.shared.failure.get().map(|reason| Error::CommitFailed {
            reason: reason.clone(),
        })
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(shared: &Shared, receiver: &mpsc::Receiver<Committed>) {
    while let Ok(first) = receiver.recv() {
        let syncing = shared.wait_to_sync();
        // Taken after the wait, so the fsync covers every batch committed until it begins.
        let mut batches: Vec<Committed> =
            std::iter::once(first).chain(receiver.try_iter()).collect();
        shared.sync_and_acknowledge(syncing, &mut batches);
    }
}
