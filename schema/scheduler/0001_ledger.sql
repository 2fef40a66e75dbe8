-- durably-scheduler, migration 1: the job registry and the slot ledger, in the journal's own
-- database. The scheduler applies its numbered migrations (schema/scheduler/) when a
-- `Scheduler` is built, and records the number applied in the journal's `schema_versions`
-- table under the owner `scheduler`.
--
-- Files written before the scheduler owned its schema already hold these tables: the
-- journal's migration 3 created them from this same text. `IF NOT EXISTS` adopts them as they
-- are, and SQLite stores a `CREATE ... IF NOT EXISTS` without those words, so old and new
-- files end with the same schema. The definitions below must therefore never change; a
-- change to the ledger is a new numbered migration.
--
-- A fire is one (job, slot) pair. Its execution id is derived from the pair (see
-- docs/design.md, "Scheduler"), so every scheduler process that reaches the same slot names the
-- same execution, and the journal's exclusive open lets exactly one of them run it.
--
-- Slots are stored twice: as RFC 3339 UTC text for people at the sqlite3 prompt, and as Unix
-- epoch milliseconds for comparisons. Both always name the same instant.
CREATE TABLE IF NOT EXISTS jobs (
    job             TEXT    PRIMARY KEY,
    -- The job's definition as canonical JSON: schedule, catch-up, overlap, ambiguity policy,
    -- retry bound and backoff.
    definition      TEXT    NOT NULL CHECK (json_valid(definition)),
    -- blake3 of `definition`, 64 hex digits; a change is detected on registration.
    definition_hash TEXT    NOT NULL,
    registered_at   TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,
    -- The high-water mark: the newest slot any scheduler process has registered as a fire or
    -- recorded as skipped. The loop fires only slots after it, so a clock jumped backward
    -- never fires a slot twice. It only ever grows. NULL until the first slot is handled.
    last_slot       TEXT,
    last_slot_ms    INTEGER,
    CHECK ((last_slot IS NULL) = (last_slot_ms IS NULL))
) STRICT;

CREATE TABLE IF NOT EXISTS fires (
    job           TEXT    NOT NULL REFERENCES jobs (job) ON DELETE CASCADE,
    -- The nominal slot on the schedule's grid, RFC 3339 UTC, and as epoch milliseconds.
    slot          TEXT    NOT NULL,
    slot_ms       INTEGER NOT NULL,
    -- The fire id: the journal execution that runs this fire.
    execution_id  TEXT    NOT NULL UNIQUE,
    -- pending: registered, not yet opened; running: opened and driven (or abandoned by a
    -- crashed process, until it is resumed); completed, failed, skipped: final.
    state         TEXT    NOT NULL
                  CHECK (state IN ('pending', 'running', 'completed', 'failed', 'skipped')),
    -- Why a fire was skipped or failed, in words.
    reason        TEXT,
    -- Body calls made: attempts started (a failed fire is retried a bounded number of times),
    -- plus any re-run of an attempt after a crash in its body (policy Retry).
    attempts      INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- 1 while the fire waits for an operator: its body was left ambiguous and the policy
    -- (Fail, or Retry past the journal's crash bound) will not decide it. Recovery leaves such
    -- a fire alone while its step is still an intent; `durably resolve` ends the wait.
    awaiting_operator INTEGER NOT NULL DEFAULT 0 CHECK (awaiting_operator IN (0, 1)),
    registered_at TEXT    NOT NULL,
    started_at    TEXT,
    finished_at   TEXT,
    PRIMARY KEY (job, slot_ms),
    CHECK ((state IN ('completed', 'failed', 'skipped')) = (finished_at IS NOT NULL))
) STRICT;

-- Serves the overlap check (`WHERE job = ? AND state IN ('pending', 'running')`) and
-- `durably fires --state`. The crash-recovery scan pages on the primary key (job, slot_ms).
CREATE INDEX IF NOT EXISTS fires_by_job_state ON fires (job, state);

-- Missed slots that were not fired (catch-up policy after downtime or a clock jumped forward),
-- one row per run of consecutive slots, so years of downtime take one row, not millions.
CREATE TABLE IF NOT EXISTS skipped_slots (
    job           TEXT    NOT NULL REFERENCES jobs (job) ON DELETE CASCADE,
    first_slot    TEXT    NOT NULL,
    first_slot_ms INTEGER NOT NULL,
    last_slot     TEXT    NOT NULL,
    last_slot_ms  INTEGER NOT NULL CHECK (last_slot_ms >= first_slot_ms),
    -- How many slots from first to last, both included; a lower bound when count_exact = 0
    -- (cron slots are counted one by one up to a bound).
    slot_count    INTEGER NOT NULL CHECK (slot_count >= 1),
    count_exact   INTEGER NOT NULL CHECK (count_exact IN (0, 1)),
    -- The catch-up policy that skipped them, in words.
    reason        TEXT    NOT NULL,
    recorded_at   TEXT    NOT NULL,
    -- Two processes that see the same downtime record it once.
    PRIMARY KEY (job, first_slot_ms)
) STRICT;
