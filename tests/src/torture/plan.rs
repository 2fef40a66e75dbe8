//! The workload, derived from a seed alone: which executions exist, which steps each runs, and
//! the value each effect returns. A worker that restarts derives the same plan again, which is
//! what replay requires (the same steps, in the same order, with the same names).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A small seeded generator (SplitMix64). Every random choice of the torture run comes from
/// one of these, so a seed reproduces the plan and the kill schedule.
#[derive(Debug, Clone)]
pub struct SeededRng {
    state: u64,
}

impl SeededRng {
    /// A generator for `seed`, mixed with `stream` so independent choices do not correlate.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut rng = Self {
            state: seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F),
        };
        rng.next_u64();
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high` (the modulo bias is irrelevant at these ranges).
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }

    /// `true` with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

/// The ambiguity policy of a guarded step, as planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyKind {
    /// `Policy::Skip`.
    Skip,
    /// `Policy::Retry`.
    Retry,
    /// `Policy::Fail`, resolved by the harness playing operator.
    Fail,
    /// `Policy::Reconcile`, probing the ledger.
    Reconcile,
}

impl PolicyKind {
    /// All four, in a fixed order.
    pub const ALL: [Self; 4] = [Self::Skip, Self::Retry, Self::Fail, Self::Reconcile];

    /// The word stored in `steps.policy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Retry => "retry",
            Self::Fail => "fail",
            Self::Reconcile => "reconcile",
        }
    }
}

/// What one step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// A pure step (its "effect" is still logged, to catch a replayed step running again).
    Pure,
    /// An idempotent step; a flaky one refuses its first attempt in each process with a
    /// retryable error, so the journal's bounded retry runs.
    Idempotent {
        /// Whether the first attempt in each process fails retryably.
        flaky: bool,
    },
    /// An idempotent step whose remote side always refuses, with a fatal error and no effect:
    /// the execution then fails.
    Fatal,
    /// A guarded step under a policy.
    Guarded(PolicyKind),
    /// A step of the runtime's own (runtime plans only): it makes no effect.
    Runtime(RuntimeStep),
}

/// What a runtime step does (see [`StepKind::Runtime`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeStep {
    /// A durable timer of this many milliseconds (`durably:sleep/<name>`); the torture
    /// runtimes park waits longer than [`PARK_AFTER_MS`].
    Sleep {
        /// The timer's length.
        ms: u64,
    },
    /// A receive on a topic (`durably:recv-deadline/<topic>` and `durably:recv/<topic>`).
    Recv {
        /// Which topic, and who sends on it.
        topic: RecvTopic,
        /// The receive's timeout.
        timeout_ms: u64,
    },
    /// The workflow sends itself a message on topic `own<seq>` (`durably:send/<topic>`), which
    /// a later [`RecvTopic::Own`] receives.
    SendOwn,
    /// The workflow publishes [`PROGRESS_EVENT`] (`durably:set-event/<key>`).
    SetEvent,
    /// A step with an effect and a timeout of [`SLOW_TIMEOUT_MS`]: idempotent, or guarded
    /// under `policy`. Its closure's first attempt in each process hangs for
    /// [`SLOW_HANG_MS`] before its effect, so the timeout drops it with no effect: an
    /// idempotent step's execution then fails (`step_timeout`) until an operator resumes it, a
    /// guarded one's is requeued with its intent left to its policy.
    Slow {
        /// The policy of a guarded slow step; `None` for an idempotent one.
        policy: Option<PolicyKind>,
    },
    /// Parallel steps: `guarded` guarded steps under distinct policies (`PolicyKind::ALL`
    /// from `first` on, wrapping) and one pure step, started in that order and joined; each
    /// member is named `<name>.<member>` and records one journal step.
    Parallel {
        /// How many guarded members (3 or 4).
        guarded: u8,
        /// The index in `PolicyKind::ALL` of the first guarded member's policy.
        first: u8,
    },
    /// `count` child executions (runtime plans of their own, see [`child_input`]), started one
    /// after the other (`durably:child/<kind>`, one journal step each; the first in
    /// [`CHILD_QUEUE`]) and then awaited in order (three journal steps each). Only top-level
    /// plans have children.
    Children {
        /// How many (2 or 3).
        count: u8,
    },
    /// A patch point ([`PATCH_ID`]): code without the patch runs the idempotent step
    /// [`patch_step_name`]`(seq, false)`; patched code asks `patched` and runs
    /// [`patch_step_name`]`(seq, true)` on `true` (after the marker step, so it records two
    /// journal steps), the old step on `false`.
    Patch,
}

