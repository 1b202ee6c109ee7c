-- +goose Up
-- Who applied each runbook version (the operator's issuer#subject): first
-- created_by, and activated_by for whoever last made it the active version.
ALTER TABLE runbooks ADD COLUMN created_by   text NOT NULL DEFAULT '';
ALTER TABLE runbooks ADD COLUMN activated_by text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE runbooks DROP COLUMN activated_by;
ALTER TABLE runbooks DROP COLUMN created_by;
