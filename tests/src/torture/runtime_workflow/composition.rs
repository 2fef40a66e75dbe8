//! The composition and change steps of a runtime plan: parallel steps joined, children started
//! and awaited, and the patch point, whose branch depends on the code this process runs
//! ([`Code`]).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use durably_journal::Guarded;
use durably_runtime::{ChildOptions, Error, WorkflowError};

use super::{Run, RuntimeOutput, Stopped, ack_end, keyed_effect};
use crate::torture::plan::{
    CHILD_QUEUE, PATCH_ID, PlanInput, PolicyKind, child_input, effect_value, member_value,
    patch_step_name, patched_value,
};
use crate::torture::runtime_workflow::RUNTIME_KIND;
use crate::torture::workload::Effect;

/// The environment variable that makes a runtime worker run the code without the patch: set
/// to `old`. Any other value, or none, runs the patched code.
pub const CODE_ENV: &str = "DURABLY_TORTURE_CODE";

/// Which build of the runtime workflow a process registers: the torture run upgrades its
/// runtime workers back and forth, so executions started on one code are resumed on the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The code before the patch: the patch point runs the old branch, and never asks.
    Old,
    /// The code with the patch: the patch point asks `patched` and follows its answer.
    New,
}

impl Code {
    /// The code this process runs, as [`CODE_ENV`] says.
    pub fn of_process() -> Self {
        match std::env::var(CODE_ENV).as_deref() {
            Ok("old") => Self::Old,
            _ => Self::New,
        }
    }
}

/// How a step run inside a plan step records itself.
#[derive(Debug, Clone, Copy)]
enum Inner {
    Pure,
    Idempotent,
    Guarded(PolicyKind),
}

