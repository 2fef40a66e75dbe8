//! Patches: [`WorkflowContext::patched`] and [`WorkflowContext::deprecate_patch`], how a
//! workflow's code changes while executions are in flight (docs/design.md, "Versioning").
//!
//! A patch is positional, like Temporal's patch markers. At the execution's next seq:
//! - the recorded step there is the marker step `durably:patch/<id>` (pure, result `true`):
//!   the execution reached this point on patched code before; the marker is consumed (it
//!   replays) and the answer is `true`;
//! - another step is recorded there: the execution passed this point on code without the
//!   patch; no step is consumed and the answer is `false`;
//! - nothing is recorded there: the execution reaches this point for the first time, on this
//!   code; the marker is recorded and the answer is `true`.
//!
//! Invariant: an execution's answer to a patch never flips. Every answer is recorded in
//! `runtime_patches` (a `true` one in the transaction of its marker), and a recorded answer is
//! returned first on every later call, before the position is looked at.

use durably_journal::{Effect, Reservation, Status, StepError, Timing, execution_status};
use durably_lock::format_timestamp;
use uuid::Uuid;

use crate::client::Client;
use crate::context::{Lease, WorkflowContext};
use crate::error::{Error, Result};
use crate::names::{self, NameKind};
use crate::store::{self, PatchAnswer};

/// What a `patched` call does, decided when it is called.
enum PatchCall {
    /// The execution answered before: this answer.
    Answered(bool),
    /// The execution passed this point (at this seq) on code without the patch.
    Unpatched(u32),
    /// The marker step, reserved: replayed or recorded now; `answered` when its answer is
    /// already recorded.
    Marker {
        lease: Lease,
        reserved: Reservation,
        answered: bool,
    },
}

/// The step that marks where an execution met patch `patch_id` on patched code.
pub(crate) fn marker_step(patch_id: &str) -> String {
    format!("durably:patch/{patch_id}")
}

