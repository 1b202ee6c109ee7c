-- +goose Up
-- Who changed the configuration: every change names its principal
-- (issuer#subject of the operator's token; "seed" for the environment's
-- seed of a fresh database), on the row it left and in config_changes, one
-- row per revision, kept after a tenant's overrides are deleted. Bodies are
-- not copied: they may hold webhook secrets.
ALTER TABLE config_global  ADD COLUMN updated_by text NOT NULL DEFAULT '';
ALTER TABLE config_tenants ADD COLUMN updated_by text NOT NULL DEFAULT '';

CREATE TABLE config_changes (
    revision   bigint      PRIMARY KEY,
    scope      text        NOT NULL, -- 'global', or the normalized tenant id
    action     text        NOT NULL, -- SEED, PUT or DELETE
    changed_by text        NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX config_changes_scope ON config_changes (scope, revision);

-- +goose Down
DROP TABLE config_changes;
ALTER TABLE config_tenants DROP COLUMN updated_by;
ALTER TABLE config_global DROP COLUMN updated_by;