/// A future a joined group waits for.
type Joined<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Polls every future in order until all are ready, and returns their outputs in order: the
/// first poll of each starts its step, so the steps reserve their seqs in call order.
async fn join_all<T: Send>(futures: Vec<Joined<'_, T>>) -> Vec<T> {
    let mut futures = futures;
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|context| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(context) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

impl Run {
    /// Runs `effect` as step `name` at journal seq `journal_seq`, recorded as `inner` says,
    /// and returns the acknowledgement record of its outcome.
    async fn inner_step(
        &self,
        name: &str,
        journal_seq: u32,
        effect: Effect,
        inner: Inner,
    ) -> Result<Vec<String>, Stopped> {
        let expected = effect.value().to_owned();
        let keyed = |key| keyed_effect(self.acks.clone(), effect.clone(), key);
        let outcome = match inner {
            Inner::Pure => self
                .context
                .pure(name, || effect.clone().run_pure())
                .await
                .map(Guarded::Done),
            Inner::Idempotent => self
                .context
                .idempotent(name, keyed)
                .await
                .map(Guarded::Done),
            Inner::Guarded(policy) => {
                let policy = self.workload.policy(policy);
                self.context.guarded(name, policy, keyed).await
            }
        };
        let seq = journal_seq.to_string();
        let id = self.id.clone();
        match outcome? {
            Guarded::Done(value) if value == expected => {
                Ok(vec!["A".to_owned(), id, seq, "done".to_owned(), value])
            }
            Guarded::Done(value) => Err(Stopped::Workflow(WorkflowError::new(format!(
                "step {name} returned {value:?}, not {expected:?}"
            )))),
            Guarded::Skipped(_) => Ok(vec![
                "A".to_owned(),
                id,
                seq,
                "skipped".to_owned(),
                "-".to_owned(),
            ]),
        }
    }

    /// Plan step `seq`: `guarded` guarded steps under distinct policies and a pure step,
    /// started in order and joined. Their outcomes are acknowledged once every member has
    /// returned (a member's outcome is durable before a later step's closure runs, which a
    /// sibling's may not be).
    pub(super) async fn parallel_step(
        &self,
        seq: usize,
        guarded: u8,
        first: u8,
    ) -> Result<(), Stopped> {
        let base = self.journal_seqs[seq];
        let name = &self.plan.steps[seq].name;
        let index = self.plan.input.index;
        let mut members: Vec<Joined<'_, Result<Vec<String>, Stopped>>> = Vec::new();
        for member in 0..=usize::from(guarded) {
            let (inner, word, policy) = if member < usize::from(guarded) {
                let policy = PolicyKind::ALL[(usize::from(first) + member) % 4];
                (Inner::Guarded(policy), "guarded", policy.as_str())
            } else {
                (Inner::Pure, "pure", "-")
            };
            let journal_seq = base + member as u32;
            let member_name = format!("{name}.{member}");
            let effect = self.workload.inner_effect(
                &self.plan,
                seq,
                (journal_seq, &member_name),
                (word, policy),
                member_value(index, seq, member),
            );
            members.push(Box::pin(async move {
                self.inner_step(&member_name, journal_seq, effect, inner)
                    .await
            }));
        }
        let mut records = Vec::new();
        for outcome in join_all(members).await {
            records.push(outcome?);
        }
        for record in records {
            let fields: Vec<&str> = record.iter().map(String::as_str).collect();
            self.acks.push(&fields);
        }
        Ok(())
    }

    /// A children step: starts `count` children (the first in [`CHILD_QUEUE`]), then awaits
    /// each. A completed child's outcomes and end, or a cancelled child's end, are
    /// acknowledged: the child has ended when its result returns. A failed child is not (a
    /// step timeout's failure is resumed by the operator).
    pub(super) async fn children_step(&self, count: u8) -> Result<(), Stopped> {
        let mut children = Vec::new();
        for number in 0..usize::from(count) {
            let input = child_input(self.plan.input, number);
            let options = if number == 0 {
                ChildOptions::default().queue(CHILD_QUEUE)
            } else {
                ChildOptions::default()
            };
            let child = self
                .context
                .start_child::<PlanInput, RuntimeOutput>(RUNTIME_KIND, &input, options)
                .await?;
            children.push(child);
        }
        for child in children {
            let id = child.id();
            let (status, acks) = match self.context.child_result(child).await {
                Ok(output) => ("completed", output.acks),
                Err(Error::ChildCancelled { .. }) => ("cancelled", Vec::new()),
                Err(Error::ChildFailed { .. }) => continue,
                Err(error) => return Err(error.into()),
            };
            ack_end(&self.workload, id, status, &acks).map_err(|error| {
                Stopped::Workflow(WorkflowError::new(format!("ack write failed: {error}")))
            })?;
        }
        Ok(())
    }

    /// The patch point at plan step `seq`: the patched code asks `patched` (acknowledged at
    /// once: the answer is durable when it returns) and runs the new branch on `true`, after
    /// the marker step, which shifts every later step by one; otherwise the old branch runs.
    pub(super) async fn patch_step(&mut self, seq: usize) -> Result<(), Stopped> {
        let new = match self.code {
            Code::Old => false,
            Code::New => {
                let answer = self.context.patched(PATCH_ID).await?;
                let word = if answer { "true" } else { "false" };
                self.workload.ack(&["P", &self.id, word]).map_err(|error| {
                    Stopped::Workflow(WorkflowError::new(format!("ack write failed: {error}")))
                })?;
                answer
            }
        };
        if new {
            for later in &mut self.journal_seqs[seq + 1..] {
                *later += 1;
            }
        }
        let journal_seq = self.journal_seqs[seq] + u32::from(new);
        let name = patch_step_name(seq, new);
        let index = self.plan.input.index;
        let value = if new {
            patched_value(index, seq)
        } else {
            effect_value(index, seq)
        };
        let effect = self.workload.inner_effect(
            &self.plan,
            seq,
            (journal_seq, &name),
            ("idempotent", "-"),
            value,
        );
        let record = self
            .inner_step(&name, journal_seq, effect, Inner::Idempotent)
            .await?;
        let fields: Vec<&str> = record.iter().map(String::as_str).collect();
        self.acks.push(&fields);
        Ok(())
    }
}
