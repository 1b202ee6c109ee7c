package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// BreakerState is a circuit breaker's state. A service without a row is CLOSED.
type BreakerState string

// Breaker states.
const (
	BreakerClosed   BreakerState = "CLOSED"
	BreakerOpen     BreakerState = "OPEN"
	BreakerHalfOpen BreakerState = "HALF_OPEN"
)

// Breaker is one worker service's circuit breaker.
type Breaker struct {
	Service     string
	State       BreakerState
	Reason      string
	FailureRate float64
	Attempts    int
	// Since is where the breaker's count of attempts starts: its last
	// transition (the close, or the start of the half-open probes).
	Since time.Time
	// RetryAt is when an OPEN breaker turns HALF_OPEN.
	RetryAt time.Time
	// Probes is how many held steps this half-open round released.
	Probes    int
	UpdatedAt time.Time
	UpdatedBy string
	// Held is how many steps wait for it.
	Held int
}

// BreakerTransition is one change of a breaker's state.
type BreakerTransition struct {
	Service     string
	From, To    BreakerState
	Reason      string
	FailureRate float64
	Attempts    int
	Principal   string
	At          time.Time
}

// ServiceOutcomes counts the attempts of a service that ended in a window.
type ServiceOutcomes struct {
	Service string
	// Ended counts every attempt that ended (cancelled ones aside); Failed
	// those that ended RETRYABLE (a retryable RESULT, an ACK timeout, an
	// expired lease); Succeeded those that succeeded.
	Ended, Failed, Succeeded int
}

// Kinds of hold: what keeps a step from being dispatched.
const (
	HoldCircuit = "circuit" // its service's circuit breaker
	HoldPause   = "pause"   // an operator's pause
)

// HeldStep is a step held back: READY, with no attempt out.
type HeldStep struct {
	JobID, StepID, Kind, Service string
	Tenant, Lane, Workflow       string
	Priority                     int
}

// Breakers lists up to limit breakers (0: all) with a row, by service name
// after the service named after, with how many steps each holds.
func (s *Store) Breakers(ctx context.Context, after string, limit int) ([]Breaker, error) {
	rows, err := s.pool.Query(ctx, sqlBreakers+` WHERE b.service > $1 ORDER BY b.service LIMIT nullif($2, 0)`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("breakers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Breaker, error) { return scanBreaker(row) })
	if err != nil {
		return nil, fmt.Errorf("breakers: %w", err)
	}
	return out, nil
}

// Breaker returns a service's breaker (CLOSED when it never left that state)
// and up to limit of its transitions, newest first.
func (s *Store) Breaker(ctx context.Context, service string, limit int) (Breaker, []BreakerTransition, error) {
	b, err := scanBreaker(s.pool.QueryRow(ctx, sqlBreakers+` WHERE b.service = $1`, service))
	if isNoRows(err) {
		b, err = Breaker{Service: service, State: BreakerClosed}, nil
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM step_holds WHERE kind = 'circuit' AND service = $1`, service).Scan(&b.Held); err != nil {
			return b, nil, fmt.Errorf("breaker %s: %w", service, err)
		}
	}
	if err != nil {
		return b, nil, fmt.Errorf("breaker %s: %w", service, err)
	}
	rows, err := s.pool.Query(ctx, `SELECT service, from_state, to_state, reason, failure_rate, attempts, principal, created_at
	FROM circuit_transitions WHERE service = $1 ORDER BY id DESC LIMIT $2`, service, limit)
	if err != nil {
		return b, nil, fmt.Errorf("breaker %s transitions: %w", service, err)
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (BreakerTransition, error) {
		var t BreakerTransition
		return t, row.Scan(&t.Service, &t.From, &t.To, &t.Reason, &t.FailureRate, &t.Attempts, &t.Principal, &t.At)
	})
	if err != nil {
		return b, nil, fmt.Errorf("breaker %s transitions: %w", service, err)
	}
	return b, ts, nil
}

// BreakerChange moves a breaker From one state To another. From empty
// means from whatever state it is in (an operator's reset).
type BreakerChange struct {
	Service     string
	From, To    BreakerState
	Reason      string
	FailureRate float64
	Attempts    int
	// RetryAt: when an OPEN breaker turns HALF_OPEN.
	RetryAt   time.Time
	Principal string
}

// ErrBreakerMoved means: the breaker was not in the state the change starts from
// (another reconciler or an operator changed it first); nothing was written.
var ErrBreakerMoved = errors.New("the breaker's state changed meanwhile")

// ChangeBreaker applies c and records the transition, under the breaker's
// row lock: concurrent evaluators cannot apply one transition twice. It
// returns the breaker as it was before.
func (s *Store) ChangeBreaker(ctx context.Context, c BreakerChange) (BreakerState, error) {
	var was BreakerState
	err := s.InTx(ctx, func(tx *Tx) error {
		if _, err := tx.tx.Exec(ctx, `INSERT INTO circuit_breakers (service, state) VALUES ($1, 'CLOSED') ON CONFLICT DO NOTHING`, c.Service); err != nil {
			return err
		}
		if err := tx.tx.QueryRow(ctx, `SELECT state FROM circuit_breakers WHERE service = $1 FOR UPDATE`, c.Service).Scan(&was); err != nil {
			return err
		}
		if c.From != "" && was != c.From {
			return ErrBreakerMoved
		}
		if _, err := tx.tx.Exec(ctx, `UPDATE circuit_breakers SET state = $2, reason = $3, failure_rate = $4, attempts = $5,
			since = now(), retry_at = $6, probes = 0, updated_at = now(), updated_by = $7 WHERE service = $1`,
			c.Service, c.To, c.Reason, c.FailureRate, c.Attempts, nullTime(c.RetryAt), c.Principal); err != nil {
			return err
		}
		_, err := tx.tx.Exec(ctx, `INSERT INTO circuit_transitions (service, from_state, to_state, reason, failure_rate, attempts, principal)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, c.Service, was, c.To, c.Reason, c.FailureRate, c.Attempts, c.Principal)
		return err
	})
	if err != nil && !errors.Is(err, ErrBreakerMoved) {
		err = fmt.Errorf("breaker %s %s→%s: %w", c.Service, c.From, c.To, err)
	}
	return was, err
}

