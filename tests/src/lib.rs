//! Cross-crate and multi-process tests for durably.
