-- +goose Up
-- Admission slots (seed 004 §10): how many jobs are active (accepted, not yet
-- terminal) per scope. Accepting a request takes a slot in its tenant, its
-- lane and the global scope, in the request's own transaction and only under
-- the limit; a job reaching a terminal state gives them back in its own.
CREATE TABLE admission_usage (
    scope  text NOT NULL, -- tenant | lane | global
    key    text NOT NULL, -- tenant_norm | DEFAULT/BURST | ''
    active int  NOT NULL DEFAULT 0 CHECK (active >= 0),
    PRIMARY KEY (scope, key)
);

-- The repair check counts live work by tenant and lane.
CREATE INDEX jobs_tenant_live ON jobs (tenant_id) WHERE completed_at IS NULL;
CREATE INDEX requests_tenant_unclaimed ON requests (tenant_id) WHERE claimed_at IS NULL;

-- +goose Down
DROP INDEX requests_tenant_unclaimed;
DROP INDEX jobs_tenant_live;
DROP TABLE admission_usage;
