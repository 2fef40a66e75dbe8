//! The task of a claimed run: it opens the claim, runs the workflow to its end, and runs the
//! successor its end claimed ([`crate::handover`]) in turn, holding one place of this process
//! throughout. When a run ends without a successor, the place is given back and the
//! dispatcher woken to fill it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use durably_journal::Claim;

use crate::cancel::RunWatch;
use crate::capacity::QueueKey;
use crate::dispatcher::{Dispatch, record_halt};
use crate::handover::HandOver;
use crate::task::{self, Ran};

/// Spawns the task that runs `claim` (started at `version`), holding the place in `place`
/// that its claim took.
pub(crate) fn spawn(dispatch: &Arc<Dispatch>, claim: Claim, version: u32, place: QueueKey) {
    let dispatch = Arc::clone(dispatch);
    tokio::spawn(async move {
        let mut place = place;
        let mut next = Some((claim, version));
        while let Some((claim, version)) = next.take() {
            let hand_over = HandOver::new(&dispatch, place);
            run_claim(&dispatch, claim, version, &hand_over).await;
            place = hand_over.place();
            next = hand_over.successor();
        }
        dispatch.capacity.add(&place, -1);
        dispatch.notify.notify_one();
    });
}

/// Opens `claim` and runs its workflow to its end, which may claim a successor into
/// `hand_over`.
async fn run_claim(dispatch: &Arc<Dispatch>, claim: Claim, version: u32, hand_over: &HandOver) {
    let row = claim.row().clone();
    let journal = dispatch.client.journal();
    // The run's span nests under the span kept for it (a fire's), else it is a root.
    let opened = match dispatch.client.take_parent_span(row.execution_id) {
        Some(parent) => parent.in_scope(|| journal.open_claim(claim)),
        None => journal.open_claim(claim),
    };
    let execution = match opened {
        Ok(execution) => execution,
        Err(error) => {
            // The claim's lock is released: the execution is `running` with no holder, which
            // the recovery's sweep finds.
            tracing::warn!(execution_id = %row.execution_id, %error, "a claimed execution could not be opened");
            dispatch.recover_soon.store(true, Ordering::SeqCst);
            return;
        }
    };
    let Some(workflow) = dispatch.client.registry().get(&row.kind, version) else {
        return;
    };
    let watch = RunWatch::start(&dispatch.waits, &dispatch.runs, row.execution_id);
    match task::run(execution, version, workflow, &watch, Some(hand_over)).await {
        Ok(Ran::Halted(reason)) => {
            // The reason may quote a payload (a recorded value that no longer decodes, in
            // serde's words), so it goes to the journal, not to the trace.
            tracing::warn!(
                execution_id = %row.execution_id,
                "a workflow run stopped; its reason is recorded as the execution's last failure"
            );
            record_halt(dispatch, row.execution_id, reason).await;
        }
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(execution_id = %row.execution_id, %error, "a workflow run could not end");
        }
    }
}