/// The patch id of [`RuntimeStep::Patch`].
pub const PATCH_ID: &str = "p1";

/// The name of the step a patch point at plan step `seq` runs: the new branch's or the old.
pub fn patch_step_name(seq: usize, new: bool) -> String {
    format!("patch-{}-{seq}", if new { "new" } else { "old" })
}

/// The value the new branch of the patch point at plan step `seq` of execution `index`
/// returns (the old branch returns [`effect_value`]): the ledger shows which branch ran.
pub fn patched_value(index: u64, seq: usize) -> String {
    format!("n{index}-{seq}")
}

/// The value member `member` of the parallel steps at plan step `seq` of execution `index`
/// returns.
pub fn member_value(index: u64, seq: usize, member: usize) -> String {
    format!("v{index}-{seq}.{member}")
}

/// The queue of the first child of a [`RuntimeStep::Children`] step.
pub const CHILD_QUEUE: &str = "children";

/// Child executions' indexes start here: child `number` of the execution of index `parent`
/// has index `CHILD_INDEX_BASE + parent * 4 + number`.
pub const CHILD_INDEX_BASE: u64 = 1 << 60;

/// The plan input of child `number` of the execution `parent` describes: a random runtime
/// plan (with no children of its own), or, under a covering plan, [`Shape::ChildCovering`].
pub fn child_input(parent: PlanInput, number: usize) -> PlanInput {
    let shape = match parent.shape {
        Shape::RuntimeCovering => Shape::ChildCovering,
        _ => Shape::Runtime,
    };
    PlanInput {
        index: CHILD_INDEX_BASE + (parent.index << 2) + number as u64,
        shape,
        ..parent
    }
}

/// The topic of a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvTopic {
    /// `t<seq>`: the sender may send on it, before or during the wait, or never.
    Sent,
    /// `silent<seq>`: nobody sends on it; the receive must time out.
    Silent,
    /// `own<seq>`: the execution's own [`RuntimeStep::SendOwn`] at plan step `seq` sent on
    /// it; the receive must get that message.
    Own(usize),
}

/// The event key runtime plans publish.
pub const PROGRESS_EVENT: &str = "progress";
/// The torture runtimes park waits longer than this (`RuntimeBuilder::park_after`).
pub const PARK_AFTER_MS: u64 = 20;
/// The timeout of a [`RuntimeStep::Slow`] step.
pub const SLOW_TIMEOUT_MS: u64 = 30;
/// How long a [`RuntimeStep::Slow`] step's closure hangs on its first attempt in a process.
pub const SLOW_HANG_MS: u64 = 1_000;

impl RuntimeStep {
    /// How many journal steps it records (a [`RuntimeStep::Patch`] answered `true` records one
    /// more).
    pub fn journal_steps(self) -> u32 {
        match self {
            Self::Recv { .. } => 2,
            Self::Sleep { .. }
            | Self::SendOwn
            | Self::SetEvent
            | Self::Slow { .. }
            | Self::Patch => 1,
            Self::Parallel { guarded, .. } => u32::from(guarded) + 1,
            Self::Children { count } => 4 * u32::from(count),
        }
    }
}

/// The topic of a receive at plan step `seq`, or of a send there.
pub fn topic(kind: StepKind, seq: usize) -> Option<String> {
    match kind {
        StepKind::Runtime(RuntimeStep::Recv { topic, .. }) => Some(match topic {
            RecvTopic::Sent => format!("t{seq}"),
            RecvTopic::Silent => format!("silent{seq}"),
            RecvTopic::Own(sent_at) => format!("own{sent_at}"),
        }),
        StepKind::Runtime(RuntimeStep::SendOwn) => Some(format!("own{seq}")),
        _ => None,
    }
}

/// The payload execution `index` sends itself at plan step `seq`: a function of the plan, so
/// a fork, which replays its original's receive, gets the message it expects.
pub fn own_message(index: u64, seq: usize) -> String {
    format!("own-{index}-{seq}")
}

/// The value plan step `seq` of execution `index` publishes.
pub fn progress_value(index: u64, seq: usize) -> String {
    format!("p{index}-{seq}")
}

/// One planned step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepPlan {
    /// The step name (unique within the execution).
    pub name: String,
    /// What it does.
    pub kind: StepKind,
    /// Milliseconds the closure waits before its effect (widens the window before it).
    pub before_ms: u64,
    /// Milliseconds the closure waits after its effect (widens the ambiguous window).
    pub after_ms: u64,
}

