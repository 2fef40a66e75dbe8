-- durably-runtime on PostgreSQL, baseline: the schema SQLite reaches after the runtime's
-- migrations 0001 to 0003 (schema/runtime/0001_runtime.sql, 0002_children.sql,
-- 0003_patches_and_forks.sql), in one file, with the wake-up triggers of the runtime's tables.
-- It equals runtime version 3: the INSERT at the end records it in the journal's
-- `schema_versions` under the owner `runtime`, in the transaction that creates the tables.
-- Every later runtime migration carries its PostgreSQL SQL beside its SQLite SQL.
-- Needs the journal's baseline (schema/postgres/0001_journal.sql and notify.sql).
--
-- Types as in schema/postgres/0001_journal.sql: text `COLLATE "C"`, `timestamptz`, payloads
-- `json` (validated on write and kept byte for byte), `bigint`. Names, topics and keys are
-- validated in Rust (1 to 256 bytes of UTF-8, no control characters; queues and kinds 1 to
-- 128); the CHECKs below bound only their length, as the last line of defence. Every child
-- table of `executions` has an index led by `execution_id`, so the retention sweep's cascading
-- deletes seek instead of scanning.

-- One row per execution started through the runtime; hand-driven executions have none.
CREATE TABLE runtime_executions (
    execution_id        text COLLATE "C" PRIMARY KEY
                        REFERENCES executions (execution_id) ON DELETE CASCADE,
    -- The version of the workflow kind the execution was started with.
    version             bigint      NOT NULL CHECK (version >= 1),
    -- When the execution is cancelled with reason `timeout`; cleared when it ends.
    deadline_at         timestamptz,
    dedup_key           text COLLATE "C",
    -- Consecutive runs that ended abnormally without recording a step.
    resume_failures     bigint      NOT NULL DEFAULT 0 CHECK (resume_failures >= 0),
    -- How many steps were recorded when the execution was last claimed: a run that ends with
    -- no more made no progress.
    steps_at_open       bigint      NOT NULL DEFAULT 0 CHECK (steps_at_open >= 0),
    last_failure        json,
    -- Child executions (runtime 0002): the parent and the parent's step (seq) that started
    -- this one; set together. No foreign key on the parent: with the runtime's deferred open,
    -- the step that starts a child may be the parent's first write, whose own row is inserted
    -- later in the same transaction; and a child outlives a parent the retention sweep removed.
    parent_execution_id text COLLATE "C",
    parent_seq          bigint      CHECK (parent_seq IS NULL OR parent_seq >= 0),
    -- Forks (runtime 0003): the original's id, and the seq before which the original's steps
    -- were copied. Both NULL for an execution that is no fork. No foreign key: the link
    -- outlives the original's deletion by retention, as its events do.
    forked_from         text COLLATE "C",
    fork_seq            bigint      CHECK (fork_seq IS NULL OR fork_seq >= 0)
);
-- Serves the due pass's deadline scan and the earliest deadline (`min(deadline_at)`).
CREATE INDEX runtime_deadlines ON runtime_executions (deadline_at)
    WHERE deadline_at IS NOT NULL;
-- Serves "the children of an execution" (the cancel cascade, `durably show`, `durably ls
-- --parent`, the `runtime_children` view): led by the parent, in start order.
CREATE INDEX runtime_children_by_parent ON runtime_executions (parent_execution_id, parent_seq)
    WHERE parent_execution_id IS NOT NULL;
-- Serves `durably show`'s list of an execution's forks.
CREATE INDEX runtime_executions_by_fork ON runtime_executions (forked_from)
    WHERE forked_from IS NOT NULL;

-- One row per named queue: the concurrency limit every process on this database agrees on.
CREATE TABLE queues (
    queue           text COLLATE "C" PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 128),
    concurrency_max bigint      CHECK (concurrency_max IS NULL OR concurrency_max >= 1),
    updated_at      timestamptz NOT NULL
);

-- Every (kind, version) some process has registered: tells an unknown kind from a kind served
-- elsewhere, and names kinds in the recovery report.
CREATE TABLE workflow_kinds (
    kind                text COLLATE "C" NOT NULL CHECK (length(kind) BETWEEN 1 AND 128),
    version             bigint      NOT NULL CHECK (version >= 1),
    first_registered_at timestamptz NOT NULL,
    last_registered_at  timestamptz NOT NULL,
    PRIMARY KEY (kind, version)
);

