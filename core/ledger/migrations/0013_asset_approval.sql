-- +goose Up
-- The partner platform's review of an asset (seed 001 §7.3): business state
-- the gateway updates and the orchestrator never touches.
ALTER TABLE assets
    ADD COLUMN approval_state      text        NOT NULL DEFAULT 'PENDING'
        CHECK (approval_state IN ('PENDING', 'APPROVED', 'REJECTED')),
    ADD COLUMN approval_note       text        NOT NULL DEFAULT '',
    ADD COLUMN approval_updated_by text        NOT NULL DEFAULT '',
    ADD COLUMN approval_updated_at timestamptz;

-- +goose Down
ALTER TABLE assets
    DROP COLUMN approval_updated_at,
    DROP COLUMN approval_updated_by,
    DROP COLUMN approval_note,
    DROP COLUMN approval_state;
