//! [`Client::fork`]: a new execution that copies an ended one's recorded steps before a seq
//! and runs the rest on current code, how an operator recovers a stuck or wrongly finished
//! run (docs/design.md, "Fork").
//!
//! The fork has a new random id, the original's kind, name, input, queue and priority, and
//! the original's version unless the options give another. In one transaction it is inserted
//! `queued`, the original's steps with seq below `from_seq` are copied as recorded (results,
//! errors, skipped steps, idempotency keys, attempts), with the workflow events and patch
//! answers those steps recorded, the link (`runtime_executions.forked_from`, `fork_seq`) is
//! stored, and each execution gets an event naming the other (`forked` on the original,
//! `forked_from` on the fork). A process serving its (kind, version) then claims it, replays
//! the copied steps and runs the rest. Messages the copied steps consumed are not copied:
//! their recv steps replay the recorded message. The end of a child whose start step is
//! copied but whose await is not is delivered to the fork too (a message on its topic,
//! as the child's own end sends); a child that has not ended yet refuses the fork, since only the
//! original will be told of its end.
//!
//! Steps at or after `from_seq` run under the fork's idempotency keys, which derive from its
//! new id: the remote side sees a new key, so an effect the original made at or after
//! `from_seq` can happen again.

use durably_db::Connection;
use durably_journal::forks::{copy_steps, execution_kind, insert_fork, open_intent_before};
use durably_journal::lifecycle::{record_execution_event, recorded_steps};
use durably_journal::{Status, execution_status};
use serde_json::json;
use uuid::Uuid;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::store;

/// The audit event on the original of a fork: `{"fork": id, "from_seq": n}`.
pub const EVENT_FORKED: &str = "forked";

/// The audit event on a fork: `{"original": id, "from_seq": n, "version": v}`.
pub const EVENT_FORKED_FROM: &str = "forked_from";

/// What [`Client::fork`] copies and how the fork runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForkOptions {
    /// The original's steps with a seq below this are copied; the fork runs the rest. At most
    /// the original's recorded steps (all of them copied).
    pub from_seq: u32,
    /// The version the fork runs on; the original's when `None`. It must be one some process
    /// has registered for the kind.
    pub version: Option<u32>,
}

impl ForkOptions {
    /// Copies the steps below `from_seq`, on the original's version.
    pub fn from_seq(from_seq: u32) -> Self {
        Self {
            from_seq,
            version: None,
        }
    }

    /// Runs the fork on `version` instead of the original's.
    #[must_use]
    pub fn version(mut self, version: u32) -> Self {
        self.version = Some(version);
        self
    }
}

/// Why [`Client::fork`] refused; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ForkRefusal {
    /// The original has not ended, so a process may still run it; only a completed, failed,
    /// cancelled or stuck execution is forked.
    #[error("it is {status}, and a process may still run it")]
    Unfinished {
        /// Its status.
        status: Status,
    },
    /// `from_seq` is past the original's recorded steps.
    #[error("seq {from_seq} is past its recorded steps (it has {recorded})")]
    SeqPastEnd {
        /// The asked seq.
        from_seq: u32,
        /// How many steps it recorded.
        recorded: u32,
    },
    /// A step to copy is in the ambiguous window: its effect may or may not have happened.
    #[error("step {seq} ({step:?}) before seq {from_seq} is in the ambiguous window")]
    Ambiguous {
        /// The step's seq.
        seq: u32,
        /// The step's name.
        step: String,
        /// The asked seq.
        from_seq: u32,
    },
    /// The original was not started through the runtime (a program drives it by hand).
    #[error("it was not started through the runtime")]
    HandDriven,
    /// A child started by a step to copy has not ended: only the original would be told of
    /// its end, so the fork would wait for it forever.
    #[error("step {seq} before seq {from_seq} started child {child_id}, which has not ended")]
    ChildRunning {
        /// The start step's seq.
        seq: u32,
        /// The child.
        child_id: Uuid,
        /// The asked seq.
        from_seq: u32,
    },
    /// No process has registered the kind at the asked version.
    #[error("no process has registered workflow kind {kind:?} at version {version}")]
    UnknownVersion {
        /// The kind.
        kind: String,
        /// The asked version.
        version: u32,
    },
}

