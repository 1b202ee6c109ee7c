package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// InsertRequest stores a request inside a transaction (a replay's). It
// counts in the admission slots without a limit: an operator's replay is
// not refused, but it is counted.
func (t *Tx) InsertRequest(ctx context.Context, r Request) error {
	_, created, err := t.insertRequest(ctx, r)
	if err == nil && !created {
		err = fmt.Errorf("request %s exists already", r.JobID)
	}
	t.claim = &jobSlots{tenant: r.TenantID, lane: r.Routing.Mode}
	return err
}

// insertRequest stores a request and returns when it was received; false
// when a request with its key (RequestKey, else its job id) exists already.
func (t *Tx) insertRequest(ctx context.Context, r Request) (time.Time, bool, error) {
	var received time.Time
	err := t.tx.QueryRow(ctx, sqlInsertRequest, r.JobID, r.TenantID, r.IdempotencyKey, r.RequestHash, r.RequestType,
		r.WorkflowVersion, r.InputRef, r.OutputRef, r.DocID, r.CorrelationID, r.CallbackURL, []byte(r.Command),
		r.Routing.Mode, r.Routing.Partition, r.Routing.RoutingKey, r.Routing.Topic, r.Routing.DecisionSource,
		r.Routing.DecisionReason, r.ReplayOf, r.Notify, r.Principal, r.RequestKey).Scan(&received)
	if isNoRows(err) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("insert request %s: %w", r.JobID, err)
	}
	return received, true, nil
}

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

// StrandedRequests lists requests accepted longer than age ago that no
// orchestrator claimed and whose orchestrator-jobs message left the outbox,
// unless they were requeued maxRequeues times already.
func (s *Store) StrandedRequests(ctx context.Context, age time.Duration, maxRequeues, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, sqlStrandedRequests, limit, age.Seconds(), maxRequeues)
	if err != nil {
		return nil, fmt.Errorf("stranded requests: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// LockRequest returns the request and locks it.
func (t *Tx) LockRequest(ctx context.Context, jobID string) (*Request, time.Time, error) {
	var r Request
	var cancelAt *time.Time
	err := t.tx.QueryRow(ctx, sqlLockRequest, jobID).Scan(&r.JobID, &r.TenantID, &r.IdempotencyKey, &r.RequestHash,
		&r.RequestType, &r.WorkflowVersion, &r.InputRef, &r.OutputRef, &r.DocID, &r.CorrelationID, &r.CallbackURL, &r.Command,
		&r.Routing.Mode, &r.Routing.Partition, &r.Routing.RoutingKey, &r.Routing.Topic, &r.Routing.DecisionSource,
		&r.Routing.DecisionReason, &cancelAt, &r.ReceivedAt, &r.ReplayOf, &r.Notify)
	if isNoRows(err) {
		return nil, time.Time{}, fmt.Errorf("request %s: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock request %s: %w", jobID, err)
	}
	return &r, derefTime(cancelAt), nil
}

// MarkRequestCancelled records a cancellation asked for before any orchestrator
// created the job; the orchestrator that claims it creates it cancelled.
func (t *Tx) MarkRequestCancelled(ctx context.Context, jobID, reason string) error {
	if _, err := t.tx.Exec(ctx, sqlCancelRequest, jobID, reason); err != nil {
		return fmt.Errorf("cancel request %s: %w", jobID, err)
	}
	return nil
}
