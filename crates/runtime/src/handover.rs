//! The end of a dispatched run that hands its place to a successor: the run's end (completed
//! or failed) and the claim of the next queued execution commit in one transaction
//! ([`Execution::complete_claiming`]), and the task that ran the one runs the other. A place
//! given up is taken again with no commit, pass or wake-up in between, so a busy runtime keeps
//! every place full, and the claim costs no commit of its own.
//!
//! The successor is looked for in the queues this process serves, starting after the ending
//! run's queue ([`Capacity::queues_after`]), so that places turn over between queues in turn;
//! each queue's limits hold as for any claim ([`crate::claims`]). No successor is claimed once
//! the runtime is shutting down.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};

use durably_db::Connection;
use durably_journal::{Claim, Claimer, Execution};
use serde::Serialize;
use uuid::Uuid;

use crate::capacity::{Capacity, QueueKey};
use crate::claims::{Picked, Place, claim_from};
use crate::dispatcher::Dispatch;
use crate::task::clear_deadline;

/// How a run ends: its execution's final status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// With the workflow's output.
    Completed,
    /// With the workflow's error, or the reason it could not run.
    Failed,
}

/// Ends `execution` as `ending` says with `payload` at `now`, claiming its successor beside
/// the end with a `hand_over`.
pub(crate) async fn end(
    execution: Execution,
    ending: Ending,
    payload: &impl Serialize,
    hand_over: Option<&HandOver>,
    now: DateTime<Utc>,
) -> durably_journal::Result<()> {
    let id = execution.id();
    match (hand_over, ending) {
        (Some(hand_over), _) => hand_over.end(execution, ending, payload).await,
        (None, Ending::Completed) => {
            execution
                .complete_with(payload, clear_deadline(id, now))
                .await
        }
        (None, Ending::Failed) => execution.fail_with(payload, clear_deadline(id, now)).await,
    }
}

/// A run's place and its successor, shared with the claim beside the run's end, which runs in
/// the writer's thread.
#[derive(Debug)]
pub(crate) struct HandOver {
    dispatch: Arc<Dispatch>,
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    /// The queue whose place the run holds; after a claim beside its end, the successor's.
    place: QueueKey,
    /// What the claim beside the end took, kept until the end commits.
    picked: Option<Picked>,
    /// The successor's claim, once the end has committed with it.
    successor: Option<(Claim, u32)>,
}

impl HandOver {
    /// A hand-over for a run of `dispatch` holding a place in `place`.
    pub(crate) fn new(dispatch: &Arc<Dispatch>, place: QueueKey) -> Self {
        Self {
            dispatch: Arc::clone(dispatch),
            state: Arc::new(Mutex::new(State {
                place,
                picked: None,
                successor: None,
            })),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue whose place the run's task holds now: the successor's after a hand-over
    /// (even one whose end then failed to commit: the place moved in [`Capacity`] all the
    /// same), else the run's own.
    pub(crate) fn place(&self) -> QueueKey {
        self.state().place.clone()
    }

    /// The successor claimed beside the run's end, with the version it was started with.
    pub(crate) fn successor(&self) -> Option<(Claim, u32)> {
        self.state().successor.take()
    }

    /// Ends `execution` as `ending` says with `payload` (its output or error), claiming a
    /// successor in the same transaction.
    pub(crate) async fn end(
        &self,
        execution: Execution,
        ending: Ending,
        payload: &impl Serialize,
    ) -> durably_journal::Result<()> {
        let select = self.select(execution.id());
        let claims = match ending {
            Ending::Completed => execution.complete_claiming(payload, select).await?,
            Ending::Failed => execution.fail_claiming(payload, select).await?,
        };
        self.keep(claims);
        Ok(())
    }

    /// Pairs the committed claim (at most one) with the version the transaction read.
    fn keep(&self, claims: Vec<Claim>) {
        let mut state = self.state();
        let picked = state.picked.take();
        for claim in claims {
            if let Some(picked) = picked.as_ref().filter(|p| p.id == claim.row().execution_id) {
                state.successor = Some((claim, picked.version));
            }
        }
    }

    /// The claim beside the end of execution `ending`: one successor, in the first served
    /// queue after the run's own that has one and room for it. The ending execution's
    /// deadline is cleared there too.
    fn select(
        &self,
        ending: Uuid,
    ) -> impl FnOnce(&Connection, &mut Claimer) -> durably_journal::Result<()> + Send + 'static
    {
        let (dispatch, state) = (Arc::clone(&self.dispatch), Arc::clone(&self.state));
        let now = dispatch.clock.now();
        move |conn, claimer| {
            clear_deadline(ending, now)(conn)?;
            if *dispatch.stop.borrow() {
                return Ok(());
            }
            let capacity: &Capacity = &dispatch.capacity;
            let from = state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .place
                .clone();
            for queue in capacity.queues_after(&from) {
                let mut picked = Vec::new();
                let registry = dispatch.client.registry();
                let claimed = claim_from(
                    conn,
                    claimer,
                    (registry, capacity),
                    (&queue, 1),
                    Place::HandedOver(&from),
                    now,
                    &mut picked,
                );
                // The place moved with the claim, whatever happens to the transaction next.
                if let Some(picked) = picked.pop() {
                    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
                    state.place.clone_from(&picked.queue);
                    state.picked = Some(picked);
                    return claimed;
                }
                claimed?;
            }
            Ok(())
        }
    }
}
