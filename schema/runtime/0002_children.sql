-- durably-runtime, migration 2: child executions. A child is an execution a workflow started
-- with `start_child`; its `runtime_executions` row names the parent and the parent's step that
-- started it. The child's row is written in the transaction that records that step, so a
-- parent step starts at most one child, whatever crashes.
--
-- No foreign key on the parent: with the runtime's deferred open, the step that starts a child
-- may be the parent's first write, whose own row is inserted later in the same transaction;
-- and a child outlives a parent the retention sweep removed.
ALTER TABLE runtime_executions ADD COLUMN parent_execution_id TEXT;
-- The parent's step (seq) that started the child; set exactly when the parent is.
ALTER TABLE runtime_executions ADD COLUMN parent_seq INTEGER
    CHECK (parent_seq IS NULL OR parent_seq >= 0);
-- Serves "the children of an execution" (the cancel cascade, `durably show`, `durably ls
-- --parent`, the `runtime_children` view): led by the parent, in start order.
CREATE INDEX runtime_children_by_parent ON runtime_executions (parent_execution_id, parent_seq)
    WHERE parent_execution_id IS NOT NULL;
