package chaos

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The queries the checker runs, in one place. Each reads the chaos jobs
// ($1, their ids) from the ledger, or the worker skeleton's tables, which
// live in the same database.
const (
	// A request with no job yet (never claimed) reads as RECEIVED.
	queryJobs = `SELECT r.job_id, r.received_at, coalesce(j.status, 'RECEIVED'), coalesce(j.current_step_id, ''), j.completed_at
		FROM requests r LEFT JOIN jobs j USING (job_id) WHERE r.job_id = ANY($1)`
	queryTaskSteps = `SELECT job_id, step_id, status, attempt_no, reason
		FROM steps WHERE job_id = ANY($1) AND kind = 'task'`
	queryEvents = `SELECT job_id, step_id, attempt_no, type, from_status, to_status, reason,
			coalesce(data->>'deliver_at', ''), coalesce(data->>'callback', ''), created_at
		FROM job_events WHERE job_id = ANY($1) ORDER BY job_id, created_at, event_id`
	queryEffects = `SELECT job_id, step_id, count(*)
		FROM worker_effects WHERE job_id = ANY($1) GROUP BY job_id, step_id`
	queryExecutions = `SELECT job_id, step_id, count(*) FILTER (WHERE status = 'SUCCEEDED'), coalesce(sum(takeovers), 0)
		FROM worker_executions WHERE job_id = ANY($1) GROUP BY job_id, step_id`
	queryDeadLetters = `SELECT kind, reason, count(*) FROM dead_letters WHERE job_id = ANY($1) GROUP BY kind, reason`
	// Every request in the ledger: the run owns its cluster, so any beyond
	// the chaos jobs would be phantoms.
	queryRequestCount  = `SELECT count(*) FROM requests`
	queryTerminalCount = `SELECT count(*) FROM jobs WHERE job_id = ANY($1) AND status IN ('SUCCEEDED', 'FAILED_FINAL', 'CANCELLED')`
)

// event is one job_events row.
type event struct {
	StepID    string
	AttemptNo int
	Type      string
	From, To  string
	Reason    string
	// Callback names the callback (ACK, RESULT, HEARTBEAT) a
	// CALLBACK_DUPLICATE or CALLBACK_REJECTED event is about.
	Callback string
	// DeliverAt is when an ATTEMPT_CREATED event's directive is due (later
	// than At for a retry after a backoff).
	DeliverAt time.Time
	At        time.Time
}

// stepRecord is one task step of a chaos job, with what the workers recorded.
type stepRecord struct {
	ID        string
	Status    string
	AttemptNo int
	Reason    string
	// Effects counts worker_effects rows; SucceededEvents the
	// STEP_STATUS_CHANGED events to SUCCEEDED; SucceededExecutions the
	// attempts a worker ran to a SUCCEEDED RESULT; Takeovers the executions a
	// worker took over from one that died.
	Effects, SucceededEvents, SucceededExecutions, Takeovers int
}

// jobRecord is one chaos job as the ledger ends up with it.
type jobRecord struct {
	ID string
	// Index is the job's place in the plan; Fault what it was given.
	Index       int
	Fault       *Fault
	Status      string
	CurrentStep string
	ReceivedAt  time.Time
	CompletedAt time.Time // zero while not terminal
	Steps       map[string]*stepRecord
	// Events in time order.
	Events []event
}

// snapshot is everything the checks look at.
type snapshot struct {
	jobs []*jobRecord
	// orphanEffects are worker_effects rows of chaos jobs naming no task step.
	orphanEffects []string
	deadLetters   map[string]int // by "kind/reason"
	requests      int            // in the whole ledger
}

// loader builds a snapshot, one query at a time.
type loader struct {
	snap *snapshot
	byID map[string]*jobRecord
}

