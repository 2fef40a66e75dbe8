-- durably-runtime, migration 3: patch answers (`WorkflowContext::patched`) and forks
-- (`Client::fork`). Applied after the runtime's earlier migrations, in one transaction.

-- One row per (execution, patch id) the execution has asked `patched` about: the answer it
-- got, and the step position it got it at. A recorded answer is returned first on every later
-- run, so an execution's answer never flips. A `true` row commits with its marker step
-- (`durably:patch/<id>`) or, when the marker was already recorded, on the run that met it; a
-- `false` row is written when the execution met another recorded step at that position (it
-- passed this point on code without the patch).
CREATE TABLE runtime_patches (
    execution_id TEXT    NOT NULL REFERENCES executions (execution_id) ON DELETE CASCADE,
    patch_id     TEXT    NOT NULL CHECK (length(patch_id) BETWEEN 1 AND 256),
    answer       INTEGER NOT NULL CHECK (answer IN (0, 1)),
    -- The execution's next step seq when it asked: the marker's seq for a `true` answer.
    seq          INTEGER NOT NULL CHECK (seq >= 0),
    decided_at   TEXT    NOT NULL,
    PRIMARY KEY (execution_id, patch_id)
) STRICT, WITHOUT ROWID;
-- Serves `durably patches PATCH` and the `patch_answers` view: the unfinished executions that
-- answered false to a patch. The primary key serves `patched`'s lookup and the cascade.
CREATE INDEX runtime_patches_by_patch ON runtime_patches (patch_id, answer);

-- A fork is a new execution linked to the one it copies: the original's id, and the seq
-- before which the original's steps were copied. Both NULL for an execution that is no fork.
-- No foreign key: the link outlives the original's deletion by retention, as its events do.
ALTER TABLE runtime_executions ADD COLUMN forked_from TEXT;
ALTER TABLE runtime_executions ADD COLUMN fork_seq INTEGER CHECK (fork_seq IS NULL OR fork_seq >= 0);
-- Serves `durably show`'s list of an execution's forks.
CREATE INDEX runtime_executions_by_fork ON runtime_executions (forked_from) WHERE forked_from IS NOT NULL;
