-- +goose Up
-- Who submitted each request (seed 000 submitted_by): the authenticated
-- principal (issuer#subject), the operator who replayed a job, or the runbook
-- whose row made it. Read with the job (GetJob, ListJobs).
ALTER TABLE requests ADD COLUMN submitted_by text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE requests DROP COLUMN submitted_by;
