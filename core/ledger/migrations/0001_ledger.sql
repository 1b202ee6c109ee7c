-- +goose Up
-- Accepted commands. The job id is derived from the tenant and idempotency key
-- (or the canonical command), so the primary key enforces idempotency.
CREATE TABLE requests (
    job_id              text        PRIMARY KEY,
    tenant_id           text        NOT NULL, -- normalized: lower(trim())
    idempotency_key     text,
    request_hash        text        NOT NULL, -- SHA-256 of the canonical command
    request_type        text        NOT NULL,
    workflow_version    int         NOT NULL, -- pinned at acceptance
    input_ref           text        NOT NULL,
    output_ref          text        NOT NULL,
    doc_id              text        NOT NULL DEFAULT '',
    correlation_id      text        NOT NULL DEFAULT '',
    callback_url        text        NOT NULL DEFAULT '',
    command             jsonb       NOT NULL, -- the envelope as received
    resolved_mode       text        NOT NULL,
    partition           int         NOT NULL,
    routing_key_used    text        NOT NULL,
    topic               text        NOT NULL,
    decision_source     text        NOT NULL,
    decision_reason     text        NOT NULL,
    cancel_requested_at timestamptz,
    cancel_reason       text        NOT NULL DEFAULT '',
    replay_of           text        NOT NULL DEFAULT '', -- the failed job this request replays
    received_at         timestamptz NOT NULL DEFAULT now(),
    claimed_at          timestamptz  -- when an orchestrator created its job
);
CREATE INDEX requests_unclaimed ON requests (received_at) WHERE claimed_at IS NULL;
CREATE INDEX requests_replay_of ON requests (replay_of) WHERE replay_of <> '';
CREATE INDEX requests_received ON requests (received_at DESC, job_id DESC);
CREATE INDEX requests_tenant_received ON requests (tenant_id, received_at DESC, job_id DESC);

-- Jobs exist once an orchestrator claimed the request. owner_epoch fences
-- writes: reclaiming an orphan increments it and the former owner's writes,
-- which name the old epoch, change nothing.
CREATE TABLE jobs (
    job_id              text        PRIMARY KEY REFERENCES requests (job_id),
    tenant_id           text        NOT NULL,
    request_type        text        NOT NULL,
    workflow_id         text        NOT NULL,
    workflow_version    int         NOT NULL,
    status              text        NOT NULL,
    resolved_mode       text        NOT NULL,
    partition           int         NOT NULL,
    routing_key_used    text        NOT NULL,
    topic               text        NOT NULL,
    decision_source     text        NOT NULL,
    decision_reason     text        NOT NULL,
    input_ref           text        NOT NULL,
    output_ref          text        NOT NULL,
    doc_id              text        NOT NULL DEFAULT '',
    correlation_id      text        NOT NULL DEFAULT '',
    callback_url        text        NOT NULL DEFAULT '',
    payload             jsonb       NOT NULL DEFAULT '{}', -- the workflow inputs, defaults applied
    owner_id            text        NOT NULL DEFAULT '',
    owner_epoch         bigint      NOT NULL DEFAULT 1,
    owner_heartbeat_at  timestamptz,
    current_step_id     text        NOT NULL DEFAULT '',
    reason              text        NOT NULL DEFAULT '',
    result_ref          text        NOT NULL DEFAULT '',
    cancel_requested_at timestamptz,
    replay_of           text        NOT NULL DEFAULT '', -- copied from its request
    deadline_at         timestamptz,                     -- SLA: failed with SLA_EXCEEDED if still running
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    completed_at        timestamptz
);
-- Only live jobs are heartbeated, reclaimed and swept; keep those scans small.
CREATE INDEX jobs_owner_live ON jobs (owner_id) WHERE completed_at IS NULL;
CREATE INDEX jobs_heartbeat_live ON jobs (owner_heartbeat_at) WHERE completed_at IS NULL;
CREATE INDEX jobs_deadline_live ON jobs (deadline_at) WHERE completed_at IS NULL;

-- One row per workflow node (control nodes too, so decisions are recorded),
-- plus one per fan-out child ("<node>[<index>]", parent_step_id set). A fan-out
-- row counts its children, so the last child to finish sees it atomically
-- under the job's lock ("last task turns out the lights").
CREATE TABLE steps (
    job_id             text        NOT NULL REFERENCES jobs (job_id),
    step_id            text        NOT NULL,
    node_id            text        NOT NULL,
    kind               text        NOT NULL, -- start, end, task, conditional, fan_out, fan_in, child
    parent_step_id     text        NOT NULL DEFAULT '',
    child_index        int         NOT NULL DEFAULT 0,
    step_index         int         NOT NULL, -- the node's position in the definition
    step_type          text        NOT NULL, -- the handler, or the node type for control nodes
    service            text        NOT NULL DEFAULT '',
    status             text        NOT NULL,
    attempt_no         int         NOT NULL DEFAULT 0, -- current attempt, 0 before the first
    lease_id           uuid,                           -- current attempt's lease
    max_attempts       int         NOT NULL DEFAULT 0,
    ack_timeout_ms     bigint      NOT NULL DEFAULT 0,
    params             jsonb,
    output             jsonb,
    artifacts          jsonb       NOT NULL DEFAULT '[]',
    failure_class      text        NOT NULL DEFAULT '',
    reason             text        NOT NULL DEFAULT '',
    expanded           boolean     NOT NULL DEFAULT false,
    children_total     int         NOT NULL DEFAULT 0,
    children_pending   int         NOT NULL DEFAULT 0,
    children_running   int         NOT NULL DEFAULT 0,
    children_succeeded int         NOT NULL DEFAULT 0,
    children_failed    int         NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    completed_at       timestamptz,
    PRIMARY KEY (job_id, step_id)
);
CREATE INDEX steps_children ON steps (job_id, parent_step_id, child_index);