/// The shape of an execution's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// Random steps (the torture run).
    Random,
    /// Every step kind and policy once, with no waits (the failpoint matrix).
    Covering,
    /// Random steps of a workflow that runtimes run (see [`super::runtime_roles`]): started
    /// through the runtime, never driven by hand.
    Runtime,
    /// The steps of [`Shape::Covering`], in a workflow that runtimes run (the failpoint
    /// matrix).
    RuntimeCovering,
    /// The steps of [`Shape::Covering`] with the `Fail` step under `Retry`, in a workflow the
    /// failpoint matrix runs through `Runtime::run` (see [`super::runs`]): a run waits for its
    /// execution's end, which one awaiting an operator does not have until one answers.
    RuntimeRun,
    /// A child of a [`Shape::RuntimeCovering`] plan: one idempotent and one guarded
    /// (Reconcile) step. The covering parent covers every kind; its children only have to be
    /// killed on either side of a step, and a longer child plan multiplies the failpoint
    /// matrix's hits.
    ChildCovering,
}

impl Shape {
    /// Whether executions of this shape are started through the runtime (and never driven by
    /// hand).
    pub fn is_runtime(self) -> bool {
        matches!(
            self,
            Self::Runtime | Self::RuntimeCovering | Self::RuntimeRun | Self::ChildCovering
        )
    }
}

/// What a worker records as an execution's input, so any process can rebuild its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanInput {
    /// The run's seed.
    pub seed: u64,
    /// The execution's index in the run.
    pub index: u64,
    /// The worker slot that created it.
    pub slot: u64,
    /// How its steps are chosen.
    pub shape: Shape,
}

/// One planned execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionPlan {
    /// Where it came from.
    pub input: PlanInput,
    /// Its execution id.
    pub id: Uuid,
    /// Its steps, in order.
    pub steps: Vec<StepPlan>,
}

/// The `kind` of every execution the torture workload creates.
pub const EXECUTION_KIND: &str = "torture";

/// Steps in a random execution, at most.
pub const RANDOM_STEPS_MAX: u64 = 8;

impl ExecutionPlan {
    /// The plan an input describes.
    pub fn from_input(input: PlanInput) -> Self {
        let mut rng = SeededRng::new(input.seed, input.index.wrapping_add(1) << 8);
        let id = Uuid::from_u64_pair(rng.next_u64(), rng.next_u64());
        let id = uuid::Builder::from_random_bytes(*id.as_bytes()).into_uuid();
        let kinds = match input.shape {
            Shape::Random => random_kinds(&mut rng),
            Shape::Runtime => runtime_kinds(&mut rng, input.index < CHILD_INDEX_BASE),
            Shape::Covering => covering_kinds(),
            Shape::RuntimeCovering => runtime_covering_kinds(),
            Shape::ChildCovering => vec![
                StepKind::Idempotent { flaky: false },
                StepKind::Guarded(PolicyKind::Reconcile),
            ],
            Shape::RuntimeRun => covering_kinds()
                .into_iter()
                .map(|kind| match kind {
                    StepKind::Guarded(PolicyKind::Fail) => StepKind::Guarded(PolicyKind::Retry),
                    kind => kind,
                })
                .collect(),
        };
        let steps = kinds
            .into_iter()
            .enumerate()
            .map(|(seq, kind)| {
                let (before_ms, after_ms) = match input.shape {
                    Shape::Random | Shape::Runtime => (wait_ms(&mut rng), wait_ms(&mut rng)),
                    Shape::Covering
                    | Shape::RuntimeCovering
                    | Shape::RuntimeRun
                    | Shape::ChildCovering => (0, 0),
                };
                StepPlan {
                    name: format!("{}-{seq}", kind_word(kind)),
                    kind,
                    before_ms,
                    after_ms,
                }
            })
            .collect();
        Self { input, id, steps }
    }

    /// The execution's name, for people.
    pub fn name(&self) -> String {
        format!("torture-{}", self.input.index)
    }

    /// The journal seq of each plan step's first journal step: a runtime step may record more
    /// than one (a receive records two).
    pub fn journal_seqs(&self) -> Vec<u32> {
        let mut next = 0;
        self.steps
            .iter()
            .map(|step| {
                let seq = next;
                next += match step.kind {
                    StepKind::Runtime(runtime) => runtime.journal_steps(),
                    _ => 1,
                };
                seq
            })
            .collect()
    }
}

