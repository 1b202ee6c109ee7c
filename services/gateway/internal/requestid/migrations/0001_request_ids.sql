-- +goose Up
-- Request ids of mutating calls (AIP-155): one row per (caller, method,
-- request_id) while the id is remembered. A row is 'running' from the moment
-- a call reserves the id until it stores its answer ('done': the response or
-- the google.rpc.Status, with its code). expire_at bounds how long an id is
-- remembered; expired rows are purged lazily by later reservations.
CREATE TABLE request_ids (
    scope        text        NOT NULL,
    method       text        NOT NULL,
    request_id   text        NOT NULL,
    request_hash bytea       NOT NULL,
    state        text        NOT NULL CHECK (state IN ('running', 'done')),
    token        uuid        NOT NULL,
    code         integer     NOT NULL DEFAULT 0,
    answer       bytea,
    reserved_at  timestamptz NOT NULL,
    expire_at    timestamptz NOT NULL,
    PRIMARY KEY (scope, method, request_id)
);

CREATE INDEX request_ids_expire ON request_ids (expire_at);

-- +goose Down
DROP TABLE request_ids;
