-- +goose Up
-- Priority (0–10) of a job, from its command, and of the messages sent for
-- it. A message of priority p is inserted available p × 6 s early (see
-- bus.PriorityHeadStart), so the dispatcher's (available_at, id) order claims
-- it first among the waiting messages without starving priority 0; the
-- column passes it on to the bus.
ALTER TABLE jobs ADD COLUMN priority smallint NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN priority smallint NOT NULL DEFAULT 0;

-- Circuit breakers, one per worker service (seed 002). A service with no row
-- is CLOSED. since is where the breaker's failure count starts: the last
-- close (so failures before an operator's reset do not trip it again) or,
-- when HALF_OPEN, the start of the probes. retry_at: when an OPEN breaker
-- turns HALF_OPEN. probes: how many held steps this half-open round released.
CREATE TABLE circuit_breakers (
    service      text             PRIMARY KEY,
    state        text             NOT NULL CHECK (state IN ('CLOSED', 'OPEN', 'HALF_OPEN')),
    reason       text             NOT NULL DEFAULT '',
    failure_rate double precision NOT NULL DEFAULT 0,
    attempts     int              NOT NULL DEFAULT 0,
    since        timestamptz      NOT NULL DEFAULT now(),
    retry_at     timestamptz,
    probes       int              NOT NULL DEFAULT 0,
    updated_at   timestamptz      NOT NULL DEFAULT now(),
    updated_by   text             NOT NULL DEFAULT ''
);

-- Every change of a breaker's state, for operators.
CREATE TABLE circuit_transitions (
    id           bigserial        PRIMARY KEY,
    service      text             NOT NULL,
    from_state   text             NOT NULL,
    to_state     text             NOT NULL,
    reason       text             NOT NULL DEFAULT '',
    failure_rate double precision NOT NULL DEFAULT 0,
    attempts     int              NOT NULL DEFAULT 0,
    principal    text             NOT NULL DEFAULT '',
    created_at   timestamptz      NOT NULL DEFAULT now()
);
CREATE INDEX circuit_transitions_service ON circuit_transitions (service, id DESC);

-- Steps held back, READY with no attempt out: by their service's circuit
-- breaker (kind circuit, reason CIRCUIT_OPEN) or by an operator's pause
-- (kind pause, reason PAUSED). Released highest priority first, then oldest;
-- tenant, lane and workflow say which pauses a held step waits for.
CREATE TABLE step_holds (
    job_id      text        NOT NULL,
    step_id     text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('circuit', 'pause')),
    service     text        NOT NULL,
    tenant_id   text        NOT NULL,
    lane        text        NOT NULL,
    workflow_id text        NOT NULL,
    priority    smallint    NOT NULL DEFAULT 0,
    held_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, step_id),
    FOREIGN KEY (job_id, step_id) REFERENCES steps (job_id, step_id) ON DELETE CASCADE
);
CREATE INDEX step_holds_release ON step_holds (kind, service, priority DESC, held_at);

-- The breakers' window: attempts that ended recently.
CREATE INDEX attempts_completed ON attempts (completed_at) WHERE completed_at IS NOT NULL;

-- +goose Down
DROP INDEX attempts_completed;
DROP TABLE step_holds, circuit_transitions, circuit_breakers;
ALTER TABLE outbox DROP COLUMN priority;
ALTER TABLE jobs DROP COLUMN priority;
