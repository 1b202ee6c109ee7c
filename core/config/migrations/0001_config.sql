-- +goose Up
-- Live configuration (package config). Bodies are JSON written and validated
-- by the Go code; revision orders every change, and each change notifies
-- config_changed with the new revision so caches reload within a second.
-- config_head holds the revision of the latest change; every change bumps it
-- first, which also serializes changes.
CREATE TABLE config_head (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    revision bigint  NOT NULL
);
INSERT INTO config_head (revision) VALUES (0);

CREATE TABLE config_global (
    id         boolean     PRIMARY KEY DEFAULT true CHECK (id),
    body       jsonb       NOT NULL,
    revision   bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE config_tenants (
    tenant_id  text        PRIMARY KEY, -- normalized: lower(trim())
    body       jsonb       NOT NULL,
    revision   bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE config_tenants, config_global, config_head;
