-- +goose Up
-- Who registered each workflow version: the operator's issuer#subject, or
-- the source of a definition loaded at start (LUCIUS_WORKFLOWS_DIR, a
-- runbook's embedded workflow).
ALTER TABLE workflow_definitions ADD COLUMN registered_by text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE workflow_definitions DROP COLUMN registered_by;
