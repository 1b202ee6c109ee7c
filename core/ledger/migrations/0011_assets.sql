-- +goose Up
-- Assets (seed 001 §1, §7): what a partner platform's identifiers name.
-- asset_id = hex(SHA-256(platform_id | canonical platform_refs))[:32], per
-- tenant; platform_refs are stored as first given and never change. The
-- gateway creates an asset and adds a revision with every accepted command
-- naming it (and soft-deletes); the orchestrator records each revision's
-- outcome and which one is current.
CREATE TABLE assets (
    tenant_id         text        NOT NULL,
    asset_id          text        NOT NULL,
    platform_id       text        NOT NULL,
    platform_refs     jsonb       NOT NULL,
    revisions         int         NOT NULL,
    current_revision  int         NOT NULL DEFAULT 0,
    current_job_id    text        NOT NULL DEFAULT '',
    content_hash      text        NOT NULL DEFAULT '',
    processing_status text        NOT NULL DEFAULT 'RECEIVED',
    created_by        text        NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    deleted_at        timestamptz,
    deleted_by        text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, asset_id)
);

CREATE TABLE asset_revisions (
    tenant_id    text        NOT NULL,
    asset_id     text        NOT NULL,
    revision     int         NOT NULL,
    job_id       text        NOT NULL UNIQUE REFERENCES requests (job_id),
    status       text        NOT NULL DEFAULT 'RECEIVED',
    content_hash text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    PRIMARY KEY (tenant_id, asset_id, revision),
    FOREIGN KEY (tenant_id, asset_id) REFERENCES assets (tenant_id, asset_id)
);

-- +goose Down
DROP TABLE asset_revisions, assets;