impl WorkflowContext {
    /// Whether this execution runs the patched branch at this point: `if ctx.patched("id")?
    /// { new } else { old }`. `true` for an execution that reaches this point on code that
    /// calls `patched` here (a new execution, or one that had not got this far); `false` for
    /// one that passed this point on code without the patch. The answer is recorded and never
    /// flips for the execution; see the module's documentation and docs/design.md
    /// ("Versioning") for the upgrade path to removing the old branch.
    ///
    /// # Errors
    /// Nothing is written on the first two: [`crate::Error::InvalidName`] for an empty,
    /// overlong or control-character `patch_id`; [`crate::Error::Cancelled`] once the run was
    /// asked to stop. Then the journal's errors as [`crate::Error::Journal`]
    /// (non-determinism when this execution answered `true` here before but another step is
    /// recorded at the marker's place).
    pub fn patched<'a>(
        &'a self,
        patch_id: &'a str,
    ) -> impl Future<Output = Result<bool>> + use<'a> {
        // Decided, and the marker's seq reserved, when called (see "Parallel steps").
        let decided = self.begin_patched(patch_id);
        async move {
            let (lease, reserved, answered) = match decided? {
                PatchCall::Answered(answer) => return Ok(answer),
                PatchCall::Unpatched(seq) => return self.record_unpatched(patch_id, seq).await,
                PatchCall::Marker {
                    lease,
                    reserved,
                    answered,
                } => (lease, reserved, answered),
            };
            let (replaying, seq) = (reserved.replays(), reserved.seq());
            let now = format_timestamp(durably_lock::Clock::now(self.waits.clock.as_ref()));
            let patch = patch_id.to_owned();
            let outcome = reserved
                .step_with(
                    Effect::Pure,
                    Timing::Now,
                    |_| async { Ok::<_, StepError>(true) },
                    move |conn, step| {
                        let answer = PatchAnswer {
                            answer: true,
                            seq: step.seq,
                        };
                        store::record_patch_answer(conn, step.execution_id, &patch, answer, &now)
                            .map(drop)
                    },
                )
                .await;
            drop(lease);
            self.slot.remember(outcome)?;
            if replaying && !answered {
                // A marker commits with its answer, and a fork copies both: one without the
                // other is a damaged journal, not something to repair here.
                return Err(Error::Journal(durably_journal::Error::Inconsistent(
                    format!(
                        "execution {} recorded the marker of patch {patch_id:?} at step {seq} \
                         without its answer",
                        self.id
                    ),
                )));
            }
            if !replaying {
                fail::fail_point!("runtime::after-patch-answer-commit", |_| {
                    std::process::abort()
                });
            }
            Ok(true)
        }
    }

    /// What a `patched` call does, decided from the recorded answer and the step recorded at
    /// the execution's next seq; a marker's seq is reserved here.
    fn begin_patched(&self, patch_id: &str) -> Result<PatchCall> {
        names::check(NameKind::PatchId, patch_id)?;
        let marker = marker_step(patch_id);
        let lease = self.lease()?;
        let seq = lease.next_seq();
        let (id, journal) = (self.id, self.waits.client.journal());
        let recorded = journal.read(|conn| store::patch_answer(conn, id, patch_id));
        let recorded = self.slot.remember(recorded)?;
        let marker_due = PatchAnswer { answer: true, seq };
        match recorded {
            Some(answer) if answer != marker_due => return Ok(PatchCall::Answered(answer.answer)),
            Some(_) => {}
            None => {
                let next = self.slot.remember(lease.recorded_next())?;
                if next.is_some_and(|(name, _)| name != marker) {
                    return Ok(PatchCall::Unpatched(seq));
                }
            }
        }
        let reserved = self.slot.remember(lease.reserve(&marker))?;
        Ok(PatchCall::Marker {
            lease,
            reserved,
            answered: recorded.is_some(),
        })
    }

    /// Consumes the marker of patch `patch_id` if the execution recorded it at this point, and
    /// does nothing otherwise: what replaces `patched(patch_id)` once no unfinished execution
    /// answered `false` to it, so the old branch can be deleted while executions that recorded
    /// the marker still replay. It never records a marker, so once no unfinished execution has
    /// one, the call can be removed too (docs/design.md, "Versioning").
    ///
    /// # Errors
    /// As [`WorkflowContext::patched`].
    pub fn deprecate_patch<'a>(
        &'a self,
        patch_id: &'a str,
    ) -> impl Future<Output = Result<()>> + use<'a> {
        let started = self.begin_deprecated(patch_id);
        async move {
            let Some((lease, reserved)) = started? else {
                return Ok(());
            };
            let outcome = reserved
                .step_with(
                    Effect::Pure,
                    Timing::Now,
                    |_| async { Ok::<_, StepError>(true) },
                    |_, _| Ok(()),
                )
                .await;
            drop(lease);
            self.slot.remember(outcome).map(drop)
        }
    }

    /// Reserves the marker's step now when the execution recorded it at this point.
    fn begin_deprecated(&self, patch_id: &str) -> Result<Option<(Lease, Reservation)>> {
        names::check(NameKind::PatchId, patch_id)?;
        let marker = marker_step(patch_id);
        let lease = self.lease()?;
        let next = self.slot.remember(lease.recorded_next())?;
        if next.is_none_or(|(name, _)| name != marker) {
            return Ok(None);
        }
        let reserved = self.slot.remember(lease.reserve(&marker))?;
        Ok(Some((lease, reserved)))
    }

    /// Records that this execution passed `patch_id`'s point (at `seq`) on code without the
    /// patch, unless an answer is recorded, and returns the answer recorded: `false`, unless
    /// another run recorded one first. The answer is a function of the execution's recorded
    /// steps, which only grow, so a stale holder of the execution would record the same one;
    /// it needs no fencing.
    async fn record_unpatched(&self, patch_id: &str, seq: u32) -> Result<bool> {
        let answer = PatchAnswer { answer: false, seq };
        let (id, patch) = (self.id, patch_id.to_owned());
        let now = format_timestamp(durably_lock::Clock::now(self.waits.clock.as_ref()));
        let stored = self
            .waits
            .client
            .journal()
            .write(move |conn| store::record_patch_answer(conn, id, &patch, answer, &now))
            .await?;
        fail::fail_point!("runtime::after-patch-answer-commit", |_| {
            std::process::abort()
        });
        Ok(stored.answer)
    }
}