/// The value the effect of step `seq` of execution `index` returns; the same on every run, so
/// an operator or a probe can report it from the ledger.
pub fn effect_value(index: u64, seq: usize) -> String {
    format!("v{index}-{seq}")
}

fn wait_ms(rng: &mut SeededRng) -> u64 {
    if rng.percent(60) {
        0
    } else {
        rng.between(1, 2)
    }
}

fn random_kinds(rng: &mut SeededRng) -> Vec<StepKind> {
    let count = rng.between(3, RANDOM_STEPS_MAX);
    let fatal_at = rng.percent(4).then(|| rng.between(0, count - 1));
    (0..count)
        .map(|seq| {
            if fatal_at == Some(seq) {
                return StepKind::Fatal;
            }
            match rng.between(0, 99) {
                0..=14 => StepKind::Pure,
                15..=34 => StepKind::Idempotent {
                    flaky: rng.percent(25),
                },
                roll => StepKind::Guarded(PolicyKind::ALL[(roll % 4) as usize]),
            }
        })
        .collect()
}

/// The steps of a runtime plan: the hand-driven kinds, with timers, receives, self-sends and
/// published events among them, and some of the time parallel steps, a patch point and (in a
/// top-level plan) children.
fn runtime_kinds(rng: &mut SeededRng, top_level: bool) -> Vec<StepKind> {
    let mut kinds = sequential_kinds(rng);
    let mut insert = |rng: &mut SeededRng, kind| {
        let at = rng.between(0, kinds.len() as u64) as usize;
        // Never between a self-send and its receive.
        let at = if at > 0 && kinds[at - 1] == StepKind::Runtime(RuntimeStep::SendOwn) {
            at - 1
        } else {
            at
        };
        kinds.insert(at, StepKind::Runtime(kind));
    };
    if rng.percent(PARALLEL_PERCENT) {
        let kind = RuntimeStep::Parallel {
            guarded: rng.between(3, 4) as u8,
            first: rng.between(0, 3) as u8,
        };
        insert(rng, kind);
    }
    if rng.percent(PATCH_PERCENT) {
        insert(rng, RuntimeStep::Patch);
    }
    if top_level && rng.percent(CHILDREN_PERCENT) {
        let kind = RuntimeStep::Children {
            count: rng.between(2, 3) as u8,
        };
        insert(rng, kind);
    }
    renumber_own_receives(&mut kinds);
    kinds
}

/// In percent: runtime plans with parallel steps, with a patch point, and (top-level ones)
/// with children.
const PARALLEL_PERCENT: u64 = 25;
const PATCH_PERCENT: u64 = 30;
const CHILDREN_PERCENT: u64 = 20;

/// Points each receive of an own message at the self-send right before it, after steps were
/// inserted.
fn renumber_own_receives(kinds: &mut [StepKind]) {
    for (seq, kind) in kinds.iter_mut().enumerate() {
        if let StepKind::Runtime(RuntimeStep::Recv {
            topic: RecvTopic::Own(sent_at),
            ..
        }) = kind
        {
            *sent_at = seq.saturating_sub(1);
        }
    }
}

/// The sequential steps of a runtime plan.
fn sequential_kinds(rng: &mut SeededRng) -> Vec<StepKind> {
    let count = rng.between(3, RANDOM_STEPS_MAX);
    let fatal_at = rng.percent(4).then(|| rng.between(0, count - 1));
    let mut kinds = Vec::new();
    for seq in 0..count {
        if fatal_at == Some(seq) {
            kinds.push(StepKind::Fatal);
            continue;
        }
        let runtime = |step| StepKind::Runtime(step);
        let kind = match rng.between(0, 99) {
            0..=9 => StepKind::Pure,
            10..=24 => StepKind::Idempotent {
                flaky: rng.percent(25),
            },
            25..=54 => StepKind::Guarded(PolicyKind::ALL[rng.between(0, 3) as usize]),
            55..=64 => runtime(RuntimeStep::Sleep {
                ms: if rng.percent(50) {
                    rng.between(1, PARK_AFTER_MS / 2)
                } else {
                    rng.between(PARK_AFTER_MS + 5, PARK_AFTER_MS * 4)
                },
            }),
            65..=79 => runtime(RuntimeStep::Recv {
                topic: RecvTopic::Sent,
                timeout_ms: rng.between(5, 150),
            }),
            80..=84 => runtime(RuntimeStep::Recv {
                topic: RecvTopic::Silent,
                timeout_ms: rng.between(5, 60),
            }),
            85..=89 => {
                kinds.push(runtime(RuntimeStep::SendOwn));
                runtime(RuntimeStep::Recv {
                    topic: RecvTopic::Own(kinds.len() - 1),
                    timeout_ms: OWN_RECV_TIMEOUT_MS,
                })
            }
            90..=94 => runtime(RuntimeStep::Slow {
                policy: rng
                    .percent(50)
                    .then(|| PolicyKind::ALL[rng.between(0, 3) as usize]),
            }),
            _ => runtime(RuntimeStep::SetEvent),
        };
        kinds.push(kind);
    }
    kinds
}

