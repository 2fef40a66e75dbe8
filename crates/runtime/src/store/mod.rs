//! All of the runtime's SQL: its tables and views ([`SCHEMA`], `schema/runtime/`) and the
//! statements on them. Nothing else in this crate names a table.
//!
//! Every function runs on a connection the journal hands out, inside its transaction
//! ([`durably_journal::Journal::write`] for changes, [`durably_journal::Journal::read`] for
//! queries), so what it writes commits with the rest of its request. None of them writes the
//! journal's own tables, and only the claim's candidates (`claims`) read one: what else the
//! runtime needs of those it asks through the journal's functions.

mod children;
mod claims;
mod deadlines;
mod failures;
mod forks;
mod messages;
mod patches;
mod registrations;
mod started;
mod workflow_events;

use durably_db::{Connection, OptionalExtension, params};
use durably_journal::{ExtensionSchema, Migration, PgSchema, Result};
use uuid::Uuid;

pub(crate) use children::{children_below, children_of, end_consumed_below, parent_of, set_parent};
pub(crate) use claims::{claim_candidates, has_candidate, queued_other_versions};
pub(crate) use deadlines::{deadline_at, due_deadlines, next_deadline, set_deadline};
pub(crate) use failures::{count_failed_run, reset_failures, set_last_failure};
pub(crate) use forks::{copy_fork_rows, insert_fork_row};
pub(crate) use messages::{
    StoredMessage, consume_message, first_pending_message, insert_message, lock_receiver,
    message_by_key,
};
pub(crate) use patches::{PatchAnswer, executions_answering, patch_answer, record_patch_answer};
pub(crate) use registrations::{
    kind_version_known, latest_kind_version, lock_queue, stored_queue, upsert_kind, upsert_queue,
};
pub(crate) use started::{
    Started, dedup_holder, delete_dedup, insert_started, set_steps_at_open, started_version,
};
pub(crate) use workflow_events::{upsert_workflow_event, workflow_event};

/// The runtime's tables and views in the journal's file, owner `runtime`, applied by
/// [`durably_journal::Journal::migrate_extension`] when a client is built.
pub(crate) static SCHEMA: ExtensionSchema = ExtensionSchema {
    owner: "runtime",
    migrations: &[
        Migration {
            name: "0001_runtime",
            sql: include_str!("../../../../schema/runtime/0001_runtime.sql"),
            postgres: None,
        },
        Migration {
            name: "0002_children",
            sql: include_str!("../../../../schema/runtime/0002_children.sql"),
            postgres: None,
        },
        Migration {
            name: "0003_patches_and_forks",
            sql: include_str!("../../../../schema/runtime/0003_patches_and_forks.sql"),
            postgres: None,
        },
    ],
    views: include_str!("../../../../schema/runtime/views.sql"),
    postgres: PgSchema {
        baseline: include_str!("../../../../schema/postgres/runtime/0001_runtime.sql"),
        baseline_version: 3,
        views: include_str!("../../../../schema/postgres/runtime/views.sql"),
    },
};

/// Whether `execution_id` was started through the runtime (it has a `runtime_executions`
/// row). One primary-key seek.
pub(crate) fn is_runtime_execution(conn: &Connection, execution_id: Uuid) -> Result<bool> {
    let found = conn
        .prepare_cached("SELECT 1 FROM runtime_executions WHERE execution_id = ?1")?
        .query_row(params![execution_id.to_string()], |_| Ok(()))
        .optional()?;
    Ok(found.is_some())
}
