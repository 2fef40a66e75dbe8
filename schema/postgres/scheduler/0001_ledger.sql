-- durably-scheduler on PostgreSQL, baseline: the schema SQLite reaches after the scheduler's
-- migrations 0001 and 0002 (schema/scheduler/0001_ledger.sql, 0002_workflow_fires.sql), in one
-- file. It equals scheduler version 2: the INSERT at the end records it in the journal's
-- `schema_versions` under the owner `scheduler`, in the transaction that creates the tables.
-- Every later scheduler migration carries its PostgreSQL SQL beside its SQLite SQL. Needs the
-- journal's baseline (schema/postgres/0001_journal.sql).
--
-- Types as in schema/postgres/0001_journal.sql: text `COLLATE "C"`, `timestamptz`, the job
-- definition `json`, `bigint`. No table here notifies: the scheduler wakes on its own clock at
-- the next slot, and a fire's execution notifies through `executions`.
--
-- A fire is one (job, slot) pair. Its execution id is derived from the pair (see
-- docs/design.md, "Scheduler"), so every scheduler process that reaches the same slot names the
-- same execution, and the primary key (job, slot_ms) lets exactly one of them insert the fire.
--
-- Slots are stored twice: as `timestamptz` for people at the psql prompt, and as Unix epoch
-- milliseconds for comparisons. Both always name the same instant.
CREATE TABLE jobs (
    job               text COLLATE "C" PRIMARY KEY,
    -- The job's definition as canonical JSON: schedule, catch-up, overlap, ambiguity policy,
    -- retry bound and backoff.
    definition        json        NOT NULL,
    -- blake3 of `definition`, 64 hex digits; a change is detected on registration.
    definition_hash   text COLLATE "C" NOT NULL,
    registered_at     timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    -- The high-water mark: the newest slot any scheduler process has registered as a fire or
    -- recorded as skipped. The loop fires only slots after it, so a clock jumped backward
    -- never fires a slot twice. It only ever grows. NULL until the first slot is handled.
    last_slot         timestamptz,
    last_slot_ms      bigint,
    -- 1 while an operator has paused the job (`durably schedules pause`; scheduler 0002). The
    -- loop fires nothing for a paused job and leaves its high-water mark alone, so on resume
    -- the job's catch-up policy decides the slots it missed, as it does after downtime.
    paused            bigint      NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    -- When the job was last paused or resumed; NULL if never.
    paused_changed_at timestamptz,
    CHECK ((last_slot IS NULL) = (last_slot_ms IS NULL))
);

-- A fire's execution is started through the runtime, in the transaction that inserts its
-- `fires` row (state 'running'). The row's final state is copied from the execution's status
-- by the scheduler once it sees the execution end (completed, failed; cancelled becomes
-- 'skipped'); the `fire_ledger` view joins the execution's status, so a reader sees the end
-- at once. 'pending' is only found in journals copied from SQLite files written before the
-- scheduler's migration 2 (a fire registered but not yet opened by the old scheduler).
CREATE TABLE fires (
    job               text COLLATE "C" NOT NULL REFERENCES jobs (job) ON DELETE CASCADE,
    -- The nominal slot on the schedule's grid, and as epoch milliseconds.
    slot              timestamptz NOT NULL,
    slot_ms           bigint      NOT NULL,
    -- The fire id: the journal execution that runs this fire.
    execution_id      text COLLATE "C" NOT NULL UNIQUE,
    -- pending: registered, not yet opened; running: opened and driven (or abandoned by a
    -- crashed process, until it is resumed); completed, failed, skipped: final.
    state             text COLLATE "C" NOT NULL
                      CHECK (state IN ('pending', 'running', 'completed', 'failed', 'skipped')),
    -- Why a fire was skipped or failed, in words.
    reason            text COLLATE "C",
    -- Body calls made: attempts started (a failed fire is retried a bounded number of times),
    -- plus any re-run of an attempt after a crash in its body (policy Retry).
    attempts          bigint      NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- 1 while the fire waits for an operator: its body was left ambiguous and the policy
    -- (Fail, or Retry past the journal's crash bound) will not decide it. Recovery leaves such
    -- a fire alone while its step is still an intent; `durably resolve` ends the wait.
    awaiting_operator bigint      NOT NULL DEFAULT 0 CHECK (awaiting_operator IN (0, 1)),
    registered_at     timestamptz NOT NULL,
    started_at        timestamptz,
    finished_at       timestamptz,
    PRIMARY KEY (job, slot_ms),
    CHECK ((state IN ('completed', 'failed', 'skipped')) = (finished_at IS NOT NULL))
);

-- Serves the overlap check (`WHERE job = ? AND state IN ('pending', 'running')`) and
-- `durably fires --state`. The crash-recovery scan pages on the primary key (job, slot_ms).
CREATE INDEX fires_by_job_state ON fires (job, state);

-- Missed slots that were not fired (catch-up policy after downtime or a clock jumped forward),
-- one row per run of consecutive slots, so years of downtime take one row, not millions.
CREATE TABLE skipped_slots (
    job           text COLLATE "C" NOT NULL REFERENCES jobs (job) ON DELETE CASCADE,
    first_slot    timestamptz NOT NULL,
    first_slot_ms bigint      NOT NULL,
    last_slot     timestamptz NOT NULL,
    last_slot_ms  bigint      NOT NULL CHECK (last_slot_ms >= first_slot_ms),
    -- How many slots from first to last, both included; a lower bound when count_exact = 0
    -- (cron slots are counted one by one up to a bound).
    slot_count    bigint      NOT NULL CHECK (slot_count >= 1),
    count_exact   bigint      NOT NULL CHECK (count_exact IN (0, 1)),
    -- The catch-up policy that skipped them, in words.
    reason        text COLLATE "C" NOT NULL,
    recorded_at   timestamptz NOT NULL,
    -- Two processes that see the same downtime record it once.
    PRIMARY KEY (job, first_slot_ms)
);

INSERT INTO schema_versions (owner, version) VALUES ('scheduler', 2);
