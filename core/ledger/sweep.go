package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// AttemptKey names one attempt of one step.
type AttemptKey struct {
	JobID, StepID string
	AttemptNo     int
	LeaseID       string
}

// DueAcks lists attempts whose ACK deadline passed without an ACK.
func (s *Store) DueAcks(ctx context.Context, limit int) ([]AttemptKey, error) {
	return s.attemptKeys(ctx, sqlDueAcks, limit)
}

// DuePolls lists steps waiting in POLLING whose next poll is due (their
// workflow node sets poll_interval), with their last attempt.
func (s *Store) DuePolls(ctx context.Context, limit int) ([]AttemptKey, error) {
	return s.attemptKeys(ctx, sqlDuePolls, limit)
}

// DueLeases lists acknowledged attempts whose lease expired.
func (s *Store) DueLeases(ctx context.Context, limit int) ([]AttemptKey, error) {
	return s.attemptKeys(ctx, sqlDueLeases, limit)
}

// StuckDispatching lists attempts DISPATCHING for longer than age whose
// directive is no longer waiting in the outbox (so it will never be published).
func (s *Store) StuckDispatching(ctx context.Context, age time.Duration, limit int) ([]AttemptKey, error) {
	return s.attemptKeys(ctx, sqlStuckDispatching, limit, age.Seconds())
}

func (s *Store) attemptKeys(ctx context.Context, query string, args ...any) ([]AttemptKey, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sweep scan: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (AttemptKey, error) {
		var k AttemptKey
		return k, row.Scan(&k.JobID, &k.StepID, &k.AttemptNo, &k.LeaseID)
	})
}

// DueSLAs lists live jobs past their deadline.
func (s *Store) DueSLAs(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, sqlDueSLAs, limit)
	if err != nil {
		return nil, fmt.Errorf("sweep SLAs: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// StaleOutboxRow is an outbox message unsent for too long.
type StaleOutboxRow struct {
	ID                               int64
	Kind, Destination, JobID, StepID string
	AttemptNo, Attempts              int
	LastError                        string
}

// StaleOutbox reports (once each) messages unsent for longer than age and
// makes those that failed to publish available again at once.
func (s *Store) StaleOutbox(ctx context.Context, age time.Duration, limit int) ([]StaleOutboxRow, error) {
	rows, err := s.pool.Query(ctx, sqlStaleOutbox, limit, age.Seconds())
	if err != nil {
		return nil, fmt.Errorf("stale outbox: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (StaleOutboxRow, error) {
		var r StaleOutboxRow
		return r, row.Scan(&r.ID, &r.Kind, &r.Destination, &r.JobID, &r.StepID, &r.AttemptNo, &r.Attempts, &r.LastError)
	})
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

// HasPendingDirective reports whether an attempt's directive still waits in the outbox.
func (t *Tx) HasPendingDirective(ctx context.Context, k AttemptKey) (bool, error) {
	var pending bool
	err := t.tx.QueryRow(ctx, sqlPendingOutbox, k.JobID, k.StepID, k.AttemptNo).Scan(&pending)
	return pending, err
}

// DirectiveCount counts the directives ever enqueued for an attempt.
func (t *Tx) DirectiveCount(ctx context.Context, k AttemptKey) (int, error) {
	var n int
	err := t.tx.QueryRow(ctx, sqlCountDirectives, k.JobID, k.StepID, k.AttemptNo).Scan(&n)
	return n, err
}

// CancelWaiting closes the job's steps that wait without running (for a
// retry, or POLLING for the next poll) and returns them, each with the
// status it had.
func (t *Tx) CancelWaiting(ctx context.Context, jobID, reason string) ([]Step, error) {
	rows, err := t.tx.Query(ctx, sqlCancelWaiting, jobID, reason)
	if err != nil {
		return nil, fmt.Errorf("cancel waiting steps of %s: %w", jobID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Step, error) {
		s := Step{JobID: jobID}
		return s, row.Scan(&s.StepID, &s.Parent, &s.AttemptNo, &s.Status)
	})
}

// AllSteps returns every step of a job: nodes and fan-out children.
func (t *Tx) AllSteps(ctx context.Context, jobID string) ([]Step, error) {
	return t.steps(ctx, sqlAllSteps, jobID)
}

// InsertDeadLetter records something that could not be processed.
func (t *Tx) InsertDeadLetter(ctx context.Context, d DeadLetter) error {
	tag, err := execDeadLetter(ctx, t.tx, d)
	if err == nil && tag.RowsAffected() == 1 {
		t.countDeadLetter(ctx, d.Kind)
	}
	return err
}

// CollectDeadLetter records a bus dead letter, with a BUS_DEAD_LETTER event
// on its job, once: it reports false for a message collected before.
func (s *Store) CollectDeadLetter(ctx context.Context, d DeadLetter) (bool, error) {
	var inserted bool
	err := s.InTx(ctx, func(tx *Tx) error {
		tag, err := execDeadLetter(ctx, tx.tx, d)
		if err != nil {
			return err
		}
		inserted = tag.RowsAffected() == 1
		if inserted {
			tx.countDeadLetter(ctx, d.Kind)
		}
		if inserted && d.JobID != "" {
			tx.Append(Event{JobID: d.JobID, StepID: d.StepID, AttemptNo: d.AttemptNo, Type: EventBusDeadLetter, Reason: d.Reason,
				Data: map[string]any{"entity": d.Entity, "message_id": d.MessageID, "description": d.Description}})
		}
		return nil
	})
	return inserted, err
}

func execDeadLetter(ctx context.Context, tx pgx.Tx, d DeadLetter) (pgconn.CommandTag, error) {
	props, err := json.Marshal(nonNilMap(d.Properties))
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := tx.Exec(ctx, sqlInsertDeadLetter, d.Kind, d.JobID, d.StepID, d.AttemptNo, d.Reason, d.Description,
		d.Entity, d.MessageID, d.Body, props)
	if err != nil {
		return tag, fmt.Errorf("dead letter %s/%s: %w", d.JobID, d.StepID, err)
	}
	return tag, nil
}
