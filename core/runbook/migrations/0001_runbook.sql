-- +goose Up
-- Runbooks (package runbook): versioned runbooks, their batches, members,
-- phase, step and init executions (seed 003, in PostgreSQL types). Each
-- version's member data lives in its own table runbook_{name}_v{version},
-- created by Store.Apply, not here.

CREATE TABLE runbooks (
    id                     bigserial   PRIMARY KEY,
    name                   text        NOT NULL,
    version                int         NOT NULL,
    yaml_content           text        NOT NULL,
    content_hash           text        NOT NULL,              -- sha256 of yaml_content: same content again is a no-op
    data_table_name        text        NOT NULL UNIQUE,       -- two versions never share a member table
    columns                text[]      NOT NULL,
    is_active              boolean     NOT NULL DEFAULT false,
    overdue_behavior       text        NOT NULL DEFAULT 'rerun' CHECK (overdue_behavior IN ('rerun', 'ignore')),
    ignore_overdue_applied boolean     NOT NULL DEFAULT false,
    rerun_init             boolean     NOT NULL DEFAULT false,
    created_at             timestamptz NOT NULL DEFAULT now(),
    activated_at           timestamptz,
    UNIQUE (name, version)
);
CREATE UNIQUE INDEX runbooks_one_active ON runbooks (name) WHERE is_active;

CREATE TABLE batches (
    id                 bigserial   PRIMARY KEY,
    runbook_id         bigint      NOT NULL REFERENCES runbooks (id), -- the version governing it now
    runbook_name       text        NOT NULL,
    batch_start_time   timestamptz NOT NULL,
    status             text        NOT NULL CHECK (status IN ('detected', 'init_dispatched', 'active', 'completed', 'failed')),
    detected_at        timestamptz NOT NULL DEFAULT now(),
    init_dispatched_at timestamptz,
    completed_at       timestamptz,
    UNIQUE (runbook_name, batch_start_time)
);

CREATE TABLE batch_members (
    id                   bigserial   PRIMARY KEY,
    batch_id             bigint      NOT NULL REFERENCES batches (id),
    member_key           text        NOT NULL,
    status               text        NOT NULL CHECK (status IN ('active', 'removed')),
    added_at             timestamptz NOT NULL DEFAULT now(),
    removed_at           timestamptz,
    add_dispatched_at    timestamptz,  -- member-added emitted (members found at batch detection never get one)
    remove_dispatched_at timestamptz,
    UNIQUE (batch_id, member_key)
);

CREATE TABLE phase_executions (
    id              bigserial   PRIMARY KEY,
    batch_id        bigint      NOT NULL REFERENCES batches (id),
    phase_name      text        NOT NULL,
    offset_minutes  int         NOT NULL,
    due_at          timestamptz NOT NULL,
    runbook_version int         NOT NULL,
    status          text        NOT NULL CHECK (status IN ('pending', 'dispatched', 'completed', 'failed', 'skipped')),
    dispatched_at   timestamptz,
    completed_at    timestamptz,
    UNIQUE (batch_id, runbook_version, phase_name)
);
-- The scheduler's "which phases are due" scan.
CREATE INDEX phase_executions_due ON phase_executions (due_at) WHERE status = 'pending';

-- step_executions: kind phase (pre-created by the scheduler, or by catch-up),
-- rollback (parent_id: the failed step), removal (on_member_removed).
CREATE TABLE step_executions (
    id                 bigserial   PRIMARY KEY,
    phase_execution_id bigint      REFERENCES phase_executions (id),  -- NULL for removal steps
    batch_member_id    bigint      NOT NULL REFERENCES batch_members (id),
    kind               text        NOT NULL DEFAULT 'phase' CHECK (kind IN ('phase', 'rollback', 'removal')),
    parent_id          bigint      REFERENCES step_executions (id),
    step_name          text        NOT NULL,
    step_index         int         NOT NULL,
    worker_id          text        NOT NULL,
    function_name      text        NOT NULL,
    params_json        jsonb       NOT NULL,
    status             text        NOT NULL CHECK (status IN ('pending', 'dispatched', 'succeeded', 'failed', 'polling', 'poll_timeout', 'rolled_back', 'cancelled')),
    job_id             text,
    result_json        jsonb,
    error_message      text,
    dispatched_at      timestamptz,
    completed_at       timestamptz,
    is_poll_step       boolean     NOT NULL DEFAULT false,
    poll_interval_sec  int,
    poll_timeout_sec   int,
    poll_started_at    timestamptz,
    last_polled_at     timestamptz,
    poll_count         int         NOT NULL DEFAULT 0,
    poll_checked_at    timestamptz, -- the scheduler emitted poll-check for the current last_polled_at
    on_failure         text        NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX step_executions_job ON step_executions (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX step_executions_phase ON step_executions (phase_execution_id, step_index);
CREATE INDEX step_executions_member ON step_executions (batch_member_id);
CREATE INDEX step_executions_polling ON step_executions (last_polled_at) WHERE status = 'polling';

CREATE TABLE init_executions (
    id                bigserial   PRIMARY KEY,
    batch_id          bigint      NOT NULL REFERENCES batches (id),
    step_name         text        NOT NULL,
    step_index        int         NOT NULL,
    runbook_version   int         NOT NULL,
    worker_id         text        NOT NULL,
    function_name     text        NOT NULL,
    params_json       jsonb       NOT NULL,
    status            text        NOT NULL CHECK (status IN ('pending', 'dispatched', 'succeeded', 'failed', 'polling', 'poll_timeout', 'rolled_back', 'cancelled')),
    job_id            text,
    result_json       jsonb,
    error_message     text,
    dispatched_at     timestamptz,
    completed_at      timestamptz,
    is_poll_step      boolean     NOT NULL DEFAULT false,
    poll_interval_sec int,
    poll_timeout_sec  int,
    poll_started_at   timestamptz,
    last_polled_at    timestamptz,
    poll_count        int         NOT NULL DEFAULT 0,
    poll_checked_at   timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (batch_id, runbook_version, step_index)
);
CREATE UNIQUE INDEX init_executions_job ON init_executions (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX init_executions_polling ON init_executions (last_polled_at) WHERE status = 'polling';

-- +goose Down
-- Member data tables (runbooks.data_table_name) are created at run time and
-- are left in place.
DROP TABLE init_executions, step_executions, phase_executions, batch_members, batches, runbooks;