impl Client {
    /// Forks execution `id`: a new execution (a new random id, returned) of the same kind and
    /// input that copies `id`'s recorded steps below `options.from_seq` and is queued to run
    /// the rest on current code; see the module's documentation. Durable when it returns.
    ///
    /// # Errors
    /// Nothing is written on any of these: [`Error::NotFound`]; [`Error::ForkRefused`] for an
    /// execution that is running, queued, waiting, interrupted or awaiting an operator, a
    /// `from_seq` past its recorded steps, a step below it in the ambiguous window, a
    /// hand-driven execution, or a version no process registered; a storage error.
    pub async fn fork(&self, id: Uuid, options: ForkOptions) -> Result<Uuid> {
        let fork = durably_journal::new_execution_id();
        let now = self.now();
        let outcome = self
            .journal()
            .write(move |conn| {
                let decided = decide(conn, id, options)?;
                let Ok((kind, version)) = decided else {
                    return Ok(decided.map(|_| fork));
                };
                write_fork(conn, (id, fork), &kind, version, options.from_seq, now)?;
                Ok(Ok(fork))
            })
            .await?;
        let fork = outcome.map_err(|refusal| match refusal {
            Refused::NotFound => Error::NotFound(id),
            Refused::Fork(refusal) => Error::ForkRefused {
                execution_id: id,
                refusal,
            },
        })?;
        fail::fail_point!("runtime::after-fork-commit", |_| std::process::abort());
        self.announce_change();
        Ok(fork)
    }
}

/// Why a fork's transaction wrote nothing.
enum Refused {
    NotFound,
    Fork(ForkRefusal),
}

/// Checks that `id` may be forked as `options` say, and returns its kind and the fork's
/// version.
fn decide(
    conn: &Connection,
    id: Uuid,
    options: ForkOptions,
) -> durably_journal::Result<std::result::Result<(String, u32), Refused>> {
    let refuse = |refusal| Ok(Err(Refused::Fork(refusal)));
    let Some(status) = execution_status(conn, id)? else {
        return Ok(Err(Refused::NotFound));
    };
    let Some(original_version) = store::started_version(conn, id)? else {
        return refuse(ForkRefusal::HandDriven);
    };
    if !matches!(
        status,
        Status::Completed | Status::Failed | Status::Cancelled | Status::Stuck
    ) {
        return refuse(ForkRefusal::Unfinished { status });
    }
    let from_seq = options.from_seq;
    let recorded = recorded_steps(conn, id)?;
    if from_seq > recorded {
        return refuse(ForkRefusal::SeqPastEnd { from_seq, recorded });
    }
    if let Some((seq, step)) = open_intent_before(conn, id, from_seq)? {
        return refuse(ForkRefusal::Ambiguous {
            seq,
            step,
            from_seq,
        });
    }
    if let Some((seq, child_id)) = crate::children::unended_child_below(conn, id, from_seq)? {
        return refuse(ForkRefusal::ChildRunning {
            seq,
            child_id,
            from_seq,
        });
    }
    let Some(kind) = execution_kind(conn, id)? else {
        return Ok(Err(Refused::NotFound));
    };
    let version = options.version.unwrap_or(original_version);
    if !store::kind_version_known(conn, &kind, version)? {
        return refuse(ForkRefusal::UnknownVersion { kind, version });
    }
    Ok(Ok((kind, version)))
}

/// Writes fork `fork` of `original`, decided by [`decide`], in the caller's transaction.
fn write_fork(
    conn: &Connection,
    (original, fork): (Uuid, Uuid),
    kind: &str,
    version: u32,
    from_seq: u32,
    now: chrono::DateTime<chrono::Utc>,
) -> durably_journal::Result<()> {
    let detail = json!({ "reason": EVENT_FORKED_FROM, "original": original, "from_seq": from_seq });
    if !insert_fork(conn, original, fork, &detail, now)? {
        return Err(durably_journal::Error::Inconsistent(format!(
            "execution {original} of kind {kind:?} vanished while it was forked"
        )));
    }
    let copied = copy_steps(conn, original, fork, from_seq)?;
    debug_assert_eq!(copied, from_seq, "steps are numbered without gaps");
    store::insert_fork_row(conn, fork, version, (original, from_seq))?;
    store::copy_fork_rows(conn, original, fork, from_seq)?;
    crate::children::tell_fork(conn, (original, fork), from_seq, now)?;
    let on_original = json!({ "fork": fork, "from_seq": from_seq });
    record_execution_event(conn, now, original, None, EVENT_FORKED, &on_original)?;
    let on_fork = json!({ "original": original, "from_seq": from_seq, "version": version });
    record_execution_event(conn, now, fork, None, EVENT_FORKED_FROM, &on_fork)?;
    Ok(())
}
