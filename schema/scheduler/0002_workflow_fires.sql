-- durably-scheduler, migration 2: fires run as registered workflows, and jobs can be paused.
--
-- A fire's execution is now started through the runtime, in the transaction that inserts its
-- `fires` row (state 'running'). The row's final state is copied from the execution's status
-- by the scheduler once it sees the execution end (completed, failed; cancelled becomes
-- 'skipped'); the `fire_ledger` view joins the execution's status, so a reader sees the end
-- at once. 'pending' is only found in files written before this migration (a fire registered
-- but not yet opened by the old scheduler).
--
-- `paused`: 1 while an operator has paused the job (`durably schedules pause`). The loop fires
-- nothing for a paused job and leaves its high-water mark alone, so on resume the job's
-- catch-up policy decides the slots it missed, as it does after downtime.
ALTER TABLE jobs ADD COLUMN paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1));

-- When the job was last paused or resumed (RFC 3339 UTC); NULL if never.
ALTER TABLE jobs ADD COLUMN paused_changed_at TEXT;