// load reads the snapshot of the jobs ids (by plan index; "" never accepted).
func load(ctx context.Context, pool *pgxpool.Pool, ids []string, faults []*Fault) (*snapshot, error) {
	l := &loader{snap: &snapshot{deadLetters: map[string]int{}}, byID: map[string]*jobRecord{}}
	var list []string
	for i, id := range ids {
		if id != "" {
			l.byID[id] = &jobRecord{ID: id, Index: i, Fault: faults[i], Status: "NOT_ACCEPTED", Steps: map[string]*stepRecord{}}
			list = append(list, id)
		}
	}
	// In this order: steps before the events and effects that refer to them.
	for _, q := range []struct {
		what, query string
		scan        func(pgx.Rows) error
	}{
		{"jobs", queryJobs, l.job},
		{"steps", queryTaskSteps, l.step},
		{"events", queryEvents, l.event},
		{"worker effects", queryEffects, l.effect},
		{"worker executions", queryExecutions, l.execution},
		{"dead letters", queryDeadLetters, l.deadLetter},
	} {
		if err := each(ctx, pool, q.query, q.scan, list); err != nil {
			return nil, fmt.Errorf("%s: %w", q.what, err)
		}
	}
	if err := pool.QueryRow(ctx, queryRequestCount).Scan(&l.snap.requests); err != nil {
		return nil, fmt.Errorf("requests: %w", err)
	}
	for _, j := range l.byID {
		l.snap.jobs = append(l.snap.jobs, j)
	}
	sort.Slice(l.snap.jobs, func(a, b int) bool { return l.snap.jobs[a].Index < l.snap.jobs[b].Index })
	return l.snap, nil
}

func (l *loader) job(rows pgx.Rows) error {
	var id string
	var completed *time.Time
	j := &jobRecord{}
	if err := rows.Scan(&id, &j.ReceivedAt, &j.Status, &j.CurrentStep, &completed); err != nil {
		return err
	}
	rec := l.byID[id]
	rec.Status, rec.CurrentStep, rec.ReceivedAt = j.Status, j.CurrentStep, j.ReceivedAt
	if completed != nil {
		rec.CompletedAt = *completed
	}
	return nil
}

func (l *loader) step(rows pgx.Rows) error {
	var jobID string
	s := &stepRecord{}
	if err := rows.Scan(&jobID, &s.ID, &s.Status, &s.AttemptNo, &s.Reason); err != nil {
		return err
	}
	l.byID[jobID].Steps[s.ID] = s
	return nil
}

func (l *loader) event(rows pgx.Rows) error {
	var jobID, deliverAt string
	var e event
	if err := rows.Scan(&jobID, &e.StepID, &e.AttemptNo, &e.Type, &e.From, &e.To, &e.Reason, &deliverAt, &e.Callback, &e.At); err != nil {
		return err
	}
	if deliverAt != "" {
		e.DeliverAt, _ = time.Parse(time.RFC3339Nano, deliverAt)
	}
	j := l.byID[jobID]
	j.Events = append(j.Events, e)
	if s := j.Steps[e.StepID]; s != nil && e.Type == "STEP_STATUS_CHANGED" && e.To == statusSucceeded {
		s.SucceededEvents++
	}
	return nil
}

func (l *loader) effect(rows pgx.Rows) error {
	var jobID, stepID string
	var n int
	if err := rows.Scan(&jobID, &stepID, &n); err != nil {
		return err
	}
	if s := l.byID[jobID].Steps[stepID]; s != nil {
		s.Effects += n
	} else {
		l.snap.orphanEffects = append(l.snap.orphanEffects, jobID+"/"+stepID)
	}
	return nil
}

func (l *loader) execution(rows pgx.Rows) error {
	var jobID, stepID string
	var succeeded, takeovers int
	if err := rows.Scan(&jobID, &stepID, &succeeded, &takeovers); err != nil {
		return err
	}
	if s := l.byID[jobID].Steps[stepID]; s != nil {
		s.SucceededExecutions, s.Takeovers = succeeded, takeovers
	}
	return nil
}

func (l *loader) deadLetter(rows pgx.Rows) error {
	var kind, reason string
	var n int
	if err := rows.Scan(&kind, &reason, &n); err != nil {
		return err
	}
	l.snap.deadLetters[kind+"/"+reason] = n
	return nil
}

// each runs query with args and calls scan for every row.
func each(ctx context.Context, pool *pgxpool.Pool, query string, scan func(pgx.Rows) error, args ...any) error {
	rows, err := pool.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// countTerminal counts the jobs ids that reached a terminal status.
func countTerminal(ctx context.Context, pool *pgxpool.Pool, ids []string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, queryTerminalCount, ids).Scan(&n)
	return n, err
}
