//! Cross-crate and multi-process tests for durably.

pub mod fuzz_targets;
pub mod immediate;
pub mod model;
pub mod power_loss;

pub mod torture;
pub mod worker_io;
