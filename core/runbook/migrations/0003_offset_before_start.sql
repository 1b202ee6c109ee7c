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
