//! A plain in-memory model of the journal, and a runner that applies one sequence of operations
//! to a real journal and to the model side by side, comparing them after every operation.
//!
//! Shared by the proptest state machine (`tests/tests/model.rs`) and the `operations` fuzz
//! target (`fuzz/`, through [`crate::fuzz_targets::operations`]).
//!
//! The model knows, for each of [`EXECUTIONS`] executions, its status, its open count, its
//! output or error, whether a cancel request is pending, and every step row (state, result,
//! error, attempts); it also counts how often each step's closure and reconcile probe must have
//! been called. A cancel of an execution whose handle is open records a request, after which the
//! handle's writes are refused but a guarded step's result and `fail`. Each execution runs a fixed
//! program (one [`StepSpec`] per seq), so replays call the same steps with the same names.
//!
//! A crash is simulated in-process: every execution handle is dropped (which releases its lock),
//! the journal is closed and reopened; the reopen's orphan sweep then finds each running
//! execution without a lock holder and marks it interrupted. A crash inside the ambiguous window
//! is a guarded step whose closure is entered (so its intent is durable) and whose future is then
//! dropped. Crashes with a dead lock holder are the subject of the multi-process tests, not this
//! one.

mod compare;
mod decode;
mod real;
mod state;

pub use decode::case_from_bytes;

use serde_json::Value;

use compare::compare;
use real::Real;
use state::Model;

/// How many executions a case works on.
pub const EXECUTIONS: usize = 3;
/// The longest program of one execution.
pub const PROGRAM_STEPS_MAX: usize = 5;
/// The most operations one case applies.
pub const OPERATIONS_MAX: usize = 48;

/// The ambiguity policy of a guarded step in a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySpec {
    /// `Policy::Skip`.
    Skip,
    /// `Policy::Retry`.
    Retry,
    /// `Policy::Fail`.
    Fail,
    /// `Policy::Reconcile` with a probe that answers "found" or "not found".
    Reconcile {
        /// Whether the probe reports the effect as done.
        found: bool,
    },
}

/// One step of an execution's program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepSpec {
    /// A pure step; `fails` makes its closure return a fatal error.
    Pure {
        /// Whether the closure fails.
        fails: bool,
    },
    /// An idempotent step.
    Idempotent {
        /// Whether the closure fails.
        fails: bool,
    },
    /// A guarded step.
    Guarded {
        /// Its policy.
        policy: PolicySpec,
        /// Whether the closure fails.
        fails: bool,
    },
}

impl StepSpec {
    fn effect(self) -> &'static str {
        match self {
            Self::Pure { .. } => "pure",
            Self::Idempotent { .. } => "idempotent",
            Self::Guarded { .. } => "guarded",
        }
    }

    fn fails(self) -> bool {
        match self {
            Self::Pure { fails } | Self::Idempotent { fails } | Self::Guarded { fails, .. } => {
                fails
            }
        }
    }

    fn policy(self) -> Option<PolicySpec> {
        match self {
            Self::Guarded { policy, .. } => Some(policy),
            _ => None,
        }
    }
}

/// One operation of a case. Execution indexes are taken modulo [`EXECUTIONS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `open_execution`.
    Open(usize),
    /// The next step of the execution's program, through its open handle.
    Step(usize),
    /// The next step, if it is a fresh guarded step: crash after its intent committed and its
    /// closure started (the step future and then the handle are dropped).
    CrashInStep(usize),
    /// Replay a recorded step under another name (must be `NonDeterminism`).
    StepMismatch(usize),
    /// Drop the handle without finalizing.
    Drop(usize),
    /// `complete` through the handle.
    Complete(usize),
    /// `fail` through the handle.
    Fail(usize),
    /// Drop every handle and the journal, and reopen it.
    Crash,
    /// `resolve(completed)` of the execution's ambiguous step (or of its last step).
    ResolveCompleted(usize),
    /// `resolve(not-done)` of the execution's ambiguous step (or of its last step).
    ResolveNotDone(usize),
    /// `cancel`: at once without a handle, a request while the handle is open.
    Cancel(usize),
    /// The crash-orphan sweep.
    Sweep,
    /// The retention sweep with these ages in seconds.
    Gc {
        /// Age of completed executions to delete.
        completed_age_s: u8,
        /// Age of failed and cancelled executions to delete.
        failed_age_s: u8,
    },
}

