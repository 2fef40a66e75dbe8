-- durably-journal: executions, their steps, and the audit trail.
--
-- Timestamps are TEXT, RFC 3339 UTC with milliseconds and a `Z`. Ids are canonical hyphenated
-- UUIDs. Payloads are JSON TEXT so `json_extract` works at the sqlite3 prompt.
CREATE TABLE executions (
    execution_id TEXT    PRIMARY KEY,
    kind         TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    status       TEXT    NOT NULL
                 CHECK (status IN ('running', 'completed', 'failed', 'cancelled', 'interrupted')),
    input        TEXT    NOT NULL CHECK (json_valid(input)),
    output       TEXT    CHECK (output IS NULL OR json_valid(output)),
    error        TEXT    CHECK (error IS NULL OR json_valid(error)),
    -- How many times the execution has been opened: 1 on the first run, more on each resume.
    opens        INTEGER NOT NULL DEFAULT 1 CHECK (opens >= 1),
    created_at   TEXT    NOT NULL,
    updated_at   TEXT    NOT NULL,
    finalized_at TEXT,
    CHECK ((status IN ('completed', 'failed', 'cancelled')) = (finalized_at IS NOT NULL))
) STRICT;

-- Serves `recoverable()` (status = 'running' / 'interrupted') and the retention sweep
-- (status = ? AND finalized_at < ? ORDER BY finalized_at LIMIT ?).
CREATE INDEX executions_by_status ON executions (status, finalized_at);
-- Serves `durably ls`: newest first.
CREATE INDEX executions_by_created ON executions (created_at);

CREATE TABLE steps (
    execution_id    TEXT    NOT NULL REFERENCES executions (execution_id) ON DELETE CASCADE,
    -- Call order within the execution: 0, 1, 2, ...
    seq             INTEGER NOT NULL CHECK (seq >= 0),
    name            TEXT    NOT NULL,
    effect          TEXT    NOT NULL CHECK (effect IN ('pure', 'idempotent', 'guarded')),
    -- The ambiguity policy of a guarded step; NULL for pure and idempotent steps.
    policy          TEXT    CHECK (policy IN ('skip', 'retry', 'fail', 'reconcile')),
    -- 'intent' with no result is the ambiguous window: the effect may or may not have happened.
    state           TEXT    NOT NULL CHECK (state IN ('intent', 'completed', 'failed', 'skipped')),
    idempotency_key TEXT    NOT NULL,
    result          TEXT    CHECK (result IS NULL OR json_valid(result)),
    error           TEXT    CHECK (error IS NULL OR json_valid(error)),
    -- Times the closure was started for this step, across retries and restarts.
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    intent_at       TEXT,
    result_at       TEXT,
    PRIMARY KEY (execution_id, seq),
    CHECK ((effect = 'guarded') = (policy IS NOT NULL)),
    CHECK ((state = 'intent') = (result_at IS NULL))
) STRICT, WITHOUT ROWID;

-- Audit trail: ambiguity resolutions, takeovers, sweeps, cancels, operator resolves, retries.
CREATE TABLE events (
    id           INTEGER PRIMARY KEY,
    at           TEXT    NOT NULL,
    -- NULL for events that concern no single execution (a sweep summary).
    execution_id TEXT    REFERENCES executions (execution_id) ON DELETE CASCADE,
    seq          INTEGER,
    kind         TEXT    NOT NULL,
    detail       TEXT    NOT NULL CHECK (json_valid(detail))
) STRICT;

-- Serves `durably show` and the cascade delete of the retention sweep.
CREATE INDEX events_by_execution ON events (execution_id, id);