/// The most executions [`Client::patch_holdouts`] lists for each answer.
pub const PATCH_HOLDOUTS_MAX: usize = 1000;

/// The rows one read of [`Client::patch_holdouts`] looks at.
const PATCH_PAGE_MAX: u32 = 512;

/// The unfinished executions that still need a patch's branches, from
/// [`Client::patch_holdouts`]: the two conditions of the upgrade path (docs/design.md,
/// "Versioning").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PatchHoldouts {
    /// Unfinished executions that answered `false`: they run the old branch. While any is
    /// listed, `patched` must stay (with both branches).
    pub answered_false: Vec<PatchUse>,
    /// Unfinished executions that answered `true` (they recorded the marker). While any is
    /// listed, the call must stay, as `patched` or `deprecate_patch`, so their replay finds it.
    pub answered_true: Vec<PatchUse>,
    /// Whether either list stopped at [`PATCH_HOLDOUTS_MAX`].
    pub truncated: bool,
}

/// One unfinished execution's answer to a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PatchUse {
    /// The execution.
    pub execution_id: Uuid,
    /// Its status now.
    pub status: Status,
    /// The seq it asked `patched` at.
    pub seq: u32,
    /// When the answer was recorded.
    pub decided_at: String,
}

impl Client {
    /// The unfinished executions (any status but completed, failed and cancelled) that
    /// recorded an answer to patch `patch_id`, by answer, at most [`PATCH_HOLDOUTS_MAX`] of
    /// each (`durably patches PATCH`). Reads pages of the answers' index, never a write.
    ///
    /// # Errors
    /// [`crate::Error::InvalidName`] for an invalid patch id; a storage error.
    pub fn patch_holdouts(&self, patch_id: &str) -> Result<PatchHoldouts> {
        names::check(NameKind::PatchId, patch_id)?;
        let mut holdouts = PatchHoldouts::default();
        for answer in [false, true] {
            let (uses, truncated) = self.unfinished_answering(patch_id, answer)?;
            holdouts.truncated |= truncated;
            if answer {
                holdouts.answered_true = uses;
            } else {
                holdouts.answered_false = uses;
            }
        }
        Ok(holdouts)
    }

    /// The unfinished executions that answered `answer` to `patch_id`, and whether the list
    /// stopped at its bound.
    fn unfinished_answering(&self, patch_id: &str, answer: bool) -> Result<(Vec<PatchUse>, bool)> {
        let mut uses = Vec::new();
        let mut after = None;
        loop {
            let page = self.journal().read(|conn| {
                let rows =
                    store::executions_answering(conn, (patch_id, answer), after, PATCH_PAGE_MAX)?;
                let mut page = Vec::with_capacity(rows.len());
                for row in rows {
                    page.push((execution_status(conn, row.execution_id)?, row));
                }
                Ok(page)
            })?;
            let full = page.len() == PATCH_PAGE_MAX as usize;
            after = page.last().map(|(_, row)| row.execution_id);
            for (status, row) in page {
                let Some(status) = status.filter(|status| !status.is_final()) else {
                    continue;
                };
                if uses.len() == PATCH_HOLDOUTS_MAX {
                    return Ok((uses, true));
                }
                uses.push(PatchUse {
                    execution_id: row.execution_id,
                    status,
                    seq: row.seq,
                    decided_at: row.decided_at,
                });
            }
            if !full {
                return Ok((uses, false));
            }
        }
    }
}
