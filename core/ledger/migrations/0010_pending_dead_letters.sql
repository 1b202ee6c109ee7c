-- +goose Up
-- The dead letters nobody has dealt with: a step dead letter is dealt with
-- once its job is replayed (replay_job_id set). lucius_dead_letters_pending
-- counts these on every scrape; the index keeps that proportional to them,
-- not to every dead letter ever written.
CREATE INDEX dead_letters_pending ON dead_letters (kind) WHERE replay_job_id = '';

-- +goose Down
DROP INDEX dead_letters_pending;
