-- +goose Up
-- Phase offsets count minutes BEFORE the batch start (seed 003: offset 7200
-- on a batch starting 2025-03-15T00:00:00Z is due 2025-03-10T00:00:00Z).
-- Until this migration Lucius computed start + offset. Pending phase
-- executions are recomputed under the one rule in force; a runbook written for
-- the old rule (negative offsets for "before") must be applied again with its
-- offsets negated (README, "Runbooks": phase timing).
UPDATE phase_executions p
   SET due_at = b.batch_start_time - make_interval(mins => p.offset_minutes)
  FROM batches b
 WHERE b.id = p.batch_id AND p.status = 'pending';

-- +goose Down
-- Irreversible (a data migration): the due times it recomputed under the
-- rule in force are kept; the release before it computed start + offset.
SELECT 1;
