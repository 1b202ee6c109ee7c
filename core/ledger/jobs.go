package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

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

// jobFields are the fields UpdateJob writes.
type jobFields struct {
	status                         JobStatus
	currentStep, reason, resultRef string
	cancelRequestedAt, completedAt time.Time
}

func fieldsOf(j *Job) jobFields {
	return jobFields{status: j.Status, currentStep: j.CurrentStepID, reason: j.Reason, resultRef: j.ResultRef,
		cancelRequestedAt: j.CancelRequestedAt, completedAt: j.CompletedAt}
}

// LockJob returns the job and locks it. ErrNotFound when no orchestrator created it yet.
func (t *Tx) LockJob(ctx context.Context, jobID string) (*Job, error) {
	j, err := scanJob(t.tx.QueryRow(ctx, sqlLockJob, jobID))
	if isNoRows(err) {
		return nil, fmt.Errorf("job %s: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("lock job %s: %w", jobID, err)
	}
	t.remember(j)
	return j, nil
}

// InsertJob creates the job unless it exists; it reports whether it did.
func (t *Tx) InsertJob(ctx context.Context, j *Job) (bool, error) {
	tag, err := t.tx.Exec(ctx, sqlInsertJob, j.JobID, j.TenantID, j.RequestType, j.WorkflowID, j.WorkflowVersion,
		j.Status, j.Routing.Mode, j.Routing.Partition, j.Routing.RoutingKey, j.Routing.Topic, j.Routing.DecisionSource,
		j.Routing.DecisionReason, j.InputRef, j.OutputRef, j.DocID, j.CorrelationID, j.CallbackURL, jsonOrEmpty(j.Payload),
		j.OwnerID, j.OwnerEpoch, j.CurrentStepID, j.Reason, nullTime(j.CancelRequestedAt), nullTime(j.CompletedAt),
		j.ReplayOf, nullTime(j.DeadlineAt), j.Notify, j.Priority)
	if err != nil {
		return false, fmt.Errorf("insert job %s: %w", j.JobID, err)
	}
	if tag.RowsAffected() == 1 {
		t.remember(j)
	}
	return tag.RowsAffected() == 1, nil
}

// UpdateJob writes the job's mutable fields (status, current step, reason,
// result, cancellation, completion).
func (t *Tx) UpdateJob(ctx context.Context, j *Job) error {
	if was, ok := t.written[j.JobID]; ok && was == fieldsOf(j) {
		return nil // nothing changed: no write (and no WAL for the row)
	}
	t.tx.holdOne("update job "+j.JobID, sqlUpdateJob, j.JobID, j.Status, j.CurrentStepID, j.Reason, j.ResultRef,
		nullTime(j.CancelRequestedAt), nullTime(j.CompletedAt))
	t.remember(j)
	return nil
}
