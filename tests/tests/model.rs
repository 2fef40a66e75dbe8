//! Guarantee: under any sequence of opens, steps of every kind and policy, crashes (also inside
//! a guarded step's ambiguous window), reopens, operator resolves, finalizes, cancels (at once,
//! or as a request to a live handle, whose writes are then refused but a guarded step's result
//! and `fail`), orphan sweeps and retention sweeps, the journal shows exactly what a plain
//! in-memory model says it must: every execution's status, open count, output, error and
//! pending cancel request; every step's state, result, error and attempts; `recoverable()`; and
//! how many times every closure and reconcile probe ran (a recorded step never runs again; an
//! ambiguous one runs again only when its policy says so).
//!
//! Method: a proptest state machine. Each case draws a program for each of three executions
//! and a sequence of operations, applies them to a real journal in a temporary directory and
//! to the model (`durably_tests::model`), and compares the two after every operation. A crash
//! is simulated in-process (drop every handle and the journal, reopen); see the model module
//! for what that does and does not cover. 64 cases by default; `PROPTEST_CASES` overrides.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use durably_tests::model::{self, Case, EXECUTIONS, OPERATIONS_MAX, Op, PROGRAM_STEPS_MAX};
use durably_tests::model::{PolicySpec, StepSpec};
use proptest::prelude::*;

fn policy() -> impl Strategy<Value = PolicySpec> {
    prop_oneof![
        Just(PolicySpec::Skip),
        Just(PolicySpec::Retry),
        Just(PolicySpec::Fail),
        any::<bool>().prop_map(|found| PolicySpec::Reconcile { found }),
    ]
}

fn step() -> impl Strategy<Value = StepSpec> {
    // Failing closures are rarer than succeeding ones, as in real programs.
    let fails = prop::bool::weighted(0.2);
    prop_oneof![
        1 => fails.prop_map(|fails| StepSpec::Pure { fails }),
        1 => fails.prop_map(|fails| StepSpec::Idempotent { fails }),
        3 => (policy(), fails).prop_map(|(policy, fails)| StepSpec::Guarded { policy, fails }),
    ]
}

fn execution() -> impl Strategy<Value = usize> {
    // Skewed, so most cases drive one execution deep into its program and through crashes,
    // while the others interleave.
    prop_oneof![3 => Just(0_usize), 2 => Just(1_usize), 1 => Just(2_usize)]
}

fn op() -> impl Strategy<Value = Op> {
    let e = execution;
    prop_oneof![
        6 => e().prop_map(Op::Open),
        14 => e().prop_map(Op::Step),
        3 => e().prop_map(Op::CrashInStep),
        1 => e().prop_map(Op::StepMismatch),
        1 => e().prop_map(Op::Drop),
        2 => e().prop_map(Op::Complete),
        1 => e().prop_map(Op::Fail),
        1 => Just(Op::Crash),
        1 => e().prop_map(Op::ResolveCompleted),
        1 => e().prop_map(Op::ResolveNotDone),
        1 => e().prop_map(Op::Cancel),
        1 => Just(Op::Sweep),
        1 => (0_u8..4, 0_u8..4).prop_map(|(completed_age_s, failed_age_s)| Op::Gc {
            completed_age_s,
            failed_age_s
        }),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let program = || prop::collection::vec(step(), 1..=PROGRAM_STEPS_MAX);
    (
        [program(), program(), program()],
        prop::collection::vec(op(), OPERATIONS_MAX / 2..=OPERATIONS_MAX),
    )
        .prop_map(|(programs, ops)| Case { programs, ops })
}

fn config() -> ProptestConfig {
    // `PROPTEST_CASES` in the environment overrides the default of 64.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_journal_matches_the_model_under_any_sequence_of_operations(case in case()) {
        if let Err(mismatch) = model::check(&case) {
            prop_assert!(false, "{mismatch}");
        }
    }
}

/// A fixed sequence that walks every policy through the ambiguous window, so each path runs
/// on every test run whatever the random cases draw.
#[test]
fn every_policy_through_the_ambiguous_window() {
    let guarded = |policy| StepSpec::Guarded {
        policy,
        fails: false,
    };
    let mut ops = Vec::new();
    for e in 0..EXECUTIONS {
        ops.extend([
            Op::Open(e),
            Op::Step(e),
            Op::CrashInStep(e),
            Op::Open(e),
            Op::Step(e),
        ]);
        ops.extend([Op::Step(e), Op::Step(e)]);
    }
    ops.extend([Op::ResolveNotDone(2), Op::Crash, Op::ResolveCompleted(2)]);
    for e in 0..EXECUTIONS {
        ops.extend([
            Op::Open(e),
            Op::Step(e),
            Op::Step(e),
            Op::Complete(e),
            Op::Open(e),
        ]);
    }
    ops.extend([
        Op::Cancel(0),
        Op::Gc {
            completed_age_s: 0,
            failed_age_s: 0,
        },
    ]);
    let programs = [
        vec![StepSpec::Pure { fails: false }, guarded(PolicySpec::Skip)],
        vec![
            StepSpec::Idempotent { fails: false },
            guarded(PolicySpec::Reconcile { found: true }),
        ],
        vec![StepSpec::Pure { fails: true }, guarded(PolicySpec::Fail)],
    ];
    let case = Case { programs, ops };
    model::check(&case).unwrap();
    let retry = Case {
        programs: [
            vec![guarded(PolicySpec::Retry)],
            vec![guarded(PolicySpec::Reconcile { found: false })],
            vec![guarded(PolicySpec::Retry)],
        ],
        ops: (0..EXECUTIONS)
            .flat_map(|e| {
                [
                    Op::Open(e),
                    Op::CrashInStep(e),
                    Op::Crash,
                    Op::Open(e),
                    Op::Step(e),
                ]
            })
            .chain([Op::Sweep])
            .collect(),
    };
    model::check(&retry).unwrap();
}
