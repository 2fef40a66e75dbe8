//! The deterministic workload of the power-loss test, shared by the writer process
//! (`power_loss_writer`) and the checker (`tests/tests/power_loss.rs`).
//!
//! Both sides derive the same plan from a seed, so the checker knows the exact order of the
//! writer's commits: commit `i` of [`commits`] is the `i`-th transaction the writer commits, and
//! the writer prints `ack i` only after that commit was acknowledged.

use uuid::Uuid;

/// How a planned step is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepPlan {
    /// A pure step; `fails` makes its closure return a fatal error (journaled as `failed`).
    Pure {
        /// Whether the closure fails.
        fails: bool,
    },
    /// An idempotent step that succeeds.
    Idempotent,
    /// A guarded step under the named policy (`skip`, `retry`, `fail`, `reconcile`).
    Guarded {
        /// The policy word.
        policy: &'static str,
    },
}

/// How a planned execution ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// `complete(output)`.
    Complete,
    /// `fail(error)`.
    Fail,
    /// Left running: the writer is killed while it still holds it.
    LeaveOpen,
}

/// One planned execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionPlan {
    /// Its id.
    pub id: Uuid,
    /// Its steps, in call order.
    pub steps: Vec<StepPlan>,
    /// How it ends.
    pub finish: Finish,
}

/// One planned commit, in the order the writer commits them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// `open_execution` created the row and took the lock.
    Open {
        /// Index into the plan.
        execution: usize,
    },
    /// A pure or idempotent step's result (`completed` or `failed`).
    Result {
        /// Index into the plan.
        execution: usize,
        /// The step.
        seq: u32,
        /// The state written.
        state: &'static str,
    },
    /// A guarded step's intent.
    Intent {
        /// Index into the plan.
        execution: usize,
        /// The step.
        seq: u32,
    },
    /// A guarded step's result (`completed`).
    GuardedResult {
        /// Index into the plan.
        execution: usize,
        /// The step.
        seq: u32,
    },
    /// The terminal status and the lock release.
    Finalize {
        /// Index into the plan.
        execution: usize,
        /// `completed` or `failed`.
        status: &'static str,
    },
}

/// splitmix64: a tiny deterministic generator, so the plan needs no RNG crate.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// The plan for `seed`: `executions` executions of 2 to 6 steps of every kind; the last one is
/// left open.
pub fn plan(seed: u64, executions: usize) -> Vec<ExecutionPlan> {
    let mut random = SplitMix(seed);
    (0..executions)
        .map(|index| {
            let steps = (0..2 + random.below(5))
                .map(|_| match random.below(7) {
                    0 => StepPlan::Pure { fails: false },
                    1 => StepPlan::Pure { fails: true },
                    2 => StepPlan::Idempotent,
                    3 => StepPlan::Guarded { policy: "skip" },
                    4 => StepPlan::Guarded { policy: "retry" },
                    5 => StepPlan::Guarded { policy: "fail" },
                    _ => StepPlan::Guarded {
                        policy: "reconcile",
                    },
                })
                .collect();
            let finish = if index + 1 == executions {
                Finish::LeaveOpen
            } else if random.below(4) == 0 {
                Finish::Fail
            } else {
                Finish::Complete
            };
            ExecutionPlan {
                id: Uuid::from_u128((u128::from(seed) << 64) | index as u128),
                steps,
                finish,
            }
        })
        .collect()
}

/// The commits of `plan`, in the order the writer makes them.
pub fn commits(plan: &[ExecutionPlan]) -> Vec<Commit> {
    let mut commits = Vec::new();
    for (execution, planned) in plan.iter().enumerate() {
        commits.push(Commit::Open { execution });
        for (seq, step) in (0_u32..).zip(&planned.steps) {
            match step {
                StepPlan::Pure { fails } => commits.push(Commit::Result {
                    execution,
                    seq,
                    state: if *fails { "failed" } else { "completed" },
                }),
                StepPlan::Idempotent => commits.push(Commit::Result {
                    execution,
                    seq,
                    state: "completed",
                }),
                StepPlan::Guarded { .. } => {
                    commits.push(Commit::Intent { execution, seq });
                    commits.push(Commit::GuardedResult { execution, seq });
                }
            }
        }
        match planned.finish {
            Finish::Complete => commits.push(Commit::Finalize {
                execution,
                status: "completed",
            }),
            Finish::Fail => commits.push(Commit::Finalize {
                execution,
                status: "failed",
            }),
            Finish::LeaveOpen => {}
        }
    }
    commits
}

/// The value a successful step returns (and the journal records as JSON).
pub fn step_value(execution: usize, seq: u32) -> String {
    format!("value {execution}.{seq}")
}

/// The message of a failing step's error.
pub fn step_error(execution: usize, seq: u32) -> String {
    format!("error {execution}.{seq}")
}

/// The name of a step.
pub fn step_name(seq: u32) -> String {
    format!("step-{seq}")
}
