-- +goose Up
-- One row per executed attempt of a step: the worker skeleton's idempotency
-- record. A row is created when a worker claims an attempt and finished with
-- the RESULT it reported, which is re-sent verbatim for duplicate directives.
CREATE TABLE worker_executions (
    job_id        text        NOT NULL,
    step_id       text        NOT NULL,
    attempt_no    integer     NOT NULL,
    lease_id      text        NOT NULL,
    service       text        NOT NULL,
    -- Worker instance holding (or last holding) the claim.
    worker_id     text        NOT NULL,
    -- The claim expires at claimed_until unless extended; an expired claim of
    -- an unfinished row may be taken over (takeovers counts how often).
    claimed_until timestamptz NOT NULL,
    takeovers     integer     NOT NULL DEFAULT 0,
    -- SUCCEEDED or FAILED once finished; failure_class RETRYABLE or NON_RETRYABLE.
    status        text,
    failure_class text,
    -- protojson of the lucius.v1.ResultRequest that was (or is being) sent.
    result        jsonb,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    PRIMARY KEY (job_id, step_id, attempt_no, lease_id),
    CHECK ((finished_at IS NULL) = (result IS NULL))
);

-- Retention deletes finished rows by age.
CREATE INDEX worker_executions_finished_at ON worker_executions (finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP TABLE worker_executions;
