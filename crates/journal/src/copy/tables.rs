//! The tables a copy carries, table by table, with the columns it reads and writes.
//!
//! Every table that holds a journal's state is here, in an order where a row's parent is
//! copied before it (`steps` after `executions`, `fires` after `jobs`). Two tables are not:
//! `locks`, because ownership starts fresh on the destination (a lock row names a process of
//! the source's host, and an execution with no lock row is recoverable), and
//! `schema_versions`, which both sides must already agree on.

/// A table the copy carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Table {
    /// The table's name, the same on both backends.
    pub(crate) name: &'static str,
    /// Whose migrations create it: its `schema_versions` owner.
    pub(crate) owner: &'static str,
    /// Its columns, named, so a column that a SQLite `ALTER TABLE` appended and the
    /// PostgreSQL baseline placed elsewhere still lines up.
    pub(crate) columns: &'static [&'static str],
    /// The primary key: the order rows are read and digested in, and the key a batch resumes
    /// after. Text keys compare byte by byte on both backends (`COLLATE "C"`).
    pub(crate) key: &'static [&'static str],
    /// The columns holding timestamps: RFC 3339 text on SQLite, `timestamptz` on PostgreSQL.
    pub(crate) timestamps: &'static [&'static str],
    /// Whether `id` is an identity column whose sequence must move past the copied ids.
    pub(crate) identity: bool,
}

/// The tables that never travel (see the module doc).
pub(crate) const NOT_COPIED: &[&str] = &["locks", "schema_versions"];

/// Every table a copy carries, parents first.
pub(crate) const TABLES: &[Table] = &[
    Table {
        name: "executions",
        owner: "journal",
        columns: &[
            "id",
            "execution_id",
            "kind",
            "name",
            "status",
            "input",
            "output",
            "error",
            "opens",
            "created_at",
            "updated_at",
            "finalized_at",
            "queue",
            "priority",
            "due_at",
            "wait_topic",
            "cancel_requested_at",
            "cancel_reason",
            "status_detail",
        ],
        key: &["id"],
        timestamps: &[
            "created_at",
            "updated_at",
            "finalized_at",
            "due_at",
            "cancel_requested_at",
        ],
        identity: true,
    },
    Table {
        name: "steps",
        owner: "journal",
        columns: &[
            "id",
            "execution_id",
            "seq",
            "name",
            "effect",
            "policy",
            "state",
            "idempotency_key",
            "result",
            "error",
            "attempts",
            "intent_at",
            "result_at",
        ],
        key: &["id"],
        timestamps: &["intent_at", "result_at"],
        identity: true,
    },
    Table {
        name: "events",
        owner: "journal",
        columns: &["id", "at", "execution_id", "seq", "kind", "detail"],
        key: &["id"],
        timestamps: &["at"],
        identity: true,
    },
    Table {
        name: "runtime_executions",
        owner: "runtime",
        columns: &[
            "execution_id",
            "version",
            "deadline_at",
            "dedup_key",
            "resume_failures",
            "steps_at_open",
            "last_failure",
            "parent_execution_id",
            "parent_seq",
            "forked_from",
            "fork_seq",
        ],
        key: &["execution_id"],
        timestamps: &["deadline_at"],
        identity: false,
    },
    Table {
        name: "queues",
        owner: "runtime",
        columns: &["queue", "concurrency_max", "updated_at"],
        key: &["queue"],
        timestamps: &["updated_at"],
        identity: false,
    },
    Table {
        name: "workflow_kinds",
        owner: "runtime",
        columns: &[
            "kind",
            "version",
            "first_registered_at",
            "last_registered_at",
        ],
        key: &["kind", "version"],
        timestamps: &["first_registered_at", "last_registered_at"],
        identity: false,
    },
    Table {
        name: "dedup_keys",
        owner: "runtime",
        columns: &["queue", "key", "execution_id"],
        key: &["queue", "key"],
        timestamps: &[],
        identity: false,
    },
    Table {
        name: "messages",
        owner: "runtime",
        columns: &[
            "id",
            "execution_id",
            "topic",
            "payload",
            "idempotency_key",
            "sent_at",
            "consumed_seq",
            "consumed_at",
        ],
        key: &["id"],
        timestamps: &["sent_at", "consumed_at"],
        identity: true,
    },
    Table {
        name: "workflow_events",
        owner: "runtime",
        columns: &["execution_id", "key", "value", "seq", "set_at"],
        key: &["execution_id", "key"],
        timestamps: &["set_at"],
        identity: false,
    },
    Table {
        name: "runtime_patches",
        owner: "runtime",
        columns: &["execution_id", "patch_id", "answer", "seq", "decided_at"],
        key: &["execution_id", "patch_id"],
        timestamps: &["decided_at"],
        identity: false,
    },
    Table {
        name: "jobs",
        owner: "scheduler",
        columns: &[
            "job",
            "definition",
            "definition_hash",
            "registered_at",
            "updated_at",
            "last_slot",
            "last_slot_ms",
            "paused",
            "paused_changed_at",
        ],
        key: &["job"],
        timestamps: &[
            "registered_at",
            "updated_at",
            "last_slot",
            "paused_changed_at",
        ],
        identity: false,
    },
    Table {
        name: "fires",
        owner: "scheduler",
        columns: &[
            "job",
            "slot",
            "slot_ms",
            "execution_id",
            "state",
            "reason",
            "attempts",
            "awaiting_operator",
            "registered_at",
            "started_at",
            "finished_at",
        ],
        key: &["job", "slot_ms"],
        timestamps: &["slot", "registered_at", "started_at", "finished_at"],
        identity: false,
    },
    Table {
        name: "skipped_slots",
        owner: "scheduler",
        columns: &[
            "job",
            "first_slot",
            "first_slot_ms",
            "last_slot",
            "last_slot_ms",
            "slot_count",
            "count_exact",
            "reason",
            "recorded_at",
        ],
        key: &["job", "first_slot_ms"],
        timestamps: &["first_slot", "last_slot", "recorded_at"],
        identity: false,
    },
];

