//! The torture test: a mixed workload in worker processes that are SIGKILLed at seeded random
//! moments and restarted, an independent ledger of every effect, and a checker that compares
//! the ledger with the journal. See `docs/testing.md`.
//!
//! - [`plan`]: the workload, derived from the seed.
//! - [`ledger`]: the ledger and acknowledgement logs (append-only, one `write` per record).
//! - [`workload`]: driving executions through the engine, and playing the operator.
//! - [`fires`]: scheduler fires from several scheduler processes.
//! - [`forks`]: forks of ended runtime executions.
//! - [`runtime_roles`]: runtime workers, a sender and a canceller, on the runtime's workflows
//!   ([`runtime_workflow`]).
//! - [`matrix`]: the small deterministic workload of the failpoint matrix
//!   ([`runs`]: its executions run through `Runtime::run`; [`matrix_runtime`]: its runtime
//!   part).
//! - [`checker`]: the invariants ([`runtime_checks`]: the runtime's; [`composition_checks`]:
//!   children, patches and forks).
//! - [`driver`]: the kill-and-restart loop of the `torture` binary.
//! - [`worker`]: the binary's `worker` subcommand, every process the driver and the matrix
//!   start.

pub mod bounded;
pub mod checker;
pub mod composition_checks;
pub mod driver;
pub mod fires;
pub mod forks;
pub mod ledger;
pub mod matrix;
pub mod matrix_runtime;
pub mod matrix_versions;
pub mod plan;
pub mod runs;
pub mod runtime_checks;
pub mod runtime_roles;
pub mod runtime_workflow;
pub mod store;
pub mod worker;
pub mod workload;

/// The error type of the harness: anything, with its message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Turns off core dumps for this process (and the children it starts), so the many deliberate
/// aborts of a crash test do not write core files.
pub fn disable_core_dumps() {
    let limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit; lowering RLIMIT_CORE has no other effect.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &raw const limit) };
}