-- A deduplication key names an unfinished execution of its queue.
CREATE TABLE dedup_keys (
    -- '' when the execution has no queue.
    queue        text COLLATE "C" NOT NULL,
    key          text COLLATE "C" NOT NULL CHECK (length(key) BETWEEN 1 AND 256),
    execution_id text COLLATE "C" NOT NULL
                 REFERENCES executions (execution_id) ON DELETE CASCADE,
    PRIMARY KEY (queue, key)
);
-- Serves the delete at finalize and cancel, and the cascade.
CREATE INDEX dedup_keys_by_execution ON dedup_keys (execution_id);

-- Messages sent to executions (`send`), consumed by their `recv` steps.
CREATE TABLE messages (
    -- Arrival order: FIFO per topic, and the watcher's "messages since id" cursor.
    id              bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    execution_id    text COLLATE "C" NOT NULL
                    REFERENCES executions (execution_id) ON DELETE CASCADE,
    topic           text COLLATE "C" NOT NULL CHECK (length(topic) BETWEEN 1 AND 256),
    payload         json        NOT NULL,
    -- Keys are per receiver: a repeated key is not delivered twice.
    idempotency_key text COLLATE "C" CHECK (idempotency_key IS NULL
                                          OR length(idempotency_key) BETWEEN 1 AND 256),
    sent_at         timestamptz NOT NULL,
    -- The recv step that consumed it. Consumed rows are kept, so `durably show` and the crash
    -- checker see which step took which message.
    consumed_seq    bigint      CHECK (consumed_seq IS NULL OR consumed_seq >= 0),
    consumed_at     timestamptz,
    CHECK ((consumed_seq IS NULL) = (consumed_at IS NULL))
);
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
    execution_id text COLLATE "C" NOT NULL
                 REFERENCES executions (execution_id) ON DELETE CASCADE,
    key          text COLLATE "C" NOT NULL CHECK (length(key) BETWEEN 1 AND 256),
    value        json        NOT NULL,
    -- The step that set it.
    seq          bigint      NOT NULL CHECK (seq >= 0),
    set_at       timestamptz NOT NULL,
    PRIMARY KEY (execution_id, key)
);

-- One row per (execution, patch id) the execution has asked `patched` about (runtime 0003):
-- the answer it got, and the step position it got it at. A recorded answer is returned first
-- on every later run, so an execution's answer never flips. A `true` row commits with its
-- marker step (`durably:patch/<id>`) or, when the marker was already recorded, on the run that
-- met it; a `false` row is written when the execution met another recorded step at that
-- position (it passed this point on code without the patch).
CREATE TABLE runtime_patches (
    execution_id text COLLATE "C" NOT NULL
                 REFERENCES executions (execution_id) ON DELETE CASCADE,
    patch_id     text COLLATE "C" NOT NULL CHECK (length(patch_id) BETWEEN 1 AND 256),
    -- 0 or 1, as on SQLite, so the same queries compare it with numbers.
    answer       bigint      NOT NULL CHECK (answer IN (0, 1)),
    -- The execution's next step seq when it asked: the marker's seq for a `true` answer.
    seq          bigint      NOT NULL CHECK (seq >= 0),
    decided_at   timestamptz NOT NULL,
    PRIMARY KEY (execution_id, patch_id)
);
-- Serves `durably patches PATCH` and the `patch_answers` view: the unfinished executions that
-- answered false to a patch. The primary key serves `patched`'s lookup and the cascade.
CREATE INDEX runtime_patches_by_patch ON runtime_patches (patch_id, answer);

-- Wake-ups (schema/postgres/notify.sql): a message may wake its receiver, a workflow event a
-- waiter on it (an upsert fires both the INSERT and the UPDATE trigger), and a queue's new
-- limit may let a claimer take more. Once per statement: the payload names only the table.
CREATE OR REPLACE TRIGGER messages_notify_insert
    AFTER INSERT ON messages
    FOR EACH STATEMENT EXECUTE FUNCTION durably_notify();
CREATE OR REPLACE TRIGGER workflow_events_notify_write
    AFTER INSERT OR UPDATE ON workflow_events
    FOR EACH STATEMENT EXECUTE FUNCTION durably_notify();
CREATE OR REPLACE TRIGGER queues_notify_write
    AFTER INSERT OR UPDATE ON queues
    FOR EACH STATEMENT EXECUTE FUNCTION durably_notify();

INSERT INTO schema_versions (owner, version) VALUES ('runtime', 3);
