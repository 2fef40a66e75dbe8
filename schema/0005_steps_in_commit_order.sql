-- durably-journal: `steps` stored in commit order.
--
-- 0002 made `steps` a WITHOUT ROWID table keyed on (execution_id, seq): every running
-- execution grew its own leaf page, so a group commit serving N executions at once wrote about
-- N table pages. Stored by rowid, new steps append to the table's last pages and only the
-- (execution_id, seq) index, whose entries are a tenth of a row, grows in N places: a commit of
-- 64 concurrent executions writes about half the WAL bytes (docs/performance.md).
--
-- Rows already written are copied in (execution_id, seq) order, the old table's own, so the
-- copy needs no sort. `id` only records the order rows were inserted in; steps are still found
-- and numbered by (execution_id, seq), which stays unique. The journal's views are dropped
-- first: SQLite refuses to rename a table while a view names a table that does not exist. The
-- open that runs this migration creates them again from schema/views.sql once the migrations
-- are done. The scheduler's `fire_ledger` does not read `steps` and stays.
--
-- The CHECKs on `effect`, `policy` and `state` allow the same words as 0002's, spelled as `=`
-- chains: SQLite evaluates `x IN ('a', 'b', 'c')` in a CHECK by building a temporary b-tree of
-- the list for every row it writes, about 7 µs of a step write's 30.
DROP VIEW IF EXISTS execution_summary;
DROP VIEW IF EXISTS ambiguous_steps;
DROP VIEW IF EXISTS lock_holders;
DROP VIEW IF EXISTS recent_events;

CREATE TABLE steps_in_commit_order (
    -- Insertion order across all executions; not part of any key.
    id              INTEGER PRIMARY KEY,
    execution_id    TEXT    NOT NULL REFERENCES executions (execution_id) ON DELETE CASCADE,
    -- Call order within the execution: 0, 1, 2, ...
    seq             INTEGER NOT NULL CHECK (seq >= 0),
    name            TEXT    NOT NULL,
    effect          TEXT    NOT NULL
                    CHECK (effect = 'pure' OR effect = 'idempotent' OR effect = 'guarded'),
    -- The ambiguity policy of a guarded step; NULL for pure and idempotent steps.
    policy          TEXT    CHECK (policy = 'skip' OR policy = 'retry' OR policy = 'fail'
                                   OR policy = 'reconcile'),
    -- 'intent' with no result is the ambiguous window: the effect may or may not have happened.
    state           TEXT    NOT NULL
                    CHECK (state = 'intent' OR state = 'completed' OR state = 'failed'
                           OR state = 'skipped'),
    idempotency_key TEXT    NOT NULL,
    result          TEXT    CHECK (result IS NULL OR json_valid(result)),
    error           TEXT    CHECK (error IS NULL OR json_valid(error)),
    -- Times the closure was started for this step, across retries and restarts.
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    intent_at       TEXT,
    result_at       TEXT,
    CHECK ((effect = 'guarded') = (policy IS NOT NULL)),
    CHECK ((state = 'intent') = (result_at IS NULL))
) STRICT;

INSERT INTO steps_in_commit_order
       (execution_id, seq, name, effect, policy, state, idempotency_key, result, error,
        attempts, intent_at, result_at)
SELECT execution_id, seq, name, effect, policy, state, idempotency_key, result, error,
       attempts, intent_at, result_at
FROM steps;

DROP TABLE steps;
ALTER TABLE steps_in_commit_order RENAME TO steps;

-- Finds an execution's steps in call order (replay, `durably show`), keeps (execution_id, seq)
-- unique, and serves the cascade delete of the retention sweep.
CREATE UNIQUE INDEX steps_by_execution ON steps (execution_id, seq);
