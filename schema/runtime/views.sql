-- durably-runtime: views of the runtime's tables for people at the sqlite3 prompt (see
-- docs/inspecting.md).
--
-- Not a numbered migration: building a `Client` or a `Runtime` recreates these views after
-- the runtime's migrations, unless the file already holds exactly these definitions (see
-- schema/views.sql for the journal's own). They show sizes and 96-character previews, the
-- same previews `durably show` prints.

-- Every message, newest first: who it was sent to, on which topic, and whether a recv step
-- consumed it.
DROP VIEW IF EXISTS runtime_messages;
CREATE VIEW runtime_messages AS
SELECT m.id,
       m.execution_id,
       m.topic,
       m.sent_at,
       m.idempotency_key,
       m.consumed_seq,
       m.consumed_at,
       length(m.payload)          AS bytes,
       substr(m.payload, 1, 96)   AS preview
FROM messages AS m
ORDER BY m.id DESC;

-- Every workflow event (set_event), newest first, with the step that set it.
DROP VIEW IF EXISTS runtime_events;
CREATE VIEW runtime_events AS
SELECT w.execution_id,
       w.key,
       w.seq,
       w.set_at,
       length(w.value)            AS bytes,
       substr(w.value, 1, 96)     AS preview
FROM workflow_events AS w
ORDER BY w.set_at DESC, w.execution_id, w.key;