/// The timeout of a receive of the execution's own message, which is there before it waits:
/// long enough never to expire.
const OWN_RECV_TIMEOUT_MS: u64 = 60_000;

/// The timeout of the covering plan's receive of the driver's message: long enough for the
/// driver to send it.
pub const COVERING_RECV_TIMEOUT_MS: u64 = 60_000;

/// Every kind of [`covering_kinds`] and every runtime step: a short and a parked timer, a
/// self-send and its receive, a receive of the driver's message, a receive that times out
/// while parked, a published event, a slow idempotent and a slow guarded (Retry) step,
/// parallel steps under every policy, the patch point and two children.
fn runtime_covering_kinds() -> Vec<StepKind> {
    let mut kinds = covering_kinds();
    let first = kinds.len();
    kinds.extend(
        [
            RuntimeStep::Sleep { ms: 1 },
            RuntimeStep::Sleep {
                ms: PARK_AFTER_MS * 2,
            },
            RuntimeStep::SendOwn,
            RuntimeStep::Recv {
                topic: RecvTopic::Own(first + 2),
                timeout_ms: OWN_RECV_TIMEOUT_MS,
            },
            RuntimeStep::Recv {
                topic: RecvTopic::Sent,
                timeout_ms: COVERING_RECV_TIMEOUT_MS,
            },
            RuntimeStep::Recv {
                topic: RecvTopic::Silent,
                timeout_ms: PARK_AFTER_MS * 2,
            },
            RuntimeStep::SetEvent,
            RuntimeStep::Slow { policy: None },
            RuntimeStep::Slow {
                policy: Some(PolicyKind::Retry),
            },
            RuntimeStep::Parallel {
                guarded: 4,
                first: 0,
            },
            RuntimeStep::Patch,
            RuntimeStep::Children { count: 2 },
        ]
        .map(StepKind::Runtime),
    );
    kinds
}

fn covering_kinds() -> Vec<StepKind> {
    let mut kinds = vec![
        StepKind::Pure,
        StepKind::Idempotent { flaky: false },
        StepKind::Idempotent { flaky: true },
    ];
    kinds.extend(PolicyKind::ALL.map(StepKind::Guarded));
    kinds
}

fn kind_word(kind: StepKind) -> &'static str {
    match kind {
        StepKind::Pure => "pure",
        StepKind::Idempotent { flaky: false } => "idempotent",
        StepKind::Idempotent { flaky: true } => "flaky",
        StepKind::Fatal => "fatal",
        StepKind::Guarded(PolicyKind::Skip) => "guarded-skip",
        StepKind::Guarded(PolicyKind::Retry) => "guarded-retry",
        StepKind::Guarded(PolicyKind::Fail) => "guarded-fail",
        StepKind::Guarded(PolicyKind::Reconcile) => "guarded-reconcile",
        StepKind::Runtime(RuntimeStep::Sleep { .. }) => "sleep",
        StepKind::Runtime(RuntimeStep::Recv { .. }) => "recv",
        StepKind::Runtime(RuntimeStep::SendOwn) => "send",
        StepKind::Runtime(RuntimeStep::SetEvent) => "event",
        StepKind::Runtime(RuntimeStep::Slow { .. }) => "slow",
        StepKind::Runtime(RuntimeStep::Parallel { .. }) => "parallel",
        StepKind::Runtime(RuntimeStep::Children { .. }) => "children",
        StepKind::Runtime(RuntimeStep::Patch) => "patch",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_a_function_of_its_input() {
        let input = PlanInput {
            seed: 7,
            index: 3,
            slot: 0,
            shape: Shape::Random,
        };
        assert_eq!(
            ExecutionPlan::from_input(input),
            ExecutionPlan::from_input(input)
        );
        let other = ExecutionPlan::from_input(PlanInput { index: 4, ..input });
        assert_ne!(ExecutionPlan::from_input(input).id, other.id);
    }
}
