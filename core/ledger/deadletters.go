package ledger

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