// CountProbes adds n to a half-open breaker's released probes; restart
// instead starts its probe round again (since = now, no probes out).
func (s *Store) CountProbes(ctx context.Context, service string, n int, restart bool) error {
	_, err := s.pool.Exec(ctx, `UPDATE circuit_breakers SET probes = CASE WHEN $3 THEN 0 ELSE probes END + $2,
		since = CASE WHEN $3 THEN now() ELSE since END WHERE service = $1 AND state = 'HALF_OPEN'`, service, n, restart)
	if err != nil {
		return fmt.Errorf("breaker %s probes: %w", service, err)
	}
	return nil
}

// ServiceOutcomes counts, per service, the attempts that ended within window
// and since the service's breaker last changed state.
func (s *Store) ServiceOutcomes(ctx context.Context, window time.Duration) ([]ServiceOutcomes, error) {
	rows, err := s.pool.Query(ctx, sqlServiceOutcomes, window.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("service outcomes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ServiceOutcomes, error) {
		var o ServiceOutcomes
		return o, row.Scan(&o.Service, &o.Ended, &o.Failed, &o.Succeeded)
	})
	if err != nil {
		return nil, fmt.Errorf("service outcomes: %w", err)
	}
	return out, nil
}

// HeldSteps lists up to limit steps held for kind (of service, for a
// breaker; every paused step for pauses), in release order.
func (s *Store) HeldSteps(ctx context.Context, kind, service string, limit int) ([]HeldStep, error) {
	return s.holds(ctx, fmt.Sprintf("held steps (%s %s)", kind, service), `kind = $1 AND ($2 = '' OR service = $2)`, kind, service, limit)
}

