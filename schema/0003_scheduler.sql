-- durably-scheduler: the job registry and the slot ledger, in the journal's own database.
--
-- A fire is one (job, slot) pair. Its execution id is derived from the pair (see
-- docs/design.md, "Fire ids"), so every scheduler process that reaches the same slot names the
-- same execution, and the journal's exclusive open lets exactly one of them run it.
CREATE TABLE jobs (
    job             TEXT    PRIMARY KEY,
    -- The job's definition as JSON: schedule, catch-up, overlap, ambiguity policy, retries.
    definition      TEXT    NOT NULL CHECK (json_valid(definition)),
    -- blake3 of the canonical definition; a change is detected on registration.
    definition_hash TEXT    NOT NULL,
    registered_at   TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,
    -- The newest slot any scheduler process has registered for this job (the high-water
    -- mark that stops a clock jumped backward from firing a slot twice).
    last_slot       TEXT,
    last_slot_ms    INTEGER
) STRICT;

CREATE TABLE fires (
    job           TEXT    NOT NULL REFERENCES jobs (job) ON DELETE CASCADE,
    -- The nominal slot on the schedule's grid, RFC 3339 UTC, and as epoch milliseconds.
    slot          TEXT    NOT NULL,
    slot_ms       INTEGER NOT NULL,
    execution_id  TEXT    NOT NULL UNIQUE,
    state         TEXT    NOT NULL
                  CHECK (state IN ('pending', 'running', 'completed', 'failed', 'skipped')),
    -- Why a fire was skipped or failed, in words.
    reason        TEXT,
    -- Fire attempts started (a failed fire is retried a bounded number of times).
    attempts      INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    registered_at TEXT    NOT NULL,
    started_at    TEXT,
    finished_at   TEXT,
    PRIMARY KEY (job, slot_ms)
) STRICT;

-- Serves the overlap check ("is a fire of this job still running?") and `durably fires`.
CREATE INDEX fires_by_job_state ON fires (job, state);
