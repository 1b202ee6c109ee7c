package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