/// One test case: a program per execution and the operations to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The program of each execution.
    pub programs: [Vec<StepSpec>; EXECUTIONS],
    /// The operations, in order.
    pub ops: Vec<Op>,
}

/// What an operation returned, in a form both sides can produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The operation did not apply (no handle, program finished, ...) and was not run.
    NoOp,
    /// It succeeded with nothing to report.
    Done,
    /// `open_execution` gave a handle.
    Opened {
        /// `is_resume()`.
        resumed: bool,
    },
    /// `open_execution` found it finished with this status.
    Finished(String),
    /// A step returned this value.
    Value(Value),
    /// A guarded step was skipped.
    Skipped,
    /// The retention sweep deleted this many (completed, failed or cancelled).
    Collected(u64, u64),
    /// `cancel` recorded a request for the live handle to stop.
    Requested,
    /// A typed error, by variant name.
    Error(&'static str),
}

/// A disagreement between the journal and the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Index of the operation after which it was found.
    pub op_index: usize,
    /// The operation.
    pub op: Option<Op>,
    /// What differed.
    pub detail: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "after op #{} {:?}: {}",
            self.op_index, self.op, self.detail
        )
    }
}

/// Applies `case` to a fresh journal (in a temporary directory) and to the model, comparing
/// the outcome of every operation and then the whole journal with the model.
///
/// # Errors
/// The first [`Mismatch`].
pub fn check(case: &Case) -> Result<(), Mismatch> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| mismatch(0, None, format!("cannot build a runtime: {error}")))?;
    runtime.block_on(check_async(case))
}

fn mismatch(op_index: usize, op: Option<Op>, detail: String) -> Mismatch {
    Mismatch {
        op_index,
        op,
        detail,
    }
}

async fn check_async(case: &Case) -> Result<(), Mismatch> {
    let mut real = Real::new().map_err(|detail| mismatch(0, None, detail))?;
    let mut model = Model::default();
    if std::env::var_os("MODEL_STATS").is_some() {
        eprintln!("STAT ---- {:?}", case.programs);
    }
    for (index, &op) in case.ops.iter().take(OPERATIONS_MAX).enumerate() {
        let op = normalized(op);
        let fail = |detail: String| mismatch(index, Some(op), detail);
        real.clock.advance();
        model.now_s += 1;
        let expected = model.apply(&case.programs, op);
        let actual = if expected == Outcome::NoOp {
            Outcome::NoOp
        } else {
            real.apply(&case.programs, op).await.map_err(fail)?
        };
        if std::env::var_os("MODEL_STATS").is_some() {
            eprintln!("STAT {op:?} -> {expected:?}");
        }
        if actual != expected {
            return Err(fail(format!(
                "returned {actual:?}, the model expected {expected:?}"
            )));
        }
        compare(&real, &model).map_err(fail)?;
    }
    Ok(())
}

fn normalized(op: Op) -> Op {
    let e = |e: usize| e % EXECUTIONS;
    match op {
        Op::Open(x) => Op::Open(e(x)),
        Op::Step(x) => Op::Step(e(x)),
        Op::CrashInStep(x) => Op::CrashInStep(e(x)),
        Op::StepMismatch(x) => Op::StepMismatch(e(x)),
        Op::Drop(x) => Op::Drop(e(x)),
        Op::Complete(x) => Op::Complete(e(x)),
        Op::Fail(x) => Op::Fail(e(x)),
        Op::ResolveCompleted(x) => Op::ResolveCompleted(e(x)),
        Op::ResolveNotDone(x) => Op::ResolveNotDone(e(x)),
        Op::Cancel(x) => Op::Cancel(e(x)),
        other @ (Op::Crash | Op::Sweep | Op::Gc { .. }) => other,
    }
}
