-- +goose Up
-- Lane and global limits are checked against the live work itself, counted
-- under a lock of the scope and only while such a limit is set, instead of
-- counter rows every accept and completion of every tenant updated: those
-- rows made each tenant's submits wait on all other tenants' commits.
-- Tenant counters stay (a tenant's row is shared only by its own work).
DELETE FROM admission_usage WHERE scope <> 'tenant';
ALTER TABLE admission_usage ADD CONSTRAINT admission_usage_tenant_only CHECK (scope = 'tenant');

-- A lane limit counts the lane's live requests and jobs.
CREATE INDEX requests_mode_unclaimed ON requests (resolved_mode) WHERE claimed_at IS NULL;
CREATE INDEX jobs_mode_live ON jobs (resolved_mode) WHERE completed_at IS NULL;

-- +goose Down
DROP INDEX jobs_mode_live;
DROP INDEX requests_mode_unclaimed;
ALTER TABLE admission_usage DROP CONSTRAINT admission_usage_tenant_only;
