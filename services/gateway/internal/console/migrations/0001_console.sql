-- +goose Up
-- Console login tickets and sessions. Only the SHA-256 of each secret is
-- kept; the principal is the snapshot the ticket was minted for.
CREATE TABLE console_tickets (
    ticket_hash bytea PRIMARY KEY,
    principal   jsonb       NOT NULL,
    landing     text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE console_sessions (
    session_hash bytea PRIMARY KEY,
    principal    jsonb       NOT NULL,
    expires_at   timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX console_tickets_expires ON console_tickets (expires_at);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

-- +goose Down
DROP TABLE console_sessions, console_tickets;
