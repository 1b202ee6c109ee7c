-- +goose Up
-- Worker instances as they announce themselves (WorkerService): one row per
-- service and instance, refreshed by every heartbeat. The handlers they run
-- join the catalog (handlers) when announced.
CREATE TABLE worker_instances (
    service      text        NOT NULL,
    instance_id  text        NOT NULL,
    version      text        NOT NULL DEFAULT '',
    handlers     jsonb       NOT NULL DEFAULT '[]',
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (service, instance_id)
);
CREATE INDEX worker_instances_seen ON worker_instances (last_seen_at);

-- +goose Down
DROP TABLE worker_instances;
