-- durably-journal, migration 7: the statuses of executions that wait, and the columns the
-- runtime's queues, timers, messages and cancellation keep on the execution's own row.
--
-- SQLite cannot change a CHECK, so `executions` is rebuilt. The journal applies this migration
-- in its rebuild mode (crates/journal/src/storage.rs): `foreign_keys` is off, so dropping the
-- old table does not delete every step and event through ON DELETE CASCADE; every view and
-- trigger is saved and dropped first (SQLite will not rename a table while a view names a
-- table that does not exist) and recreated afterwards from its saved text, the views of crates
-- built on the journal included; and `PRAGMA foreign_key_check` must find no row before the
-- transaction commits.
--
-- Parked statuses (`queued`, `waiting`, `stuck`, `awaiting_operator`) hold no lock: such an
-- execution is a row, and only the runtime's claim or an operator moves it on.
CREATE TABLE executions_rebuilt (
    -- Insertion order: FIFO position within a priority. Explicit, because VACUUM may renumber
    -- an implicit rowid.
    id                  INTEGER PRIMARY KEY,
    execution_id        TEXT    NOT NULL,
    kind                TEXT    NOT NULL,
    name                TEXT    NOT NULL,
    -- '=' chains, not IN: an IN list in a CHECK builds a temporary b-tree per written row
    -- (docs/performance-history.md round 3); this row is written in every first and last
    -- commit.
    status              TEXT    NOT NULL
                        CHECK (status = 'queued' OR status = 'running' OR status = 'waiting'
                               OR status = 'interrupted' OR status = 'stuck'
                               OR status = 'awaiting_operator' OR status = 'completed'
                               OR status = 'failed' OR status = 'cancelled'),
    input               TEXT    NOT NULL CHECK (json_valid(input)),
    output              TEXT    CHECK (output IS NULL OR json_valid(output)),
    error               TEXT    CHECK (error IS NULL OR json_valid(error)),
    -- How many times the execution has been opened; 0 while queued and never opened.
    opens               INTEGER NOT NULL DEFAULT 1 CHECK (opens >= 0),
    created_at          TEXT    NOT NULL,
    updated_at          TEXT    NOT NULL,
    finalized_at        TEXT,
    -- The runtime queue; NULL: no queue (only per-process limits), and every hand-driven
    -- execution.
    queue               TEXT    CHECK (queue IS NULL OR length(queue) BETWEEN 1 AND 128),
    -- Larger runs first.
    priority            INTEGER NOT NULL DEFAULT 0,
    -- When a queued or waiting execution becomes runnable without any other event: not
    -- before, wake time or receive timeout. NULL: not waiting for a time.
    due_at              TEXT,
    -- The message topic a waiting execution waits for.
    wait_topic          TEXT,
    -- A cancel request for a running execution, seen by its holder at its next write.
    cancel_requested_at TEXT,
    cancel_reason       TEXT    CHECK (cancel_reason IS NULL OR length(cancel_reason) <= 1024),
    -- Why the execution is in its status, for people: names, seqs, reasons; never payloads.
    status_detail       TEXT    CHECK (status_detail IS NULL
                                       OR (json_valid(status_detail)
                                           AND length(status_detail) <= 2048)),
    CHECK ((status = 'completed' OR status = 'failed' OR status = 'cancelled')
           = (finalized_at IS NOT NULL)),
    CHECK (due_at IS NULL OR status = 'queued' OR status = 'waiting'),
    CHECK (wait_topic IS NULL OR status = 'waiting'),
    CHECK (cancel_reason IS NULL OR cancel_requested_at IS NOT NULL)
) STRICT;

INSERT INTO executions_rebuilt (execution_id, kind, name, status, input, output, error, opens,
                                created_at, updated_at, finalized_at)
SELECT execution_id, kind, name, status, input, output, error, opens, created_at, updated_at,
       finalized_at
FROM executions ORDER BY created_at, execution_id;

-- Takes its primary key's index and both of its indexes with it.
DROP TABLE executions;
ALTER TABLE executions_rebuilt RENAME TO executions;

-- Every lookup by id, and the parent key of `steps`, `events` and the runtime's foreign keys.
CREATE UNIQUE INDEX executions_by_execution_id ON executions (execution_id);
-- `recoverable()` (status = 'running' / 'interrupted'), the retention sweep
-- (status = ? AND finalized_at < ? ORDER BY finalized_at LIMIT ?), `durably ls --status`.
CREATE INDEX executions_by_status ON executions (status, finalized_at);
-- `durably ls`: newest first.
CREATE INDEX executions_by_created ON executions (created_at);
-- Claim candidates: WHERE status = 'queued' AND due_at IS NULL AND queue IS ?
-- ORDER BY priority DESC, id (the implicit trailing rowid is `id`: FIFO within a priority).
CREATE INDEX executions_claimable ON executions (queue, priority DESC)
    WHERE status = 'queued' AND due_at IS NULL;
-- The limit count of a claim: WHERE status = 'running' AND queue = ?.
CREATE INDEX executions_running_in_queue ON executions (queue)
    WHERE status = 'running' AND queue IS NOT NULL;
-- The due pass (WHERE due_at IS NOT NULL AND due_at <= ?) and the next wake-up (min(due_at)).
CREATE INDEX executions_due ON executions (due_at) WHERE due_at IS NOT NULL;
-- The holders' cancel check: running executions with a pending cancel request. The query names
-- it (INDEXED BY): without statistics, SQLite would rather seek executions_by_status for
-- status = 'running', which reads every running execution.
CREATE INDEX executions_cancel_requested ON executions (execution_id)
    WHERE cancel_requested_at IS NOT NULL AND status = 'running';
