-- durably-journal on PostgreSQL: wake-ups by NOTIFY (docs/lab/postgres-plan.md §5).
--
-- SQLite has no counterpart file: there the runtime's watcher polls `PRAGMA data_version`,
-- which changes on every commit of another connection. Here the rows that can make a parked
-- execution runnable notify channel `durably_<schema>` (the schema of the table written, cut to
-- the 63 bytes of an identifier, as LISTEN cuts the name it is given), with the table's name as
-- the payload; the journal's LISTEN connection bumps the runtime's change counter on each one,
-- and polls once a second besides, so a lost notification delays a wake-up and loses nothing.
--
-- Step writes never notify: NOTIFY takes a database-wide lock at commit, which would serialize
-- concurrent step writes. Only these notify: a new execution, a change of an execution's
-- status, `due_at` or `cancel_requested_at` (here), and in the runtime's schema a new message,
-- a set workflow event and a queue's limit (schema/postgres/runtime/0001_runtime.sql). A
-- notification is sent at commit, never for a rolled-back write, and PostgreSQL folds identical
-- ones of one transaction into one.
--
-- Applied with the journal's baseline, after schema/postgres/0001_journal.sql and before any
-- crate's migrations (their triggers call the function). Every statement replaces what it
-- defines, so the file applies again to a schema that has it.

-- The trigger function of every durably wake-up trigger, row or statement level.
CREATE OR REPLACE FUNCTION durably_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(left('durably_' || TG_TABLE_SCHEMA, 63), TG_TABLE_NAME);
    RETURN NULL;
END;
$$;

-- A started (or queued) execution: a claimer may take it. Once per statement.
CREATE OR REPLACE TRIGGER executions_notify_insert
    AFTER INSERT ON executions
    FOR EACH STATEMENT EXECUTE FUNCTION durably_notify();

-- A status change (a run ended, a claim, a park, a wake), a new wake time, or a cancel
-- request. The step writes' own updates of `executions` (updated_at, opens) match none of
-- these and stay silent.
CREATE OR REPLACE TRIGGER executions_notify_update
    AFTER UPDATE ON executions
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          OR OLD.due_at IS DISTINCT FROM NEW.due_at
          OR OLD.cancel_requested_at IS DISTINCT FROM NEW.cancel_requested_at)
    EXECUTE FUNCTION durably_notify();
