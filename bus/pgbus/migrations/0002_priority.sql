-- +goose Up
-- A message's priority (bus.Message.Priority). A free message of priority p
-- is available p × bus.PriorityHeadStart before its enqueue time (scheduled
-- messages keep their time), so the claim order (available_at, seq) puts it
-- ahead of what was enqueued up to that long before it; abandoning it keeps
-- that place.
ALTER TABLE bus_messages ADD COLUMN priority smallint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE bus_messages DROP COLUMN priority;
