package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Accepted is the answer to Accept.
type Accepted struct {
	// JobID is the request's job: the one it was given, or the earlier
	// request's it repeats (also set with ErrIdempotencyConflict).
	JobID string
	// Created is false when the request repeated an earlier one.
	Created bool
	// Status is the job's status now: RECEIVED when created.
	Status     JobStatus
	ReceivedAt time.Time
	// AssetRevision is the revision of the request's asset the job
	// processes (0: the request names no asset).
	AssetRevision int
}

// accepted is a JOB_ACCEPTED event's data.
func accepted(r Request) map[string]any {
	data := map[string]any{"tenant_id": r.TenantID, "request_type": r.RequestType, "correlation_id": r.CorrelationID}
	if r.Principal != "" {
		data["principal"] = r.Principal
	}
	return data
}

// Accept stores a new request with its outbox message and JOB_ACCEPTED event in
// one transaction, taking an admission slot in the request's tenant, lane and
// the global scope. If a request with its RequestKey exists already, nothing
// is written: the same request hash returns the existing job, a different one
// ErrIdempotencyConflict.
// A scope at its limit fails with a *LimitError and nothing is written.
func (s *Store) Accept(ctx context.Context, r Request, msg OutboxMessage, limits Limits) (Accepted, error) {
	if err := s.precheckSlots(ctx, r, limits); err != nil {
		return Accepted{}, err
	}
	var created bool
	var received time.Time
	var revision int
	err := s.InTx(ctx, func(tx *Tx) error {
		var err error
		if received, created, err = tx.insertRequest(ctx, r); err != nil || !created {
			return err
		}
		if r.Asset.AssetID != "" {
			if revision, err = tx.addRevision(ctx, r); err != nil {
				return err
			}
		}
		tx.claim = &jobSlots{tenant: r.TenantID, lane: r.Routing.Mode, limits: limits}
		tx.Enqueue(msg)
		tx.Append(Event{JobID: r.JobID, Type: EventJobAccepted, ToStatus: string(JobReceived),
			Data: accepted(r)})
		return nil
	})
	if err != nil {
		return Accepted{}, err
	}
	if created { // no second round trip to read back what was just written
		return Accepted{JobID: r.JobID, Created: true, Status: JobReceived, ReceivedAt: received, AssetRevision: revision}, nil
	}
	var jobID, hash string
	if err := s.pool.QueryRow(ctx, sqlRequestByKey, r.key()).Scan(&jobID, &hash); err != nil {
		return Accepted{}, fmt.Errorf("read request %s: %w", r.key(), err)
	}
	if hash != r.RequestHash {
		return Accepted{JobID: jobID}, ErrIdempotencyConflict
	}
	job, err := s.GetJob(ctx, jobID)
	if err != nil {
		return Accepted{}, err
	}
	return Accepted{JobID: jobID, Status: job.Status, ReceivedAt: job.CreatedAt, AssetRevision: job.AssetRevision}, nil
}

