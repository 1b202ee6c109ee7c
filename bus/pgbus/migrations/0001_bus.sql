-- +goose Up
-- Queues and topics share one namespace, as in Service Bus. Options are
-- intervals; queue-only columns are NULL for topics.
CREATE TABLE bus_entities (
    name                       text        PRIMARY KEY,
    kind                       text        NOT NULL CHECK (kind IN ('queue', 'topic')),
    lock_duration              interval,
    max_delivery_count         int,
    dead_letter_on_expiration  boolean     NOT NULL DEFAULT false,
    default_ttl                interval    NOT NULL,
    duplicate_detection_window interval    NOT NULL,
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    CHECK (kind = 'topic' OR (lock_duration IS NOT NULL AND max_delivery_count IS NOT NULL))
);

-- A subscription receives a copy of every message sent to its topic whose
-- properties contain filter (jsonb containment: filter <@ properties).
CREATE TABLE bus_subscriptions (
    topic                     text        NOT NULL REFERENCES bus_entities (name) ON DELETE CASCADE,
    name                      text        NOT NULL,
    -- Derived from the key, so unique with it (names cannot contain
    -- '/subscriptions/'). Not a UNIQUE index: ON CONFLICT (topic, name) would not
    -- arbitrate it and concurrent declarations of one subscription would fail.
    path                      text        GENERATED ALWAYS AS (topic || '/subscriptions/' || name) STORED,
    lock_duration             interval    NOT NULL,
    max_delivery_count        int         NOT NULL,
    dead_letter_on_expiration boolean     NOT NULL,
    default_ttl               interval,   -- NULL: the topic's
    filter                    jsonb       NOT NULL DEFAULT '{}',
    updated_at                timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, name)
);
CREATE INDEX bus_subscriptions_path ON bus_subscriptions (path);

-- What a receiver of a path (queue or subscription; its dead-letter queue uses
-- the same row) needs to claim and settle.
CREATE VIEW bus_receivables AS
    SELECT name AS path, lock_duration, max_delivery_count, dead_letter_on_expiration
      FROM bus_entities WHERE kind = 'queue'
    UNION ALL
    SELECT path, lock_duration, max_delivery_count, dead_letter_on_expiration
      FROM bus_subscriptions;

-- One row per receivable copy of a message. available_at is the enqueue (or
-- scheduled) time while the message is free and the lock expiry while it is
-- locked, so "claimable" is one range condition on (path, available_at).
-- lock_token changes on every claim; settling matches it.
CREATE TABLE bus_messages (
    seq                     bigserial   PRIMARY KEY,
    path                    text        NOT NULL,
    available_at            timestamptz NOT NULL,
    lock_token              uuid,
    delivery_count          int         NOT NULL DEFAULT 0,
    enqueued_at             timestamptz NOT NULL,
    expires_at              timestamptz NOT NULL,
    message_id              text        NOT NULL,
    body                    bytea       NOT NULL,
    content_type            text        NOT NULL DEFAULT '',
    properties              jsonb       NOT NULL DEFAULT '{}',
    key                     text        NOT NULL DEFAULT '',
    correlation_id          text        NOT NULL DEFAULT '',
    subject                 text        NOT NULL DEFAULT '',
    dead_letter_reason      text        NOT NULL DEFAULT '',
    dead_letter_description text        NOT NULL DEFAULT ''
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.05);

CREATE INDEX bus_messages_claim ON bus_messages (path, available_at, seq);

-- Message ids seen per queue or topic, for duplicate detection. Rows past
-- expires_at are reusable at once and purged in the background.
CREATE TABLE bus_duplicates (
    entity     text        NOT NULL,
    message_id text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (entity, message_id)
);

CREATE INDEX bus_duplicates_expiry ON bus_duplicates (expires_at);

-- +goose Down
DROP TABLE bus_duplicates, bus_messages;
DROP VIEW bus_receivables;
DROP TABLE bus_subscriptions, bus_entities;
