//! The private tokio runtime every PostgreSQL connection of the process runs on.
//!
//! Callers are sync code on any thread: a plain thread, or a thread of the caller's own tokio
//! runtime (often `current_thread`). The driver's socket tasks therefore never run on the
//! caller's runtime, which may not be polled while the caller waits; they run here, on one worker
//! thread, and callers wait with `futures_executor::block_on`, which is legal on any thread
//! (tokio's own `block_on` panics inside a runtime).
//!
//! Invariant: nothing that waits with `block_on` runs on this runtime's thread; only the
//! driver's futures do, so waiting can never starve the thread that makes progress.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Builder, Runtime};

use super::error::{PgError, PgErrorKind};

/// Worker threads of the runtime: the driver's tasks only move bytes between sockets and
/// channels, which one thread does for every connection of the process.
const WORKER_THREADS: usize = 1;

/// The runtime, built on first use; the error text if it could not be built.
static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

fn runtime() -> Result<&'static Runtime, PgError> {
    RUNTIME
        .get_or_init(|| {
            Builder::new_multi_thread()
                .worker_threads(WORKER_THREADS)
                .thread_name("durably-postgres")
                .enable_all()
                .build()
                .map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(|message| PgError::new(PgErrorKind::Runtime, message.clone(), None))
}

/// Runs `future` on the private runtime and waits for its output on the calling thread.
///
/// # Errors
///
/// `Runtime` when the runtime cannot be built, or the task panicked or was cancelled.
pub(super) fn run<F>(future: F) -> Result<F::Output, PgError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handle = runtime()?.spawn(future);
    futures_executor::block_on(handle)
        .map_err(|error| PgError::new(PgErrorKind::Runtime, error.to_string(), None))
}
