//! New execution ids. Any UUID names an execution; the ids made here also keep the journal's
//! writes close together on disk.

use uuid::Uuid;

/// A new execution id that sorts by creation time: a UUID version 7 (RFC 9562), a millisecond
/// Unix timestamp followed by random bits. Prefer it to [`Uuid::new_v4`] for executions that are
/// not named by something else (the scheduler's deterministic fire ids are).
///
/// Why: the `steps` table is clustered by `(execution_id, seq)`, and the `executions` and `locks`
/// tables by the id. Random ids scatter every new execution, and so every commit of executions
/// running side by side, across the whole B-tree: each commit writes (and each fsync carries) one
/// leaf page per execution touched. Ids made close together in time sort next to each other, so
/// new executions append at the end of those B-trees, and short executions running together
/// share leaf pages. Long executions still write one leaf page each per commit, once their steps
/// outgrow a page; `docs/lab/performance-history.md` (round 2) gives the measurements.
///
/// Ids made by one process are strictly increasing (the `uuid` crate keeps a counter within a
/// millisecond). The 74 random bits keep ids from different processes or hosts unique. The id
/// reads the system clock, not the journal's injected clock: it decides only where rows land,
/// never what the journal does, so a clock jump costs locality, not correctness. The id reveals
/// when it was made, to the millisecond; use a random id where that matters.
///
/// ```
/// let first = durably_journal::new_execution_id();
/// let second = durably_journal::new_execution_id();
/// assert_eq!(first.get_version_num(), 7);
/// assert!(first < second, "ids made one after another sort in that order");
/// ```
#[must_use]
pub fn new_execution_id() -> Uuid {
    let id = Uuid::now_v7();
    debug_assert_eq!(id.get_version_num(), 7);
    id
}