-- Every dispatch of a step, with its routing pinned at creation: recovery
-- re-dispatches with these values and never recomputes them.
CREATE TABLE attempts (
    job_id           text        NOT NULL,
    step_id          text        NOT NULL,
    attempt_no       int         NOT NULL,
    lease_id         uuid        NOT NULL,
    status           text        NOT NULL,
    resolved_mode    text        NOT NULL,
    partition        int         NOT NULL,
    routing_key_used text        NOT NULL,
    topic            text        NOT NULL,
    decision_source  text        NOT NULL,
    decision_reason  text        NOT NULL,
    worker_id        text        NOT NULL DEFAULT '',
    failure_class    text        NOT NULL DEFAULT '',
    reason           text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    ack_deadline     timestamptz,
    acked_at         timestamptz,
    lease_expires_at timestamptz, -- set at ACK, extended by heartbeats: the execution timeout
    last_heartbeat_at timestamptz,
    progress         jsonb,
    completed_at     timestamptz,
    PRIMARY KEY (job_id, step_id, attempt_no),
    FOREIGN KEY (job_id, step_id) REFERENCES steps (job_id, step_id)
);
-- The sweepers' scans: open attempts waiting for an ACK, and acknowledged ones running.
CREATE INDEX attempts_awaiting_ack ON attempts (ack_deadline) WHERE acked_at IS NULL AND completed_at IS NULL;
CREATE INDEX attempts_leased ON attempts (lease_expires_at) WHERE acked_at IS NOT NULL AND completed_at IS NULL;

-- Append-only audit trail. No foreign key: a request has events before its job exists.
CREATE TABLE job_events (
    event_id    bigserial   PRIMARY KEY,
    job_id      text        NOT NULL,
    step_id     text        NOT NULL DEFAULT '',
    attempt_no  int         NOT NULL DEFAULT 0,
    type        text        NOT NULL,
    from_status text        NOT NULL DEFAULT '',
    to_status   text        NOT NULL DEFAULT '',
    reason      text        NOT NULL DEFAULT '',
    data        jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_events_job ON job_events (job_id, event_id);

-- Durable intent to publish, written in the same transaction as the state
-- change that implies it. message_id is stable so a re-send is dropped by the
-- bus's duplicate detection.
CREATE TABLE outbox (
    id             bigserial   PRIMARY KEY,
    message_id     text        NOT NULL UNIQUE,
    destination    text        NOT NULL,
    kind           text        NOT NULL,
    job_id         text        NOT NULL DEFAULT '',
    step_id        text        NOT NULL DEFAULT '',
    attempt_no     int         NOT NULL DEFAULT 0,
    body           bytea       NOT NULL,
    content_type   text        NOT NULL DEFAULT 'application/json',
    properties     jsonb       NOT NULL DEFAULT '{}',
    message_key    text        NOT NULL DEFAULT '',
    correlation_id text        NOT NULL DEFAULT '',
    subject        text        NOT NULL DEFAULT '',
    scheduled_at   timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    available_at   timestamptz NOT NULL DEFAULT now(), -- claim lease of the dispatcher
    attempts       int         NOT NULL DEFAULT 0,
    last_error     text        NOT NULL DEFAULT '',
    sent_at        timestamptz,
    dead_at        timestamptz, -- given up on (a completion callback that never succeeded)
    stale_at       timestamptz  -- reported by the stale-outbox sweeper
);
CREATE INDEX outbox_pending ON outbox (available_at, id) WHERE sent_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_sent ON outbox (sent_at) WHERE sent_at IS NOT NULL;
CREATE INDEX outbox_job ON outbox (job_id, kind);

-- Workflow definitions, immutable per (workflow_id, version): a job pins the
-- version it was accepted with, so registering a new one never changes it.
CREATE TABLE workflow_definitions (
    workflow_id   text        NOT NULL,
    version       int         NOT NULL,
    source        text        NOT NULL, -- the YAML
    source_sha256 text        NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, version)
);

-- The handler catalog: which service owns each handler a task may name.
CREATE TABLE handlers (
    name        text        PRIMARY KEY,
    service     text        NOT NULL,
    description text        NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- What could not be processed: steps that failed for good, and bus messages the
-- bus dead-lettered. Listable and inspectable through the API; a failed job can
-- be replayed.
CREATE TABLE dead_letters (
    id            bigserial   PRIMARY KEY,
    kind          text        NOT NULL, -- step or bus
    job_id        text        NOT NULL DEFAULT '',
    step_id       text        NOT NULL DEFAULT '',
    attempt_no    int         NOT NULL DEFAULT 0,
    reason        text        NOT NULL,
    description   text        NOT NULL DEFAULT '',
    entity        text        NOT NULL DEFAULT '',
    message_id    text        NOT NULL DEFAULT '',
    body          bytea,
    properties    jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    replay_job_id text        NOT NULL DEFAULT ''
);
CREATE INDEX dead_letters_job ON dead_letters (job_id, id);
-- A bus dead letter is collected once, even if the collector dies before it
-- completes the message and sees it again.
CREATE UNIQUE INDEX dead_letters_bus_message ON dead_letters (entity, message_id) WHERE kind = 'bus';
CREATE INDEX dead_letters_kind ON dead_letters (kind, id DESC);

-- +goose Down
DROP TABLE dead_letters, handlers, workflow_definitions, outbox, job_events, attempts, steps, jobs, requests;
