-- durably-runtime, migration 1: the runtime's own tables in the journal's database. The
-- runtime applies its numbered migrations (schema/runtime/) when a `Client` or a `Runtime` is
-- built, and records the number applied in the journal's `schema_versions` table under the
-- owner `runtime`. A change to these tables is a new numbered migration, never an edit here.
--
-- Names, topics and keys are validated in Rust (1 to 256 bytes of UTF-8, no control
-- characters; queues and kinds 1 to 128); the CHECKs below bound only their length, as the
-- last line of defence. Every child table of `executions` has an index led by `execution_id`,
-- so the retention sweep's cascading deletes seek instead of scanning.

-- One row per execution started through the runtime; hand-driven executions have none.
CREATE TABLE runtime_executions (
    execution_id    TEXT    PRIMARY KEY REFERENCES executions (execution_id) ON DELETE CASCADE,
    -- The version of the workflow kind the execution was started with.
    version         INTEGER NOT NULL CHECK (version >= 1),
    -- When the execution is cancelled with reason `timeout`; cleared when it ends.
    deadline_at     TEXT,
    dedup_key       TEXT,
    -- Consecutive runs that ended abnormally without recording a step.
    resume_failures INTEGER NOT NULL DEFAULT 0 CHECK (resume_failures >= 0),
    -- How many steps were recorded when the execution was last claimed: a run that ends with
    -- no more made no progress.
    steps_at_open   INTEGER NOT NULL DEFAULT 0 CHECK (steps_at_open >= 0),
    last_failure    TEXT    CHECK (last_failure IS NULL OR json_valid(last_failure))
) STRICT, WITHOUT ROWID;
-- Serves the due pass's deadline scan and the earliest deadline (`min(deadline_at)`).
CREATE INDEX runtime_deadlines ON runtime_executions (deadline_at)
    WHERE deadline_at IS NOT NULL;

-- One row per named queue: the concurrency limit every process on this file agrees on.
CREATE TABLE queues (
    queue           TEXT    PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 128),
    concurrency_max INTEGER CHECK (concurrency_max IS NULL OR concurrency_max >= 1),
    updated_at      TEXT    NOT NULL
) STRICT;

-- Every (kind, version) some process has registered: tells an unknown kind from a kind served
-- elsewhere, and names kinds in the recovery report.
CREATE TABLE workflow_kinds (
    kind                TEXT    NOT NULL CHECK (length(kind) BETWEEN 1 AND 128),
    version             INTEGER NOT NULL CHECK (version >= 1),
    first_registered_at TEXT    NOT NULL,
    last_registered_at  TEXT    NOT NULL,
    PRIMARY KEY (kind, version)
) STRICT, WITHOUT ROWID;

-- A deduplication key names an unfinished execution of its queue.
CREATE TABLE dedup_keys (
    -- '' when the execution has no queue.
    queue        TEXT NOT NULL,
    key          TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 256),
    execution_id TEXT NOT NULL REFERENCES executions (execution_id) ON DELETE CASCADE,
    PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;
-- Serves the delete at finalize and cancel, and the cascade.
CREATE INDEX dedup_keys_by_execution ON dedup_keys (execution_id);

-- Messages sent to executions (`send`), consumed by their `recv` steps.
CREATE TABLE messages (
    -- Arrival order: FIFO per topic, and the watcher's "messages since id" cursor.
    id              INTEGER PRIMARY KEY,
    execution_id    TEXT    NOT NULL REFERENCES executions (execution_id) ON DELETE CASCADE,
    topic           TEXT    NOT NULL CHECK (length(topic) BETWEEN 1 AND 256),
    payload         TEXT    NOT NULL CHECK (json_valid(payload)),
    -- Keys are per receiver: a repeated key is not delivered twice.
    idempotency_key TEXT    CHECK (idempotency_key IS NULL
                                   OR length(idempotency_key) BETWEEN 1 AND 256),
    sent_at         TEXT    NOT NULL,
    -- The recv step that consumed it. Consumed rows are kept, so `durably show` and the crash
    -- checker see which step took which message.
    consumed_seq    INTEGER CHECK (consumed_seq IS NULL OR consumed_seq >= 0),
    consumed_at     TEXT,
    CHECK ((consumed_seq IS NULL) = (consumed_at IS NULL))
) STRICT;
-- Serves recv: the first pending message of (execution, topic).
CREATE INDEX messages_pending ON messages (execution_id, topic, id) WHERE consumed_seq IS NULL;
-- Serves send's idempotency check, and makes a repeated key impossible to insert.
CREATE UNIQUE INDEX messages_by_key ON messages (execution_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- One message per recv step: a step can never consume two.
CREATE UNIQUE INDEX messages_consumed ON messages (execution_id, consumed_seq)
    WHERE consumed_seq IS NOT NULL;
-- Serves `durably show` (an execution's messages in arrival order) and the cascade.
CREATE INDEX messages_by_execution ON messages (execution_id, id);

-- Values published by `set_event`, read by `get_event` and `durably show`. ("events" is the
-- journal's audit log.) The primary key serves get_event, show and the cascade.
CREATE TABLE workflow_events (
    execution_id TEXT    NOT NULL REFERENCES executions (execution_id) ON DELETE CASCADE,
    key          TEXT    NOT NULL CHECK (length(key) BETWEEN 1 AND 256),
    value        TEXT    NOT NULL CHECK (json_valid(value)),
    -- The step that set it.
    seq          INTEGER NOT NULL CHECK (seq >= 0),
    set_at       TEXT    NOT NULL,
    PRIMARY KEY (execution_id, key)
) STRICT, WITHOUT ROWID;
