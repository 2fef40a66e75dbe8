//! The in-memory model: what each operation must do to each execution.

use std::collections::BTreeMap;

use durably_journal::StepError;
use serde_json::{Value, json};

use super::{EXECUTIONS, Op, Outcome, PolicySpec, StepSpec};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ModelStep {
    pub(super) name: String,
    pub(super) effect: &'static str,
    pub(super) policy: Option<&'static str>,
    pub(super) state: &'static str,
    pub(super) result: Option<Value>,
    pub(super) error: Option<Value>,
    pub(super) attempts: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ModelExecution {
    pub(super) status: &'static str,
    pub(super) opens: i64,
    pub(super) output: Option<Value>,
    pub(super) error: Option<Value>,
    pub(super) finalized_at_s: Option<i64>,
    /// A cancel request was recorded while a handle held it; it stays on the row.
    pub(super) cancel_requested: bool,
    pub(super) steps: Vec<ModelStep>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct ModelHandle {
    pub(super) cursor: usize,
    pub(super) halted: bool,
}

/// Calls of closures and probes, by (execution, seq).
pub(super) type Calls = BTreeMap<(usize, usize), u32>;

#[derive(Debug, Default)]
pub(super) struct Model {
    pub(super) executions: [Option<ModelExecution>; EXECUTIONS],
    pub(super) handles: [Option<ModelHandle>; EXECUTIONS],
    pub(super) closure_calls: Calls,
    pub(super) probe_calls: Calls,
    /// Seconds since the start of the case (the injected clock).
    pub(super) now_s: i64,
}

fn policy_word(policy: PolicySpec) -> &'static str {
    match policy {
        PolicySpec::Skip => "skip",
        PolicySpec::Retry => "retry",
        PolicySpec::Fail => "fail",
        PolicySpec::Reconcile { .. } => "reconcile",
    }
}

pub(super) fn step_name(seq: usize) -> String {
    format!("step-{seq}")
}

pub(super) fn step_value(execution: usize, seq: usize) -> Value {
    json!(format!("value {execution}.{seq}"))
}

pub(super) fn step_error(execution: usize, seq: usize) -> StepError {
    StepError::fatal(format!("error {execution}.{seq}"))
}

pub(super) fn probe_value(execution: usize, seq: usize) -> Value {
    json!(format!("probed {execution}.{seq}"))
}

pub(super) fn resolved_value(execution: usize) -> Value {
    json!(format!("resolved {execution}"))
}

fn error_value(error: &StepError) -> Value {
    serde_json::to_value(error).unwrap_or(Value::Null)
}

impl Model {
    pub(super) fn apply(&mut self, programs: &[Vec<StepSpec>; EXECUTIONS], op: Op) -> Outcome {
        match op {
            Op::Open(e) => self.open(e),
            Op::Step(e) => self.step(e, programs[e].get(self.cursor(e)).copied()),
            Op::CrashInStep(e) => self.crash_in_step(e, programs[e].get(self.cursor(e)).copied()),
            Op::StepMismatch(e) => self.mismatch(e),
            Op::Drop(e) => match self.handles[e].take() {
                Some(_) => Outcome::Done,
                None => Outcome::NoOp,
            },
            Op::Complete(e) => self.finalize(e, "completed"),
            Op::Fail(e) => self.finalize(e, "failed"),
            Op::Crash => {
                self.handles = Default::default();
                self.interrupt_unlocked();
                Outcome::Done
            }
            Op::ResolveCompleted(e) => self.resolve(e, true),
            Op::ResolveNotDone(e) => self.resolve(e, false),
            Op::Cancel(e) => self.cancel(e),
            Op::Sweep => {
                self.interrupt_unlocked();
                Outcome::Done
            }
            Op::Gc {
                completed_age_s,
                failed_age_s,
            } => self.collect(i64::from(completed_age_s), i64::from(failed_age_s)),
        }
    }

    fn cursor(&self, e: usize) -> usize {
        self.handles[e].map_or(usize::MAX, |handle| handle.cursor)
    }

    fn open(&mut self, e: usize) -> Outcome {
        if self.handles[e].is_some() {
            return Outcome::Error("Locked");
        }
        let Some(execution) = &mut self.executions[e] else {
            self.executions[e] = Some(ModelExecution {
                status: "running",
                opens: 1,
                output: None,
                error: None,
                finalized_at_s: None,
                cancel_requested: false,
                steps: Vec::new(),
            });
            self.handles[e] = Some(ModelHandle::default());
            return Outcome::Opened { resumed: false };
        };
        match execution.status {
            "completed" | "failed" => Outcome::Finished(execution.status.to_owned()),
            "cancelled" => Outcome::Error("Cancelled"),
            "awaiting_operator" => Outcome::Error("AwaitingOperator"),
            _ => {
                execution.status = "running";
                execution.opens += 1;
                self.handles[e] = Some(ModelHandle::default());
                Outcome::Opened { resumed: true }
            }
        }
    }

    /// The handle and execution a step needs, or `None` when the step is a no-op.
    fn stepping(&mut self, e: usize, spec: Option<StepSpec>) -> Option<(StepSpec, usize)> {
        let handle = self.handles[e]?;
        if handle.halted {
            return None;
        }
        Some((spec?, handle.cursor))
    }

    fn step(&mut self, e: usize, spec: Option<StepSpec>) -> Outcome {
        if self.handles[e].is_some_and(|handle| handle.halted) {
            return Outcome::Error("Halted");
        }
        let Some((spec, seq)) = self.stepping(e, spec) else {
            return Outcome::NoOp;
        };
        let recorded = self.executions[e]
            .as_ref()
            .and_then(|execution| execution.steps.get(seq).cloned());
        let outcome = match recorded {
            None if self.cancel_requested(e) => self.refuse_fresh(e, seq, spec),
            None => self.run_fresh(e, seq, spec),
            Some(step) => self.replay(e, seq, spec, &step),
        };
        if let Some(handle) = &mut self.handles[e] {
            match outcome {
                Outcome::Error("StepFailed") | Outcome::Value(_) | Outcome::Skipped => {
                    handle.cursor += 1;
                }
                _ => handle.halted = true,
            }
        }
        outcome
    }

    fn steps_mut(&mut self, e: usize) -> &mut Vec<ModelStep> {
        &mut self.executions[e]
            .get_or_insert_with(|| unreachable_execution(e))
            .steps
    }

    fn cancel_requested(&self, e: usize) -> bool {
        self.executions[e]
            .as_ref()
            .is_some_and(|execution| execution.cancel_requested)
    }

    /// A fresh step after a cancel request: a guarded step's intent is refused before its
    /// closure runs; a pure or idempotent closure runs and its result is refused.
    fn refuse_fresh(&mut self, e: usize, seq: usize, spec: StepSpec) -> Outcome {
        if spec.policy().is_none() {
            *self.closure_calls.entry((e, seq)).or_default() += 1;
        }
        Outcome::Error("CancelRequested")
    }

    fn run_fresh(&mut self, e: usize, seq: usize, spec: StepSpec) -> Outcome {
        *self.closure_calls.entry((e, seq)).or_default() += 1;
        let mut step = ModelStep {
            name: step_name(seq),
            effect: spec.effect(),
            policy: spec.policy().map(policy_word),
            state: "completed",
            result: None,
            error: None,
            attempts: 1,
        };
        let outcome = finish_step(&mut step, e, seq, spec.fails());
        self.steps_mut(e).push(step);
        outcome
    }

    fn replay(&mut self, e: usize, seq: usize, spec: StepSpec, recorded: &ModelStep) -> Outcome {
        match recorded.state {
            "completed" => Outcome::Value(recorded.result.clone().unwrap_or(Value::Null)),
            "failed" => Outcome::Error("StepFailed"),
            "skipped" => Outcome::Skipped,
            _ => self.resolve_ambiguity(e, seq, spec),
        }
    }

    fn resolve_ambiguity(&mut self, e: usize, seq: usize, spec: StepSpec) -> Outcome {
        let Some(policy) = spec.policy() else {
            return Outcome::Error("Inconsistent");
        };
        if let PolicySpec::Reconcile { .. } = policy {
            *self.probe_calls.entry((e, seq)).or_default() += 1;
        }
        // Every policy's decision is a write, refused after a cancel request: the intent stays.
        if self.cancel_requested(e) {
            return Outcome::Error("CancelRequested");
        }
        let step = &mut self.steps_mut(e)[seq];
        match policy {
            PolicySpec::Skip => {
                step.state = "skipped";
                return Outcome::Skipped;
            }
            PolicySpec::Fail => {
                // No open reopens it until an operator answers the step.
                self.executions[e]
                    .get_or_insert_with(|| unreachable_execution(e))
                    .status = "awaiting_operator";
                return Outcome::Error("Ambiguous");
            }
            PolicySpec::Reconcile { found: true } => {
                step.state = "completed";
                step.result = Some(probe_value(e, seq));
                return Outcome::Value(probe_value(e, seq));
            }
            PolicySpec::Retry | PolicySpec::Reconcile { found: false } => {}
        }
        step.attempts += 1;
        let outcome = finish_step(step, e, seq, spec.fails());
        *self.closure_calls.entry((e, seq)).or_default() += 1;
        outcome
    }

    fn crash_in_step(&mut self, e: usize, spec: Option<StepSpec>) -> Outcome {
        let Some((spec @ StepSpec::Guarded { policy, .. }, seq)) = self.stepping(e, spec) else {
            return Outcome::NoOp;
        };
        if self.executions[e]
            .as_ref()
            .is_none_or(|execution| execution.steps.len() != seq)
        {
            return Outcome::NoOp;
        }
        // The intent is refused: the closure is never entered, and the handle is dropped.
        if self.cancel_requested(e) {
            self.handles[e] = None;
            return Outcome::Error("CancelRequested");
        }
        *self.closure_calls.entry((e, seq)).or_default() += 1;
        self.steps_mut(e).push(ModelStep {
            name: step_name(seq),
            effect: spec.effect(),
            policy: Some(policy_word(policy)),
            state: "intent",
            result: None,
            error: None,
            attempts: 1,
        });
        self.handles[e] = None;
        Outcome::Done
    }

    fn mismatch(&mut self, e: usize) -> Outcome {
        let Some(handle) = &mut self.handles[e] else {
            return Outcome::NoOp;
        };
        let recorded = self.executions[e]
            .as_ref()
            .map_or(0, |execution| execution.steps.len());
        if handle.halted || handle.cursor >= recorded {
            return Outcome::NoOp;
        }
        handle.halted = true;
        Outcome::Error("NonDeterminism")
    }

    fn finalize(&mut self, e: usize, status: &'static str) -> Outcome {
        let Some(handle) = self.handles[e].take() else {
            return Outcome::NoOp;
        };
        // Completing loses to a pending cancel request (the handle is consumed); failing does
        // not.
        if self.cancel_requested(e) && status == "completed" {
            return Outcome::Error("CancelRequested");
        }
        // After an ambiguous step or non-determinism the journal is in doubt: `complete` is
        // refused (the handle is consumed and its lock released) and `fail` stays allowed.
        if handle.halted && status == "completed" {
            return Outcome::Error("Halted");
        }
        // Nor does an execution complete while one of its steps is ambiguous.
        let ambiguous = self.executions[e]
            .as_ref()
            .is_some_and(|execution| execution.steps.iter().any(|step| step.state == "intent"));
        if ambiguous && status == "completed" {
            return Outcome::Error("Refused");
        }
        let now_s = self.now_s;
        let execution = self.executions[e].get_or_insert_with(|| unreachable_execution(e));
        execution.status = status;
        execution.finalized_at_s = Some(now_s);
        if status == "completed" {
            execution.output = Some(json!(format!("output {e}")));
        } else {
            execution.error = Some(json!(format!("failure {e}")));
        }
        Outcome::Done
    }

    fn interrupt_unlocked(&mut self) {
        for (execution, handle) in self.executions.iter_mut().zip(&self.handles) {
            if let Some(execution) = execution
                && execution.status == "running"
                && handle.is_none()
            {
                execution.status = "interrupted";
            }
        }
    }

    fn resolve(&mut self, e: usize, completed: bool) -> Outcome {
        let Some(execution) = &mut self.executions[e] else {
            return Outcome::Error("NotFound");
        };
        if self.handles[e].is_some() {
            return Outcome::Error("Locked");
        }
        let Some(seq) = resolve_target(&execution.steps) else {
            return Outcome::Error("Refused");
        };
        if execution.steps[seq].state != "intent" {
            return Outcome::Error("Refused");
        }
        if completed {
            execution.steps[seq].state = "completed";
            execution.steps[seq].result = Some(resolved_value(e));
        } else {
            execution.steps.remove(seq);
        }
        // Its only intent is the step it waited on: it may run again, as after a crash.
        if execution.status == "awaiting_operator" {
            execution.status = "interrupted";
        }
        Outcome::Done
    }

    fn cancel(&mut self, e: usize) -> Outcome {
        let Some(execution) = &mut self.executions[e] else {
            return Outcome::Error("NotFound");
        };
        if matches!(execution.status, "completed" | "failed" | "cancelled") {
            return Outcome::Error("Refused");
        }
        // A live handle holds it: a running execution gets a request; any other status is a
        // moment's state (a halted handle not yet dropped) and is refused.
        if self.handles[e].is_some() {
            if execution.status != "running" {
                return Outcome::Error("Locked");
            }
            execution.cancel_requested = true;
            return Outcome::Requested;
        }
        execution.status = "cancelled";
        execution.error = Some(json!({ "cancelled": CANCEL_REASON }));
        execution.finalized_at_s = Some(self.now_s);
        Outcome::Done
    }

    fn collect(&mut self, completed_age_s: i64, failed_age_s: i64) -> Outcome {
        let (mut completed, mut failed) = (0, 0);
        for execution in &mut self.executions {
            let Some(found) = execution else { continue };
            let Some(finalized_at_s) = found.finalized_at_s else {
                continue;
            };
            let (age_s, counter) = if found.status == "completed" {
                (completed_age_s, &mut completed)
            } else {
                (failed_age_s, &mut failed)
            };
            if finalized_at_s < self.now_s - age_s {
                *counter += 1;
                *execution = None;
            }
        }
        Outcome::Collected(completed, failed)
    }
}

/// The step `resolve` is aimed at: the ambiguous one if any, else the last one.
fn resolve_target(steps: &[ModelStep]) -> Option<usize> {
    steps
        .iter()
        .position(|step| step.state == "intent")
        .or_else(|| steps.len().checked_sub(1))
}

fn finish_step(step: &mut ModelStep, e: usize, seq: usize, fails: bool) -> Outcome {
    if fails {
        step.state = "failed";
        step.error = Some(error_value(&step_error(e, seq)));
        Outcome::Error("StepFailed")
    } else {
        step.state = "completed";
        step.result = Some(step_value(e, seq));
        Outcome::Value(step_value(e, seq))
    }
}

/// Steps are only taken through a handle, which exists only for an existing execution.
fn unreachable_execution(e: usize) -> ModelExecution {
    panic!("the model stepped execution {e}, which it does not hold")
}

pub(super) const CANCEL_REASON: &str = "the model cancelled it";
