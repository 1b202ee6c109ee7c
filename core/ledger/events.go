package ledger

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ListEvents returns up to limit events of a job with ids above afterID, oldest first.
func (s *Store) ListEvents(ctx context.Context, jobID string, afterID int64, limit int) ([]Event, error) {
	rows, err := s.pool.Query(ctx, sqlListEvents, jobID, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", jobID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scanEvent(row) })
}

// EventsAfter reads, for each job of after, its events after the event id
// given, oldest first, up to limit in all: one query for many watchers.
func (s *Store) EventsAfter(ctx context.Context, after map[string]int64, limit int) ([]Event, error) {
	jobs, ids := make([]string, 0, len(after)), make([]int64, 0, len(after))
	for j, id := range after {
		jobs, ids = append(jobs, j), append(ids, id)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM job_events e
	JOIN unnest($1::text[], $2::bigint[]) AS c(job, after) ON e.job_id = c.job AND e.event_id > c.after
	ORDER BY e.event_id LIMIT $3`, jobs, ids, limit)
	if err != nil {
		return nil, fmt.Errorf("events after: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scanEvent(row) })
}

// LastEventID is the id of a job's newest event (0: none yet).
func (s *Store) LastEventID(ctx context.Context, jobID string) (int64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(event_id), 0) FROM job_events WHERE job_id = $1`, jobID).Scan(&id); err != nil {
		return 0, fmt.Errorf("last event of %s: %w", jobID, err)
	}
	return id, nil
}

// TenantEvent is a job event with its job's tenant.
type TenantEvent struct {
	Event
	Tenant string
}

// JobLevelEvents are the events that follow a job's life as a whole.
var JobLevelEvents = []string{EventJobAccepted, EventJobQueued, EventJobCreated, EventJobStatusChanged, EventCancelRequested}

// EventsOfTenants reads up to limit job-level events after event id from,
// of the jobs of tenants (nil: every tenant), oldest first.
func (s *Store) EventsOfTenants(ctx context.Context, from int64, tenants []string, limit int) ([]TenantEvent, error) {
	rows, err := s.pool.Query(ctx, `SELECT e.event_id, e.job_id, e.step_id, e.attempt_no, e.type, e.from_status, e.to_status,
		e.reason, e.data, e.created_at, r.tenant_id
	FROM job_events e JOIN requests r ON r.job_id = e.job_id
	WHERE e.event_id > $1 AND e.type = ANY($2) AND ($3::text[] IS NULL OR r.tenant_id = ANY($3))
	ORDER BY e.event_id LIMIT $4`, from, JobLevelEvents, tenants, limit)
	if err != nil {
		return nil, fmt.Errorf("tenant events: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (TenantEvent, error) {
		var te TenantEvent
		return te, scanEventInto(row, &te.Event, &te.Tenant)
	})
}

// LastEventIDOverall is the newest event id of the ledger (0: none).
func (s *Store) LastEventIDOverall(ctx context.Context) (int64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(event_id), 0) FROM job_events`).Scan(&id); err != nil {
		return 0, fmt.Errorf("last event: %w", err)
	}
	return id, nil
}

// CountEvents counts a job's events of one type.
func (t *Tx) CountEvents(ctx context.Context, jobID, eventType string) (int, error) {
	var n int
	err := t.tx.QueryRow(ctx, sqlCountEvents, jobID, eventType).Scan(&n)
	return n, err
}

// HasAttemptEvent reports whether an attempt already has an event of
// eventType whose data holds every field of match (a retried callback's
// event is recorded once).
func (t *Tx) HasAttemptEvent(ctx context.Context, k AttemptKey, eventType string, match map[string]any) (bool, error) {
	var found bool
	err := t.tx.QueryRow(ctx, sqlHasAttemptEvent, k.JobID, k.StepID, k.AttemptNo, eventType, match).Scan(&found)
	return found, err
}

// Append records audit events, written when the transaction commits.
func (t *Tx) Append(events ...Event) { t.events = append(t.events, events...) }

// Annotate sets key in the data of every event of job appended so far that
// lacks it, e.g. the correlation id a callback echoed on the transitions it
// caused. An empty value changes nothing.
func (t *Tx) Annotate(jobID, key, value string) {
	if value == "" {
		return
	}
	for i := range t.events {
		e := &t.events[i]
		if e.JobID != jobID {
			continue
		}
		if _, ok := e.Data[key]; ok {
			continue
		}
		data := make(map[string]any, len(e.Data)+1)
		for k, v := range e.Data {
			data[k] = v
		}
		data[key] = value
		e.Data = data
	}
}
