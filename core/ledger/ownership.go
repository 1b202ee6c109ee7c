package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

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
