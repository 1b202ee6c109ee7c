package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lucius-platform/lucius/core/runbook"
)

// members follows the member data of the version's live batches (init
// dispatched or active): a transaction per batch whose current members and
// batch_members differ, at most Batch batches per tick.
func (s *Scheduler) members(ctx context.Context, now time.Time, sr *runbook.StoredRunbook) error {
	rows, err := s.store.Pool().Query(ctx, sqlLiveBatches, sr.ID, memberStatuses)
	if err != nil {
		err = fmt.Errorf("live batches of %s v%d: %w", sr.Runbook.Name, sr.Runbook.Version, err)
		s.failed(ctx, stageMembers, err, runbookAttrs(sr)...)
		return err
	}
	batches, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (liveBatch, error) {
		var b liveBatch
		err := r.Scan(&b.id, &b.start)
		return b, err
	})
	if err != nil {
		err = fmt.Errorf("live batches of %s v%d: %w", sr.Runbook.Name, sr.Runbook.Version, err)
		s.failed(ctx, stageMembers, err, runbookAttrs(sr)...)
		return err
	}
	var errs []error
	synced := 0
	for _, b := range batches {
		if synced == s.batch {
			break // the rest next tick
		}
		// Looked at without a lock or transaction: most ticks nothing changed.
		var differ bool
		if err := s.store.Pool().QueryRow(ctx, sqlMembersDiffer(sr.DataTable), b.id, b.start).Scan(&differ); err != nil {
			err = fmt.Errorf("members of batch %d: %w", b.id, err)
			s.failed(ctx, stageMembers, err, batchAttrs(sr, b.id)...)
			errs = append(errs, err)
			continue
		}
		if !differ {
			continue
		}
		synced++
		if err := s.syncMembers(ctx, now, sr, b.id); err != nil {
			err = fmt.Errorf("members of batch %d: %w", b.id, err)
			s.failed(ctx, stageMembers, err, batchAttrs(sr, b.id)...)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// liveBatch is a batch whose members are followed.
type liveBatch struct {
	id    int64
	start time.Time
}

// changed is a batch_members row a member event is about.
type changed struct {
	id  int64
	key string
	at  time.Time // add_dispatched_at or remove_dispatched_at
}

// syncMembers applies one batch's member changes (at most Batch of each
// kind) under the batch's lock, so they never interleave with a phase
// dispatch of the batch: a member added after it is caught up by the
// orchestrator, one added before it gets its steps. A new key gets a
// batch_members row (or its removed row back) and member-added; an active
// member the data no longer has with the batch's time is removed, with
// member-removed. The writes are conditional as well.
func (s *Scheduler) syncMembers(ctx context.Context, now time.Time, sr *runbook.StoredRunbook, batchID int64) error {
	rb := sr.Runbook
	return s.inTx(ctx, "member changes", func(ctx context.Context, q pgx.Tx, em *emitter) error {
		var start time.Time
		err := q.QueryRow(ctx, sqlLockLiveBatch, batchID, sr.ID, memberStatuses).Scan(&start)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another scheduler holds it, or it moved on
		}
		if err != nil {
			return err
		}
		newKeys, err := collectKeys(q.Query(ctx, sqlNewMemberKeys(sr.DataTable), batchID, start, s.batch))
		if err != nil {
			return fmt.Errorf("new members: %w", err)
		}
		goneKeys, err := collectKeys(q.Query(ctx, sqlGoneMemberKeys(sr.DataTable), batchID, start, s.batch))
		if err != nil {
			return fmt.Errorf("members gone: %w", err)
		}
		var added, removed []changed
		if len(newKeys) > 0 {
			if added, err = collectChanged(q.Query(ctx, sqlAddMembers, batchID, newKeys, now)); err != nil {
				return fmt.Errorf("add members: %w", err)
			}
		}
		if len(goneKeys) > 0 {
			if removed, err = collectChanged(q.Query(ctx, sqlRemoveMembers, batchID, goneKeys, now)); err != nil {
				return fmt.Errorf("remove members: %w", err)
			}
		}
		for _, set := range []struct {
			typ     string
			members []changed
		}{{runbook.EventMemberAdded, added}, {runbook.EventMemberRemoved, removed}} {
			for _, m := range set.members {
				if err := em.add(set.typ, memberEventID(set.typ, m.id, m.at), runbook.MemberEvent{
					MessageType: set.typ, RunbookName: rb.Name, RunbookVersion: rb.Version, BatchID: batchID,
					BatchMemberID: m.id, MemberKey: m.key,
				}); err != nil {
					return err
				}
				em.info(set.typ, batchAttrs(sr, batchID, slog.Int64(keyBatchMemberID, m.id), slog.String(keyMemberKey, m.key))...)
			}
		}
		return nil
	})
}

// collectKeys reads a one-column text result.
func collectKeys(rows pgx.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// collectChanged reads (id, member_key, time) rows, by id.
func collectChanged(rows pgx.Rows, err error) ([]changed, error) {
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (changed, error) {
		var c changed
		err := r.Scan(&c.id, &c.key, &c.at)
		c.at = c.at.UTC()
		return c, err
	})
	slices.SortFunc(out, func(a, b changed) int { return cmp.Compare(a.id, b.id) })
	return out, err
}

// member is a batch_members row.
type member struct {
	id  int64
	key string
}

// activeMembers returns a batch's active members, by id.
func activeMembers(ctx context.Context, q pgx.Tx, batchID int64) ([]member, error) {
	rows, err := q.Query(ctx, sqlActiveMemberIDs, batchID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (member, error) {
		var m member
		err := r.Scan(&m.id, &m.key)
		return m, err
	})
}
