package worker

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lucius-platform/lucius/base/migrate"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations create the worker's tables (worker_executions, worker_effects).
// Apply them with package migrate, next to the bus's
// (busconfig.Config.Migrations) when the bus shares the database.
var Migrations = migrate.Embedded("worker", migrationFiles, "migrations")

// The store's queries, all in one place.
const (
	qClaim = `
INSERT INTO worker_executions AS w (job_id, step_id, attempt_no, lease_id, service, worker_id, claimed_until)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (job_id, step_id, attempt_no, lease_id) DO UPDATE
   SET worker_id = EXCLUDED.worker_id, service = EXCLUDED.service,
       claimed_until = EXCLUDED.claimed_until, takeovers = w.takeovers + 1
 WHERE w.finished_at IS NULL AND w.claimed_until < now()
RETURNING w.takeovers`

	qClaimed = `
SELECT result FROM worker_executions
 WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3 AND lease_id = $4`

	qExtend = `
UPDATE worker_executions SET claimed_until = $6
 WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3 AND lease_id = $4
   AND worker_id = $5 AND finished_at IS NULL`

	qRelease = `
UPDATE worker_executions SET claimed_until = now() - interval '1 microsecond'
 WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3 AND lease_id = $4
   AND worker_id = $5 AND finished_at IS NULL`

	qForget = `
DELETE FROM worker_executions
 WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3 AND lease_id = $4
   AND worker_id = $5 AND finished_at IS NULL`

	qPrune = `
DELETE FROM worker_executions WHERE ctid IN (
  SELECT ctid FROM worker_executions WHERE finished_at < $1 LIMIT $2)`

	// qFinishWithEffect finishes the record and, when it did and $9 (a
	// successful attempt), records the step's effect unless the step has one:
	// one statement, one commit.
	qFinishWithEffect = `
WITH f AS (
  UPDATE worker_executions
     SET status = $6, failure_class = $7, result = $8::jsonb, finished_at = now(), claimed_until = now()
   WHERE job_id = $1 AND step_id = $2 AND attempt_no = $3 AND lease_id = $4
     AND worker_id = $5 AND finished_at IS NULL
  RETURNING service),
e AS (
  INSERT INTO worker_effects (job_id, step_id, attempt_no, lease_id, service, worker_id)
  SELECT $1, $2, $3, $4, service, $5 FROM f WHERE $9
  ON CONFLICT (job_id, step_id) DO NOTHING
  RETURNING 1)
SELECT EXISTS (SELECT FROM f), EXISTS (SELECT FROM e)`

	qPruneEffects = `
DELETE FROM worker_effects WHERE ctid IN (
  SELECT ctid FROM worker_effects WHERE committed_at < $1 LIMIT $2)`
)

// PGStore is a Store in a PostgreSQL database migrated with Migrations.
type PGStore struct {
	pool *pgxpool.Pool
}

var _ Store = (*PGStore)(nil)

// NewPGStore returns a store on pool, which the caller keeps owning.
func NewPGStore(pool *pgxpool.Pool) *PGStore { return &PGStore{pool: pool} }

// Claim implements Store.
func (s *PGStore) Claim(ctx context.Context, c Claim) (ClaimResult, error) {
	// A record forgotten between the insert and the read is claimed afresh.
	for range 3 {
		var takeovers int
		err := s.pool.QueryRow(ctx, qClaim, c.JobID, c.StepID, c.AttemptNo, c.LeaseID, c.Service, c.WorkerID, c.Until).Scan(&takeovers)
		if err == nil {
			return ClaimResult{State: ClaimAcquired, TookOver: takeovers > 0}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return ClaimResult{}, fmt.Errorf("claim %s: %w", c.Key, err)
		}
		var raw []byte
		err = s.pool.QueryRow(ctx, qClaimed, c.JobID, c.StepID, c.AttemptNo, c.LeaseID).Scan(&raw)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return ClaimResult{}, fmt.Errorf("claim %s: read record: %w", c.Key, err)
		}
		if raw == nil {
			return ClaimResult{State: ClaimBusy}, nil
		}
		res := &luciusv1.ResultRequest{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, res); err != nil {
			return ClaimResult{}, fmt.Errorf("claim %s: stored result: %w", c.Key, err)
		}
		return ClaimResult{State: ClaimDone, Result: res}, nil
	}
	return ClaimResult{}, fmt.Errorf("claim %s: record keeps disappearing", c.Key)
}

// Extend implements Store.
func (s *PGStore) Extend(ctx context.Context, key Key, workerID string, until time.Time) error {
	return s.update(ctx, "extend claim", qExtend, key, workerID, until)
}

// Finish implements Store.
func (s *PGStore) Finish(ctx context.Context, key Key, workerID string, result *luciusv1.ResultRequest, effect *Effect) (bool, error) {
	if result == nil {
		return false, fmt.Errorf("finish %s: nil result", key)
	}
	raw, err := protojson.Marshal(result)
	if err != nil {
		return false, fmt.Errorf("finish %s: encode result: %w", key, err)
	}
	status := "SUCCEEDED"
	var class *string
	switch result.GetStatus() {
	case luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED:
	case luciusv1.ResultStatus_RESULT_STATUS_POLLING:
		status = "POLLING"
	default:
		status = "FAILED"
		c := "NON_RETRYABLE"
		if result.GetFailureClass() == luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE {
			c = "RETRYABLE"
		}
		class = &c
	}
	var finished, inserted bool
	err = s.pool.QueryRow(ctx, qFinishWithEffect, key.JobID, key.StepID, key.AttemptNo, key.LeaseID, workerID,
		status, class, string(raw), effect != nil).Scan(&finished, &inserted)
	switch {
	case err != nil:
		return false, fmt.Errorf("finish %s: %w", key, err)
	case !finished:
		return false, fmt.Errorf("finish %s: %w", key, ErrClaimLost)
	}
	return inserted, nil
}

// Release implements Store.
func (s *PGStore) Release(ctx context.Context, key Key, workerID string) error {
	return s.update(ctx, "release claim", qRelease, key, workerID)
}

// Forget implements Store.
func (s *PGStore) Forget(ctx context.Context, key Key, workerID string) error {
	return s.update(ctx, "forget", qForget, key, workerID)
}

// update runs a statement on workerID's unfinished record of key.
func (s *PGStore) update(ctx context.Context, what, query string, key Key, workerID string, args ...any) error {
	tag, err := s.pool.Exec(ctx, query, append([]any{key.JobID, key.StepID, key.AttemptNo, key.LeaseID, workerID}, args...)...)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s %s: %w", what, key, ErrClaimLost)
	}
	return nil
}

// Prune deletes up to batch finished attempt records and step effects older
// than before (records first), returning how many it deleted.
func (s *PGStore) Prune(ctx context.Context, before time.Time, batch int) (int64, error) {
	tag, err := s.pool.Exec(ctx, qPrune, before, batch)
	if err != nil {
		return 0, fmt.Errorf("prune worker executions: %w", err)
	}
	n := tag.RowsAffected()
	if n >= int64(batch) {
		return n, nil
	}
	if tag, err = s.pool.Exec(ctx, qPruneEffects, before, int64(batch)-n); err != nil {
		return n, fmt.Errorf("prune worker effects: %w", err)
	}
	return n + tag.RowsAffected(), nil
}
