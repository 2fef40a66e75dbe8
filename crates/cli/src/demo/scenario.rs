//! The demo's four runs of the checkout workflow: which policies its two guarded steps have,
//! where the worker is killed, and what the effect ledger must show afterwards.

use clap::ValueEnum;

/// Where the worker blocks, to be killed with SIGKILL. Always inside a guarded step's closure,
/// so the step's intent is already durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CrashPoint {
    /// Run to the end.
    None,
    /// In "charge", before the card is charged.
    ChargeBefore,
    /// In "charge", after the card is charged, before the result is journaled.
    ChargeAfter,
    /// In "send email", after the email is sent, before the result is journaled.
    EmailAfter,
}

/// The ambiguity policies of the two guarded steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// charge under Reconcile (killed after charging), email under Skip.
    Reconcile,
    /// charge under Fail (killed before charging), email under Retry.
    Fail,
    /// charge under Reconcile, email under Skip (killed after sending).
    Skip,
    /// charge under Fail, email under Retry (killed after sending).
    Retry,
}

impl Scenario {
    /// Every scenario, in the order the demo runs them.
    pub const ALL: [Self; 4] = [Self::Reconcile, Self::Fail, Self::Skip, Self::Retry];

    /// The policy word of the "charge" step: `reconcile` or `fail`.
    pub fn charge_policy(self) -> &'static str {
        match self {
            Self::Reconcile | Self::Skip => "reconcile",
            Self::Fail | Self::Retry => "fail",
        }
    }

    /// The policy word of the "send email" step: `skip` or `retry`.
    pub fn email_policy(self) -> &'static str {
        match self {
            Self::Reconcile | Self::Skip => "skip",
            Self::Fail | Self::Retry => "retry",
        }
    }

    /// Where the first worker is killed.
    pub fn crash_point(self) -> CrashPoint {
        match self {
            Self::Reconcile => CrashPoint::ChargeAfter,
            Self::Fail => CrashPoint::ChargeBefore,
            Self::Skip | Self::Retry => CrashPoint::EmailAfter,
        }
    }

    /// The policy this scenario shows at work.
    pub fn shown_policy(self) -> &'static str {
        match self {
            Self::Reconcile => "Reconcile",
            Self::Fail => "Fail",
            Self::Skip => "Skip",
            Self::Retry => "Retry",
        }
    }

    /// The order number, so the four executions are told apart.
    pub fn order(self) -> u32 {
        // 1005 is `story::LEFT_ORDER`, the execution left ambiguous for the reader.
        match self {
            Self::Reconcile => 1001,
            Self::Fail => 1002,
            Self::Skip => 1003,
            Self::Retry => 1004,
        }
    }

    /// What the run is about, in one sentence.
    pub fn story(self) -> &'static str {
        match self {
            Self::Reconcile => {
                "the worker is killed right after the card is charged, before the result is \
                 journaled; \"charge\" is under Reconcile, so the restarted worker asks the \
                 payment provider instead of charging again"
            }
            Self::Fail => {
                "the worker is killed inside \"charge\" before the card is charged; \"charge\" is \
                 under Fail, so the restarted worker stops and leaves the decision to an operator"
            }
            Self::Skip => {
                "the worker is killed right after the email is sent; \"send email\" is under \
                 Skip, so the restarted worker records it as skipped and never sends it again"
            }
            Self::Retry => {
                "the worker is killed right after the email is sent; \"send email\" is under \
                 Retry, so the restarted worker sends it again with the same idempotency key"
            }
        }
    }

    /// How many times each effect must appear in the ledger for this execution: (fetch,
    /// charge, email). Retry is the one policy that repeats an effect, and it says so.
    pub fn expected_counts(self) -> [(&'static str, usize); 3] {
        let emails = if self == Self::Retry { 2 } else { 1 };
        [("fetch", 1), ("charge", 1), ("email", emails)]
    }
}
