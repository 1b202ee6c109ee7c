-- +goose Up
-- One row per step whose work committed: the step's effect. The key is the
-- step, not the attempt, so when a later attempt of the same step (after an
-- ACK timeout or a lease expiry) succeeds again, its insert does nothing and
-- the row keeps naming the attempt that committed first. A SUCCEEDED step has
-- exactly one row here however many of its attempts ran to the end.
CREATE TABLE worker_effects (
    job_id       text        NOT NULL,
    step_id      text        NOT NULL,
    -- The attempt that committed the effect first.
    attempt_no   integer     NOT NULL,
    lease_id     text        NOT NULL,
    service      text        NOT NULL,
    worker_id    text        NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, step_id)
);

-- Retention deletes rows by age.
CREATE INDEX worker_effects_committed_at ON worker_effects (committed_at);

-- +goose Down
DROP TABLE worker_effects;
