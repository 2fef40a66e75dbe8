-- durably-scheduler: views of the slot ledger for people at the sqlite3 prompt (see
-- docs/operations.md).
--
-- Not a numbered migration: building a `Scheduler` recreates these views after the
-- scheduler's migrations, unless the file already holds exactly these definitions (see
-- schema/views.sql for the journal's own). They read the journal's `executions` table for the
-- status of each fire's execution; the scheduler's code reads it only through this view (its
-- counts per state) and the journal's `execution_status`, never with SQL of its own.

-- The scheduler's slot ledger: one row per (job, slot) fire, newest slot first, with the
-- state of the execution that ran it and how long the fire took. `state` is the fire's state
-- as of now: a started fire whose execution has ended shows that end even before a scheduler
-- pass copies it into `fires.state`.
DROP VIEW IF EXISTS fire_ledger;
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
       round((julianday(f.finished_at) - julianday(f.started_at)) * 86400.0, 3) AS duration_s
FROM fires AS f
LEFT JOIN executions AS e ON e.execution_id = f.execution_id
ORDER BY f.slot_ms DESC, f.job;