// RequestExists reports whether a request with this key (Request.RequestKey)
// was accepted.
func (s *Store) RequestExists(ctx context.Context, requestKey string) (bool, error) {
	var exists bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM requests WHERE request_key = $1)`, requestKey).Scan(&exists)
	return exists, err
}

// DetachedDirective returns the directive DetachDirective kept for an
// attempt, and the attempt's lease id. ErrNotFound when there is no such
// attempt or it was sent whole.
func (s *Store) DetachedDirective(ctx context.Context, jobID, stepID string, attemptNo int) (directive []byte, leaseID string, err error) {
	err = s.pool.QueryRow(ctx, sqlDetachedDirective, jobID, stepID, attemptNo).Scan(&leaseID, &directive)
	if isNoRows(err) || (err == nil && directive == nil) {
		return nil, "", fmt.Errorf("detached directive %s/%s#%d: %w", jobID, stepID, attemptNo, ErrNotFound)
	}
	if err != nil {
		return nil, "", fmt.Errorf("detached directive %s/%s#%d: %w", jobID, stepID, attemptNo, err)
	}
	return directive, leaseID, nil
}

// GetJob returns a job, or the early view of an accepted request no
// orchestrator has created yet (RECEIVED, QUEUED or CANCELLING).
func (s *Store) GetJob(ctx context.Context, jobID string) (*Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, sqlGetJob, jobID))
	if isNoRows(err) {
		return nil, fmt.Errorf("job %s: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", jobID, err)
	}
	return j, nil
}

// JobFilter selects jobs for ListJobs.
type JobFilter struct {
	TenantID string // normalized; empty for all tenants
	// Tenants scopes the listing to the caller's tenants: nil lists every
	// tenant, an empty slice none.
	Tenants  []string
	Statuses []JobStatus // empty for all
	Limit    int
	// After continues a listing after the job with this creation time and id.
	AfterTime  time.Time
	AfterJobID string
	// WorkflowID keeps only jobs of this workflow (empty: all).
	WorkflowID string
	// CreatedFrom and CreatedBefore bound the acceptance time (zero: open).
	CreatedFrom, CreatedBefore time.Time
}

// ListJobs returns jobs newest first.
func (s *Store) ListJobs(ctx context.Context, f JobFilter) ([]*Job, error) {
	statuses := make([]string, len(f.Statuses))
	for i, st := range f.Statuses {
		statuses[i] = string(st)
	}
	rows, err := s.pool.Query(ctx, sqlListJobs, f.TenantID, nullTime(f.AfterTime), f.AfterJobID, statuses, f.Limit,
		f.Tenants != nil, append([]string{}, f.Tenants...), f.WorkflowID, nullTime(f.CreatedFrom), nullTime(f.CreatedBefore))
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Job, error) { return scanJob(row) })
}

// StepWithAttempts is a step and its attempts, oldest first.
type StepWithAttempts struct {
	Step
	Attempts []Attempt
}

// StepFilter selects and pages a job's steps.
type StepFilter struct {
	// Kinds keeps only these kinds (empty: all).
	Kinds []string
	Limit int
	// After continues after this step (its definition index, child index and id).
	AfterIndex, AfterChild int
	AfterStepID            string
}

// ListSteps returns a job's steps in definition order (each fan-out's children
// after it) with their attempts. A job not yet created by an orchestrator has none.
func (s *Store) ListSteps(ctx context.Context, jobID string, f StepFilter) ([]StepWithAttempts, error) {
	if f.Limit == 0 {
		f.Limit = 1 << 30
	}
	if f.Kinds == nil {
		f.Kinds = []string{}
	}
	afterIndex := f.AfterIndex
	if f.AfterStepID == "" {
		afterIndex = -1
	}
	rows, err := s.pool.Query(ctx, sqlListSteps, jobID, f.Kinds, afterIndex, f.AfterChild, f.AfterStepID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("steps of %s: %w", jobID, err)
	}
	steps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Step, error) { return scanStep(row) })
	if err != nil {
		return nil, fmt.Errorf("steps of %s: %w", jobID, err)
	}
	if len(steps) == 0 {
		return nil, nil
	}
	ids := make([]string, len(steps))
	for i, st := range steps {
		ids[i] = st.StepID
	}
	rows, err = s.pool.Query(ctx, sqlAttemptsOfSteps, jobID, ids)
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", jobID, err)
	}
	attempts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		a, err := scanAttempt(row)
		if err != nil {
			return Attempt{}, err
		}
		return *a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", jobID, err)
	}
	byStep := map[string][]Attempt{}
	for _, a := range attempts {
		byStep[a.StepID] = append(byStep[a.StepID], a)
	}
	out := make([]StepWithAttempts, len(steps))
	for i, st := range steps {
		out[i] = StepWithAttempts{Step: st, Attempts: byStep[st.StepID]}
	}
	return out, nil
}

// ListEvents returns up to limit events of a job with ids above afterID, oldest first.
func (s *Store) ListEvents(ctx context.Context, jobID string, afterID int64, limit int) ([]Event, error) {
	rows, err := s.pool.Query(ctx, sqlListEvents, jobID, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", jobID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scanEvent(row) })
}

// Reclaimed is a job taken over from a silent owner.
type Reclaimed struct {
	JobID         string
	PreviousOwner string
	Epoch         int64
}

// ReclaimOrphans takes over up to limit live jobs whose owner has not
// heartbeated for threshold, incrementing their owner epoch, and records an
// OWNER_CHANGED event for each.
func (s *Store) ReclaimOrphans(ctx context.Context, owner string, threshold time.Duration, limit int) ([]Reclaimed, error) {
	var out []Reclaimed
	err := s.InTx(ctx, func(tx *Tx) error {
		out = out[:0]
		rows, err := tx.tx.Query(ctx, sqlReclaim, owner, threshold.Seconds(), limit)
		if err != nil {
			return fmt.Errorf("reclaim: %w", err)
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Reclaimed, error) {
			var r Reclaimed
			return r, row.Scan(&r.JobID, &r.PreviousOwner, &r.Epoch)
		})
		if err != nil {
			return fmt.Errorf("reclaim: %w", err)
		}
		for _, r := range out {
			tx.Append(Event{JobID: r.JobID, Type: EventOwnerChanged, Reason: "ORPHAN_RECLAIMED",
				Data: map[string]any{"previous_owner": r.PreviousOwner, "owner": owner, "owner_epoch": r.Epoch}})
		}
		return nil
	})
	return out, err
}

// CountOrphans counts the live jobs whose owner has been silent longer than
// threshold: those ReclaimOrphans would take now.
func (s *Store) CountOrphans(ctx context.Context, threshold time.Duration) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, sqlCountOrphans, threshold.Seconds()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count orphans: %w", err)
	}
	return n, nil
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