// holds lists up to limit (the last argument) steps held that match where,
// in release order: highest priority first, then the longest waiting.
func (s *Store) holds(ctx context.Context, what, where string, args ...any) ([]HeldStep, error) {
	rows, err := s.pool.Query(ctx, `SELECT job_id, step_id, kind, service, tenant_id, lane, workflow_id, priority FROM step_holds
	WHERE `+where+fmt.Sprintf(` ORDER BY priority DESC, held_at LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (HeldStep, error) {
		var h HeldStep
		return h, row.Scan(&h.JobID, &h.StepID, &h.Kind, &h.Service, &h.Tenant, &h.Lane, &h.Workflow, &h.Priority)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// HoldStep records that the step is held back.
func (t *Tx) HoldStep(ctx context.Context, h HeldStep) error {
	if _, err := t.tx.Exec(ctx, `INSERT INTO step_holds (job_id, step_id, kind, service, tenant_id, lane, workflow_id, priority)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	ON CONFLICT (job_id, step_id) DO UPDATE SET kind = excluded.kind`,
		h.JobID, h.StepID, h.Kind, h.Service, h.Tenant, h.Lane, h.Workflow, h.Priority); err != nil {
		return fmt.Errorf("hold step %s/%s: %w", h.JobID, h.StepID, err)
	}
	return nil
}

// Unhold forgets a step's hold.
func (t *Tx) Unhold(ctx context.Context, jobID, stepID string) error {
	if _, err := t.tx.Exec(ctx, `DELETE FROM step_holds WHERE job_id = $1 AND step_id = $2`, jobID, stepID); err != nil {
		return fmt.Errorf("release hold %s/%s: %w", jobID, stepID, err)
	}
	return nil
}

func scanBreaker(row pgx.Row) (Breaker, error) {
	var b Breaker
	var retry *time.Time
	err := row.Scan(&b.Service, &b.State, &b.Reason, &b.FailureRate, &b.Attempts, &b.Since, &retry, &b.Probes,
		&b.UpdatedAt, &b.UpdatedBy, &b.Held)
	b.RetryAt = derefTime(retry)
	return b, err
}

const (
	sqlBreakers = `SELECT b.service, b.state, b.reason, b.failure_rate, b.attempts, b.since, b.retry_at, b.probes,
	b.updated_at, b.updated_by, (SELECT count(*) FROM step_holds h WHERE h.kind = 'circuit' AND h.service = b.service)
	FROM circuit_breakers b`

	// sqlServiceOutcomes reads the attempts that ended in the last $1 µs
	// (attempts_completed), counting for each service only those after its
	// breaker's last transition.
	sqlServiceOutcomes = `SELECT s.service, count(*),
	count(*) FILTER (WHERE a.failure_class = 'RETRYABLE'),
	count(*) FILTER (WHERE a.status = 'SUCCEEDED')
	FROM attempts a
	JOIN steps s ON s.job_id = a.job_id AND s.step_id = a.step_id
	LEFT JOIN circuit_breakers b ON b.service = s.service
	WHERE a.completed_at > now() - $1::bigint * interval '1 microsecond'
	  AND a.completed_at > coalesce(b.since, '-infinity')
	  AND a.status <> 'CANCELLED' AND s.service <> ''
	GROUP BY s.service`
)

// HoldingServices lists the services whose breakers hold new directives
// (OPEN or HALF_OPEN).
func (s *Store) HoldingServices(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT service FROM circuit_breakers WHERE state <> 'CLOSED'`)
	if err != nil {
		return nil, fmt.Errorf("holding services: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("holding services: %w", err)
	}
	return out, nil
}

// PauseSet is what operators paused: everything, or these tenants, lanes
// and workflows.
type PauseSet struct {
	Global                    bool
	Tenants, Lanes, Workflows []string
}

// FreedHolds lists up to limit steps held by a pause that no pause in set
// holds any more, in release order.
func (s *Store) FreedHolds(ctx context.Context, set PauseSet, limit int) ([]HeldStep, error) {
	if set.Global {
		return nil, nil
	}
	nonNil := func(v []string) []string {
		if v == nil {
			return []string{}
		}
		return v
	}
	return s.holds(ctx, "freed holds", `kind = 'pause' AND tenant_id <> ALL($1) AND lane <> ALL($2) AND workflow_id <> ALL($3)`,
		nonNil(set.Tenants), nonNil(set.Lanes), nonNil(set.Workflows), limit)
}
