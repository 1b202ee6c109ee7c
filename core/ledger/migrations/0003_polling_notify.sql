-- +goose Up
-- Jobs created by the runbook executor ask to be told about their progress:
-- notify names the bus topic their job-update messages go to.
ALTER TABLE requests ADD COLUMN notify text NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN notify text NOT NULL DEFAULT '';
-- Attempts up to retry_base do not count against max_attempts: a replay's and
-- a poll's next attempt start the retry count afresh.
ALTER TABLE steps ADD COLUMN retry_base int NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE steps DROP COLUMN retry_base;
ALTER TABLE jobs DROP COLUMN notify;
ALTER TABLE requests DROP COLUMN notify;
