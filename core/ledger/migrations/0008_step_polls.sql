-- +goose Up
-- Polling of a task whose workflow node sets poll_interval: while the step
-- waits in POLLING, next_poll_at is when the reconciler dispatches it again;
-- started_at is its first POLLING answer, from which poll_timeout counts.
-- The row goes when the step leaves polling for good.
CREATE TABLE step_polls (
    job_id       text        NOT NULL,
    step_id      text        NOT NULL,
    started_at   timestamptz NOT NULL,
    next_poll_at timestamptz,
    PRIMARY KEY (job_id, step_id),
    FOREIGN KEY (job_id, step_id) REFERENCES steps (job_id, step_id) ON DELETE CASCADE
);
CREATE INDEX step_polls_due ON step_polls (next_poll_at) WHERE next_poll_at IS NOT NULL;

-- +goose Down
DROP TABLE step_polls;
