//! Decoding a case from bytes (the `operations` fuzz target's input).

use super::{Case, EXECUTIONS, OPERATIONS_MAX, Op, PROGRAM_STEPS_MAX, PolicySpec, StepSpec};

fn step_from_byte(byte: u8) -> StepSpec {
    let fails = byte & 0x80 != 0;
    match byte % 7 {
        0 => StepSpec::Pure { fails },
        1 => StepSpec::Idempotent { fails },
        2 => StepSpec::Guarded {
            policy: PolicySpec::Skip,
            fails,
        },
        3 => StepSpec::Guarded {
            policy: PolicySpec::Retry,
            fails,
        },
        4 => StepSpec::Guarded {
            policy: PolicySpec::Fail,
            fails,
        },
        5 => StepSpec::Guarded {
            policy: PolicySpec::Reconcile { found: true },
            fails,
        },
        _ => StepSpec::Guarded {
            policy: PolicySpec::Reconcile { found: false },
            fails,
        },
    }
}

fn op_from_bytes(kind: u8, argument: u8) -> Op {
    let e = usize::from(argument) % EXECUTIONS;
    match kind % 13 {
        0 => Op::Open(e),
        1 => Op::Step(e),
        2 => Op::CrashInStep(e),
        3 => Op::StepMismatch(e),
        4 => Op::Drop(e),
        5 => Op::Complete(e),
        6 => Op::Fail(e),
        7 => Op::Crash,
        8 => Op::ResolveCompleted(e),
        9 => Op::ResolveNotDone(e),
        10 => Op::Cancel(e),
        11 => Op::Sweep,
        _ => Op::Gc {
            completed_age_s: argument % 4,
            failed_age_s: (argument / 4) % 4,
        },
    }
}

/// Decodes a case: for each execution a length byte and that many step bytes, then pairs of
/// bytes as operations. Every input decodes to some case.
pub fn case_from_bytes(data: &[u8]) -> Case {
    let mut bytes = data.iter().copied();
    let mut programs: [Vec<StepSpec>; EXECUTIONS] = Default::default();
    for program in &mut programs {
        let length = usize::from(bytes.next().unwrap_or(0)) % (PROGRAM_STEPS_MAX + 1);
        *program = bytes.by_ref().take(length).map(step_from_byte).collect();
    }
    let mut ops = Vec::new();
    while let (Some(kind), Some(argument)) = (bytes.next(), bytes.next()) {
        if ops.len() == OPERATIONS_MAX {
            break;
        }
        ops.push(op_from_bytes(kind, argument));
    }
    Case { programs, ops }
}
