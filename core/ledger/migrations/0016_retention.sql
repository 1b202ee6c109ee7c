-- +goose Up
-- The retention sweeper finds a tenant's oldest finished jobs here.
CREATE INDEX jobs_tenant_completed ON jobs (tenant_id, completed_at) WHERE completed_at IS NOT NULL;

-- +goose Down
DROP INDEX jobs_tenant_completed;
