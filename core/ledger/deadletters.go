package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeadLetterFilter selects dead letters.
type DeadLetterFilter struct {
	Kind, JobID string
	BeforeID    int64 // page: ids below this (0: from the newest)
	Limit       int
	// Tenants scopes the listing to dead letters of these tenants' jobs:
	// nil lists all, an empty slice none.
	Tenants []string
}

// ListDeadLetters returns dead letters newest first.
func (s *Store) ListDeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error) {
	rows, err := s.pool.Query(ctx, sqlListDeadLetters, f.Kind, f.JobID, f.BeforeID, f.Limit,
		f.Tenants != nil, append([]string{}, f.Tenants...))
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) { return scanDeadLetter(row) })
}

// GetDeadLetter returns one dead letter.
func (s *Store) GetDeadLetter(ctx context.Context, id int64) (*DeadLetter, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, kind, job_id, step_id, attempt_no, reason, description, entity,
		message_id, body, properties, created_at, replay_job_id FROM dead_letters WHERE id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("dead letter %d: %w", id, err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (DeadLetter, error) { return scanDeadLetter(row) })
	if isNoRows(err) {
		return nil, fmt.Errorf("dead letter %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("dead letter %d: %w", id, err)
	}
	return &d, nil
}

func scanDeadLetter(row pgx.Row) (DeadLetter, error) {
	var d DeadLetter
	var props []byte
	if err := row.Scan(&d.ID, &d.Kind, &d.JobID, &d.StepID, &d.AttemptNo, &d.Reason, &d.Description, &d.Entity,
		&d.MessageID, &d.Body, &props, &d.CreatedAt, &d.ReplayJobID); err != nil {
		return d, err
	}
	return d, json.Unmarshal(props, &d.Properties)
}

// PendingDeadLetters counts the dead letters not dealt with, by kind: step
// dead letters whose job was not replayed, and every bus dead letter (they
// are inspected, never replayed). A kind without any is absent.
func (s *Store) PendingDeadLetters(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, sqlPendingDeadLetters)
	if err != nil {
		return nil, fmt.Errorf("pending dead letters: %w", err)
	}
	out := map[string]int64{}
	err = pgxForEach(rows, func(row pgx.CollectableRow) error {
		var kind string
		var n int64
		if err := row.Scan(&kind, &n); err != nil {
			return err
		}
		out[kind] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pending dead letters: %w", err)
	}
	return out, nil
}

// MarkReplayed links a failed job's step dead letters to the job replaying it.
func (t *Tx) MarkReplayed(ctx context.Context, jobID, replayJobID string) error {
	if _, err := t.tx.Exec(ctx, sqlMarkReplayed, jobID, replayJobID); err != nil {
		return fmt.Errorf("mark %s replayed: %w", jobID, err)
	}
	return nil
}

// Replays lists the requests replaying jobID, oldest first.
func (t *Tx) Replays(ctx context.Context, jobID string) ([]string, error) {
	rows, err := t.tx.Query(ctx, sqlReplays, jobID)
	if err != nil {
		return nil, fmt.Errorf("replays of %s: %w", jobID, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

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

// OwnedJob is a job an orchestrator holds, at the epoch it holds it.
type OwnedJob struct {
	JobID string
	Epoch int64
}

// Fenced is a job whose ownership moved on from what an owner held.
type Fenced struct {
	OwnedJob
	Owner        string
	CurrentEpoch int64
}

// HeartbeatOwned refreshes the owner's jobs at the epochs it holds. It returns
// the jobs still held, and those fenced off (reclaimed by another owner or at a
// higher epoch); jobs that ended are dropped silently.
func (s *Store) HeartbeatOwned(ctx context.Context, owner string, held []OwnedJob) (kept []OwnedJob, fenced []Fenced, err error) {
	if len(held) == 0 {
		return nil, nil, nil
	}
	ids := make([]string, len(held))
	epochs := make([]int64, len(held))
	for i, h := range held {
		ids[i], epochs[i] = h.JobID, h.Epoch
	}
	rows, err := s.pool.Query(ctx, sqlHeartbeatOwned, owner, ids, epochs)
	if err != nil {
		return nil, nil, fmt.Errorf("heartbeat %s: %w", owner, err)
	}
	alive, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("heartbeat %s: %w", owner, err)
	}
	ok := map[string]bool{}
	for _, id := range alive {
		ok[id] = true
	}
	var missing []string
	byID := map[string]OwnedJob{}
	for _, h := range held {
		if ok[h.JobID] {
			kept = append(kept, h)
		} else {
			missing = append(missing, h.JobID)
			byID[h.JobID] = h
		}
	}
	if len(missing) == 0 {
		return kept, nil, nil
	}
	rows, err = s.pool.Query(ctx, sqlOwnership, missing)
	if err != nil {
		return kept, nil, fmt.Errorf("ownership of %d jobs: %w", len(missing), err)
	}
	err = pgxForEach(rows, func(row pgx.CollectableRow) error {
		var id, curOwner string
		var epoch int64
		var done bool
		if err := row.Scan(&id, &curOwner, &epoch, &done); err != nil {
			return err
		}
		if !done {
			fenced = append(fenced, Fenced{OwnedJob: byID[id], Owner: curOwner, CurrentEpoch: epoch})
		}
		return nil
	})
	return kept, fenced, err
}

// OwnedJobs lists the live jobs an owner holds now (after a restart).
func (s *Store) OwnedJobs(ctx context.Context, owner string) ([]OwnedJob, error) {
	rows, err := s.pool.Query(ctx, sqlOwnedJobs, owner)
	if err != nil {
		return nil, fmt.Errorf("jobs of %s: %w", owner, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OwnedJob, error) {
		var o OwnedJob
		return o, row.Scan(&o.JobID, &o.Epoch)
	})
}

func pgxForEach(rows pgx.Rows, fn func(pgx.CollectableRow) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