impl Table {
    /// Whether column `index` of [`Table::columns`] holds a timestamp.
    pub(crate) fn is_timestamp(&self, index: usize) -> bool {
        self.columns
            .get(index)
            .is_some_and(|column| self.timestamps.contains(column))
    }

    /// The positions of the key's columns in [`Table::columns`].
    pub(crate) fn key_positions(&self) -> Vec<usize> {
        self.key
            .iter()
            .filter_map(|key| self.columns.iter().position(|column| column == key))
            .collect()
    }

    /// `SELECT` of the columns in key order: the first batch, or the one after a key (`?1…`).
    pub(crate) fn select_sql(&self, after: bool, limit: usize) -> String {
        let columns = self.columns.join(", ");
        let key = self.key.join(", ");
        let filter = if after {
            let marks: Vec<String> = (1..=self.key.len()).map(|n| format!("?{n}")).collect();
            format!(" WHERE ({key}) > ({})", marks.join(", "))
        } else {
            String::new()
        };
        format!(
            "SELECT {columns} FROM {} {filter} ORDER BY {key} LIMIT {limit}",
            self.name
        )
    }

    /// `INSERT` of one row of the columns.
    pub(crate) fn insert_sql(&self) -> String {
        let marks: Vec<String> = (1..=self.columns.len()).map(|n| format!("?{n}")).collect();
        format!(
            "INSERT INTO {} ({}) VALUES ({})",
            self.name,
            self.columns.join(", "),
            marks.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_and_timestamp_is_a_column_and_parents_come_first() {
        for table in TABLES {
            assert_eq!(
                table.key_positions().len(),
                table.key.len(),
                "{}",
                table.name
            );
            for column in table.timestamps {
                assert!(table.columns.contains(column), "{}.{column}", table.name);
            }
            assert_eq!(table.identity, table.key == ["id"], "{}", table.name);
        }
        let position = |name: &str| TABLES.iter().position(|table| table.name == name);
        assert!(position("executions") < position("steps"));
        assert!(position("jobs") < position("fires"));
    }
}
