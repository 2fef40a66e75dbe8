-- durably-scheduler on PostgreSQL: the view of schema/scheduler/views.sql, for people at the
-- psql prompt (see docs/operations.md). Same name, same columns, same meaning and order.
--
-- Not a numbered migration: building a `Scheduler` recreates it after the scheduler's
-- migrations when the blake3 of this file differs from the `views_sha` of the scheduler's
-- `schema_versions` row (see schema/postgres/views.sql for the journal's own). It reads the
-- journal's `executions` table for the status of each fire's execution. `duration_s` is
-- `extract(epoch FROM a - b)` where SQLite has `julianday(a) - julianday(b)` days, rounded the
-- the same way; it stays `numeric` (SQLite's is REAL) so `round` works on it at the prompt.

-- The scheduler's slot ledger: one row per (job, slot) fire, newest slot first, with the
-- state of the execution that ran it and how long the fire took. `state` is the fire's state
-- as of now: a started fire whose execution has ended shows that end even before a scheduler
-- pass copies it into `fires.state`.
DROP VIEW IF EXISTS fire_ledger CASCADE;
CREATE VIEW fire_ledger AS
SELECT f.job,
       f.slot,
       -- A started fire's state follows its execution until a scheduler copies the end in.
       CASE
           WHEN f.state = 'running' AND e.status IN ('completed', 'failed') THEN e.status
           WHEN f.state = 'running' AND e.status = 'cancelled' THEN 'skipped'
           ELSE f.state
       END                                            AS state,
       f.attempts,
       f.execution_id,
       e.status                                       AS execution_status,
       f.reason,
       f.registered_at,
       f.started_at,
       f.finished_at,
       round(extract(epoch FROM f.finished_at - f.started_at), 3) AS duration_s
FROM fires AS f
LEFT JOIN executions AS e ON e.execution_id = f.execution_id
ORDER BY f.slot_ms DESC, f.job;
