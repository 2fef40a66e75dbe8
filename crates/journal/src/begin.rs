//! The deferred open ([`Journal::begin_execution`]): a handle on a new execution that writes
//! nothing until its first write, which inserts the row and takes the lock in the same
//! transaction as the write's own rows (see `execution/deferred.rs`).

use std::sync::Arc;

use durably_db::Connection;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::execution::{DeferredOpen, Execution, Fence, OpenHook, Opening};
use crate::handles::HandleClaim;
use crate::journal::Journal;
use crate::payload::Payload;
use crate::records::ExecutionRecord;
use crate::replay::Replay;

/// What [`Journal::begin_execution`] found.
#[derive(Debug)]
#[must_use = "an execution may already exist"]
// Returned once per begin and matched at once: boxing the record would cost an allocation on
// the path that already read it, to save bytes on a value that lives for one match.
#[allow(clippy::large_enum_variant)]
pub enum Begun {
    /// No execution has the id: a handle that will create it with its first write.
    New(Execution),
    /// An execution has the id already; nothing was written.
    Exists(ExecutionRecord),
}

impl Journal {
    /// Begins a new execution `id` without writing anything: one read, and, when no execution
    /// has the id, a handle whose first write (a step's result or intent, a flush, a release
    /// or the finalize, whichever comes first) inserts the row `running`, takes the lock, runs
    /// `with_open` and then writes its own rows, all in one transaction. Until then the handle
    /// holds no lock, and its closures get `FencingToken(0)`: with write-behind
    /// ([`Execution::defer_results`]) only pure closures and the first step's idempotent
    /// closure run before the first write.
    ///
    /// If another handle or process created the execution or holds its lock first, that first
    /// write fails with [`Error::OpenRaced`] and writes nothing.
    ///
    /// The input is encoded by the caller, under the journal's cap
    /// ([`Journal::encode_payload`]), as for [`crate::lifecycle::insert_execution`].
    ///
    /// # Errors
    /// [`Error::OpenRaced`] when a live handle of this journal has the id; a storage error.
    pub fn begin_execution<A>(
        &self,
        id: Uuid,
        kind: &str,
        name: &str,
        input: &Payload,
        with_open: A,
    ) -> Result<Begun>
    where
        A: FnOnce(&Connection) -> Result<()> + Send + 'static,
    {
        let input = input.as_json().to_owned();
        if let Some(record) = self.get(id)? {
            return Ok(Begun::Exists(record));
        }
        let claim = HandleClaim::claim(&self.inner.handles, id).ok_or(Error::OpenRaced(id))?;
        let with_open: OpenHook = Box::new(with_open);
        let open = DeferredOpen {
            kind: kind.to_owned(),
            name: name.to_owned(),
            input: input.clone(),
            with_open,
        };
        Ok(Begun::New(Execution::new(Opening {
            fence: Arc::new(Fence::unopened(self, id, open)),
            settings: self.inner.settings,
            id,
            is_resume: false,
            input,
            replay: Replay::empty(self, id),
            claim,
            span: crate::telemetry::execution_span(id, kind),
        })))
    }
}
