//! Forks in the torture run: the canceller now and then forks an ended runtime execution from
//! a seq ([`Client::fork`]); a runtime worker runs the fork, and the final pass brings it to
//! its end like any other runtime execution. The checker holds each fork's copied steps to the
//! original's (see [`super::composition_checks`]).

use durably_runtime::{Client, Error, ForkOptions};
use uuid::Uuid;

use super::BoxError;
use super::plan::{ExecutionPlan, PlanInput, RecvTopic, RuntimeStep, SeededRng, StepKind};
use super::runtime_workflow::RUNTIME_KIND;
use super::workload::{OperatorLock, Workload};

/// What the forker forks: ended runtime executions (not one a step timeout failed, which the
/// operator resumes) that have no fork yet.
const FORKABLE: &str = "SELECT e.execution_id, e.input FROM executions e
       JOIN runtime_executions r ON r.execution_id = e.execution_id
     WHERE e.kind = ?1
       AND (e.status IN ('completed', 'cancelled')
            OR (e.status = 'failed'
                AND (e.status_detail ->> 'reason') IS DISTINCT FROM 'step_timeout'))
       AND NOT EXISTS (SELECT 1 FROM runtime_executions f WHERE f.forked_from = e.execution_id)
     ORDER BY e.id DESC LIMIT 16";

/// The journal seqs `plan` may be forked from: plan step boundaries up to its patch point
/// (after it, a `true` answer shifts the seqs), never between a self-send and the receive of
/// its message (the fork's receive would wait for a message sent to the original).
pub fn fork_seqs(plan: &ExecutionPlan) -> Vec<u32> {
    let seqs = plan.journal_seqs();
    let mut cuts = Vec::new();
    for (seq, step) in plan.steps.iter().enumerate() {
        let own_receive = matches!(
            step.kind,
            StepKind::Runtime(RuntimeStep::Recv {
                topic: RecvTopic::Own(_),
                ..
            })
        );
        if !own_receive {
            cuts.push(seqs[seq]);
        }
        if step.kind == StepKind::Runtime(RuntimeStep::Patch) {
            break;
        }
    }
    cuts
}

/// Forks one of the latest ended runtime executions with no fork, under the operator lock,
/// from a random seq [`fork_seqs`] allows; returns the fork's id, or `None` when there was
/// nothing to fork, the lock stayed taken, or the runtime refused (a step to copy is in its
/// ambiguous window, the seq is past the recorded steps).
///
/// # Errors
/// A journal or runtime error the workload never expects.
pub async fn fork_one(
    workload: &Workload,
    client: &Client,
    rng: &mut SeededRng,
) -> Result<Option<Uuid>, BoxError> {
    let Some(_operator) = OperatorLock::acquire(workload.dir())? else {
        return Ok(None);
    };
    let candidates: Vec<(String, String)> = workload.journal().read(|conn| {
        let mut statement = conn.prepare(FORKABLE)?;
        let rows = statement.query_map([RUNTIME_KIND], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    })?;
    if candidates.is_empty() {
        return Ok(None);
    }
    let (id, input) = &candidates[rng.between(0, candidates.len() as u64 - 1) as usize];
    let input: PlanInput = serde_json::from_str(input)?;
    let cuts = fork_seqs(&ExecutionPlan::from_input(input));
    let from_seq = cuts[rng.between(0, cuts.len() as u64 - 1) as usize];
    match client
        .fork(id.parse()?, ForkOptions::from_seq(from_seq))
        .await
    {
        Ok(fork) => Ok(Some(fork)),
        Err(Error::ForkRefused { .. }) => Ok(None),
        Err(error) if error.is_retryable() => Ok(None),
        Err(error) => Err(error.into()),
    }
}
