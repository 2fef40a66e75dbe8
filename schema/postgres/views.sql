-- durably-journal on PostgreSQL: the views of schema/views.sql, for people at the psql prompt
-- (see docs/operations.md). Same names, same columns, same meaning and order as SQLite's.
--
-- Not a numbered migration: the journal recreates these views after its migrations, in the
-- transaction of its last migration pass, when the blake3 of this file differs from the
-- `views_sha` of its `schema_versions` row. Each view is dropped (CASCADE: a view a person
-- built on it goes too) before it is created, so the file applies to any schema.
--
-- They only read. Where SQLite's SQL has no PostgreSQL twin:
-- * `julianday(a) - julianday(b)` in days is `extract(epoch FROM a - b)` in seconds. Durations
--   stay `numeric` (SQLite's are REAL), so `round(avg(duration_s), 3)` works at the prompt as
--   it does in sqlite3 (PostgreSQL has no `round(double precision, int)`);
-- * `json_extract(x, '$.k')` is `x ->> 'k'` (text; CAST where a number is compared);
-- * `sum(bool)` is `count(*) FILTER (WHERE ...)`, and a `sum` of integers is cast back to
--   `bigint` (PostgreSQL sums `bigint` into `numeric`);
-- * grouping by `executions.id`, the primary key, lets the other columns of the row be
--   selected (PostgreSQL derives that only from a primary key, not from the unique
--   `execution_id`).
-- Timestamps show as `timestamptz`, payloads as their JSON text, so `->>` works on them.
-- Nothing here judges whether a process is alive: `durably locks` judges each holder.

-- One row per execution with its step counts by state and how long it ran (or has run so far:
-- `duration_s` of an unfinished execution counts up to its last change). Newest first.
-- `status_detail` says why it is in its status (the step awaiting an operator, why it is
-- stuck), `queue` is its runtime queue, and `cancel_requested_at` is set while a cancel waits
-- for the process that holds it.
DROP VIEW IF EXISTS execution_summary CASCADE;
CREATE VIEW execution_summary AS
SELECT e.execution_id,
       e.kind,
       e.name,
       e.status,
       e.status_detail,
       e.queue,
       e.cancel_requested_at,
       e.opens,
       count(s.seq)                                   AS steps,
       count(*) FILTER (WHERE s.state = 'completed')  AS steps_completed,
       count(*) FILTER (WHERE s.state = 'failed')     AS steps_failed,
       count(*) FILTER (WHERE s.state = 'skipped')    AS steps_skipped,
       count(*) FILTER (WHERE s.state = 'intent')     AS steps_ambiguous,
       CAST(coalesce(sum(s.attempts), 0) AS bigint)   AS attempts,
       e.created_at,
       e.finalized_at,
       round(extract(epoch FROM coalesce(e.finalized_at, e.updated_at) - e.created_at), 3)
                                                      AS duration_s,
       e.input,
       e.output,
       e.error
FROM executions AS e
LEFT JOIN steps AS s ON s.execution_id = e.execution_id
GROUP BY e.id
ORDER BY e.created_at DESC;

-- Guarded steps with an intent and no result: the ambiguous window. With `holder_pid` NULL the
-- step is stuck (its process died): its policy decides on the next run, and under the `fail`
-- policy an operator answers with `durably resolve`. With a holder, a live process may simply be
-- running the effect right now.
DROP VIEW IF EXISTS ambiguous_steps CASCADE;
CREATE VIEW ambiguous_steps AS
SELECT s.execution_id,
       e.name                                         AS execution_name,
       e.status                                       AS execution_status,
       s.seq,
       s.name                                         AS step,
       s.policy,
       s.attempts,
       s.idempotency_key,
       s.intent_at,
       round(extract(epoch FROM now() - s.intent_at), 1) AS waiting_s,
       l.pid                                          AS holder_pid,
       l.acquired_at                                  AS held_since
FROM steps AS s
JOIN executions AS e ON e.execution_id = s.execution_id
LEFT JOIN locks AS l ON l.resource = s.execution_id AND l.instance_id IS NOT NULL
WHERE s.state = 'intent'
ORDER BY s.intent_at;

-- Steps an operator must answer: the guarded step in the ambiguous window of each execution
-- whose status is `awaiting_operator` (its policy is Fail, or it was re-run after crashes
-- `ambiguous_reruns_max` times). No process reopens such an execution until `durably resolve`
-- answers the step. `reason` is `policy_fail` or `reruns_exhausted`; `since` is when the
-- execution began to wait.
DROP VIEW IF EXISTS awaiting_operator CASCADE;
CREATE VIEW awaiting_operator AS
SELECT e.execution_id,
       e.name                                         AS execution_name,
       s.seq,
       s.name                                         AS step,
       s.policy,
       e.status_detail ->> 'reason'                   AS reason,
       s.attempts,
       s.idempotency_key,
       s.intent_at,
       e.updated_at                                   AS since
FROM executions AS e
JOIN steps AS s ON s.execution_id = e.execution_id
               AND s.seq = CAST(e.status_detail ->> 'seq' AS bigint)
WHERE e.status = 'awaiting_operator' AND s.state = 'intent'
ORDER BY e.updated_at;

-- Held locks with their holder's identity and the execution they guard. Whether the holder is
-- still alive is judged by `durably locks` (liveness file, boot id, pid and start time), not
-- here; `heartbeat_at` only matters for holders that opted into a lease (`lease_ms`).
DROP VIEW IF EXISTS lock_holders CASCADE;
CREATE VIEW lock_holders AS
SELECT l.resource,
       e.name                                         AS execution_name,
       e.status                                       AS execution_status,
       l.pid,
       l.hostname,
       l.acquired_at,
       l.heartbeat_at,
       l.lease_ms,
       l.epoch,
       l.instance_id,
       l.boot_id,
       l.start_time
FROM locks AS l
LEFT JOIN executions AS e ON e.execution_id = l.resource
WHERE l.instance_id IS NOT NULL
ORDER BY l.acquired_at;

-- The audit trail, newest first, with the execution's and step's names: takeovers, orphan
-- reclaims, ambiguity decisions (skipped, retried, failed, reconciled), failed attempts,
-- operator resolutions and cancels. `detail` is JSON built from ids, names and reasons.
DROP VIEW IF EXISTS recent_events CASCADE;
CREATE VIEW recent_events AS
SELECT ev.id,
       ev.at,
       ev.kind,
       ev.execution_id,
       e.name                                         AS execution_name,
       ev.seq,
       s.name                                         AS step,
       ev.detail
FROM events AS ev
LEFT JOIN executions AS e ON e.execution_id = ev.execution_id
LEFT JOIN steps AS s ON s.execution_id = ev.execution_id AND s.seq = ev.seq
ORDER BY ev.id DESC;
