//! Scheduler (in progress).
