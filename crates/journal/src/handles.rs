//! The executions this journal has a live handle for.
//!
//! A lock row held by this journal's own instance, for an execution that has no live handle
//! here, can only be a leak: a handle dropped before its release committed (the release batch
//! failed), or an open whose caller stopped waiting after it committed. Without this registry
//! such a lock would look alive (this process's liveness file is locked) until the process
//! exits, and the execution could not be reopened. With it, the next open or operator action
//! in this process takes the leaked lock back.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use uuid::Uuid;

/// The set of executions with a live handle (or an open in flight) in this journal.
#[derive(Debug, Default)]
pub(crate) struct OpenHandles(Mutex<HashSet<Uuid>>);

impl OpenHandles {
    /// Whether `id` has a live handle here.
    pub(crate) fn contains(&self, id: Uuid) -> bool {
        self.set().contains(&id)
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<Uuid>> {
        // The set stays consistent even if a holder panicked: each operation is one insert or
        // one remove.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A claim on one execution id in [`OpenHandles`], released when dropped.
#[derive(Debug)]
pub(crate) struct HandleClaim {
    handles: Arc<OpenHandles>,
    id: Uuid,
}

impl HandleClaim {
    /// Claims `id`; `None` when a live handle (or another open) of this journal has it.
    pub(crate) fn claim(handles: &Arc<OpenHandles>, id: Uuid) -> Option<Self> {
        handles.set().insert(id).then(|| Self {
            handles: Arc::clone(handles),
            id,
        })
    }
}

impl Drop for HandleClaim {
    fn drop(&mut self) {
        self.handles.set().remove(&self.id);
    }
}
