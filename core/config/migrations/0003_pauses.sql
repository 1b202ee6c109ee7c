-- +goose Up
-- Paused work (operators' pause and resume): while a pause matches a job
-- (every job, its tenant, its lane or its workflow), no new step of it is
-- dispatched; with refuse_submits the gateway also refuses new commands.
-- Part of the live configuration: each change bumps the revision, is
-- audited in config_changes and reaches every process's cache.
CREATE TABLE config_pauses (
    scope          text        NOT NULL CHECK (scope IN ('global', 'tenant', 'lane', 'workflow')),
    key            text        NOT NULL, -- '' for global; the tenant, lane or workflow id
    reason         text        NOT NULL DEFAULT '',
    refuse_submits boolean     NOT NULL DEFAULT false,
    paused_by      text        NOT NULL,
    paused_at      timestamptz NOT NULL DEFAULT now(),
    revision       bigint      NOT NULL,
    PRIMARY KEY (scope, key)
);

-- +goose Down
DROP TABLE config_pauses;
