-- durably-runtime on PostgreSQL: the views of schema/runtime/views.sql, for people at the psql
-- prompt (see docs/operations.md). Same names, same columns, same meaning and order as SQLite's.
--
-- Not a numbered migration: building a `Client` or a `Runtime` recreates these views after
-- the runtime's migrations when the blake3 of this file differs from the `views_sha` of the
-- runtime's `schema_versions` row (see schema/postgres/views.sql for the journal's own). Payloads
-- appear only as sizes in bytes and 96-character previews, the same previews `durably show`
-- prints. Where SQLite's SQL has no PostgreSQL twin:
-- * a payload's size, `length(CAST(p AS BLOB))`, is `octet_length(p::text)`: bytes, as the
--   `json` column keeps the text as sent; `substr` counts characters on both;
-- * SQLite sorts NULL first in ascending order and PostgreSQL last, so an ascending ORDER BY
--   on a column that may be NULL says NULLS FIRST;
-- * `unfinished` is a boolean (SQLite's 0 or 1), so `WHERE unfinished` reads both.

-- Every message, newest first: who it was sent to, on which topic, and whether a recv step
-- consumed it.
DROP VIEW IF EXISTS runtime_messages CASCADE;
CREATE VIEW runtime_messages AS
SELECT m.id,
       m.execution_id,
       m.topic,
       m.sent_at,
       m.idempotency_key,
       m.consumed_seq,
       m.consumed_at,
       CAST(octet_length(m.payload::text) AS bigint) AS bytes,
       substr(m.payload::text, 1, 96)                AS preview
FROM messages AS m
ORDER BY m.id DESC;

-- Every workflow event (set_event), newest first, with the step that set it.
DROP VIEW IF EXISTS runtime_events CASCADE;
CREATE VIEW runtime_events AS
SELECT w.execution_id,
       w.key,
       w.seq,
       w.set_at,
       CAST(octet_length(w.value::text) AS bigint) AS bytes,
       substr(w.value::text, 1, 96)                AS preview
FROM workflow_events AS w
ORDER BY w.set_at DESC, w.execution_id, w.key;

-- Executions waiting to be claimed, in the order a claim takes them: per queue, larger
-- priority first, then first started first. `position` 1 is claimed next. Executions with a
-- future `not_before` (a `due_at`) are not yet claimable and not listed.
DROP VIEW IF EXISTS queue_positions CASCADE;
CREATE VIEW queue_positions AS
SELECT e.queue,
       row_number() OVER (PARTITION BY e.queue ORDER BY e.priority DESC, e.id) AS position,
       e.execution_id,
       e.kind,
       e.priority,
       e.created_at
FROM executions AS e
WHERE e.status = 'queued' AND e.due_at IS NULL
ORDER BY e.queue NULLS FIRST, position;

-- Per configured queue: its limit across all processes, and how many of its executions are
-- running, queued and waiting now.
DROP VIEW IF EXISTS queue_load CASCADE;
CREATE VIEW queue_load AS
SELECT q.queue,
       q.concurrency_max,
       (SELECT count(*) FROM executions AS e
        WHERE e.queue = q.queue AND e.status = 'running') AS running,
       (SELECT count(*) FROM executions AS e
        WHERE e.queue = q.queue AND e.status = 'queued')  AS queued,
       (SELECT count(*) FROM executions AS e
        WHERE e.queue = q.queue AND e.status = 'waiting') AS waiting,
       q.updated_at
FROM queues AS q
ORDER BY q.queue;

-- Parked executions waiting for a time or a message: when they wake at the latest, the topic
-- they wait for, and how many messages on it are already pending (a pending message wakes the
-- execution at once, so a count above 0 lasts only until the next claim).
DROP VIEW IF EXISTS waiting_executions CASCADE;
CREATE VIEW waiting_executions AS
SELECT e.execution_id,
       e.kind,
       e.due_at,
       e.wait_topic,
       (SELECT count(*) FROM messages AS m
        WHERE m.execution_id = e.execution_id AND m.topic = e.wait_topic
          AND m.consumed_seq IS NULL) AS pending_messages,
       e.status_detail
FROM executions AS e
WHERE e.status = 'waiting'
ORDER BY e.due_at NULLS FIRST, e.execution_id;

-- Child executions (`start_child`): per parent, in the order its steps started them, with the
-- child's kind and status now. A child's own children are listed under it as parent.
DROP VIEW IF EXISTS runtime_children CASCADE;
CREATE VIEW runtime_children AS
SELECT r.parent_execution_id AS parent_id,
       r.parent_seq          AS seq,
       r.execution_id        AS child_id,
       e.kind,
       e.status,
       e.queue,
       e.created_at,
       e.finalized_at
FROM runtime_executions AS r
JOIN executions AS e ON e.execution_id = r.execution_id
WHERE r.parent_execution_id IS NOT NULL
ORDER BY r.parent_execution_id, r.parent_seq;

-- Every recorded answer of `patched`, with the execution's status now: the unfinished
-- executions that answered 0 still run a patch's old branch (see `durably patches PATCH`).
DROP VIEW IF EXISTS patch_answers CASCADE;
CREATE VIEW patch_answers AS
SELECT p.patch_id,
       p.execution_id,
       p.answer,
       p.seq,
       p.decided_at,
       e.kind,
       e.status,
       e.status NOT IN ('completed', 'failed', 'cancelled') AS unfinished
FROM runtime_patches AS p
JOIN executions AS e ON e.execution_id = p.execution_id
ORDER BY p.patch_id, p.answer, p.execution_id;

-- Every fork, with its original: the seq before which it copied the original's steps, and
-- both statuses now.
DROP VIEW IF EXISTS forks CASCADE;
CREATE VIEW forks AS
SELECT r.execution_id,
       r.forked_from,
       r.fork_seq,
       r.version,
       e.status,
       o.status AS original_status
FROM runtime_executions AS r
JOIN executions AS e ON e.execution_id = r.execution_id
LEFT JOIN executions AS o ON o.execution_id = r.forked_from
WHERE r.forked_from IS NOT NULL
ORDER BY e.created_at DESC;
