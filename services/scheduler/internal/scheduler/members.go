package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lucius-platform/lucius/core/runbook"
)

// members follows the member data of the version's live batches (init
// dispatched or active): a transaction per batch whose current members and
// batch_members differ, at most Batch batches per tick.
func (s *Scheduler) members(ctx context.Context, now time.Time, sr *runbook.StoredRunbook) error {
	batches, err := s.runbooks.LiveBatches(ctx, sr.ID, memberStatuses)
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
		differ, err := s.runbooks.MembersDiffer(ctx, sr.DataTable, b.ID, b.Start)
		if err != nil {
			err = fmt.Errorf("members of batch %d: %w", b.ID, err)
			s.failed(ctx, stageMembers, err, batchAttrs(sr, b.ID)...)
			errs = append(errs, err)
			continue
		}
		if !differ {
			continue
		}
		synced++
		if err := s.syncMembers(ctx, now, sr, b.ID); err != nil {
			err = fmt.Errorf("members of batch %d: %w", b.ID, err)
			s.failed(ctx, stageMembers, err, batchAttrs(sr, b.ID)...)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
	return s.inTx(ctx, "member changes", func(ctx context.Context, q *runbook.Schedule, em *emitter) error {
		start, locked, err := q.LockLiveBatch(ctx, batchID, sr.ID, memberStatuses)
		if err != nil || !locked {
			return err // not locked: another scheduler holds it, or it moved on
		}
		newKeys, err := q.NewMemberKeys(ctx, sr.DataTable, batchID, start, s.batch)
		if err != nil {
			return fmt.Errorf("new members: %w", err)
		}
		goneKeys, err := q.GoneMemberKeys(ctx, sr.DataTable, batchID, start, s.batch)
		if err != nil {
			return fmt.Errorf("members gone: %w", err)
		}
		var added, removed []runbook.ChangedMember
		if len(newKeys) > 0 {
			if added, err = q.AddMembers(ctx, batchID, newKeys, now); err != nil {
				return fmt.Errorf("add members: %w", err)
			}
		}
		if len(goneKeys) > 0 {
			if removed, err = q.RemoveMembers(ctx, batchID, goneKeys, now); err != nil {
				return fmt.Errorf("remove members: %w", err)
			}
		}
		for _, set := range []struct {
			typ     string
			members []runbook.ChangedMember
		}{{runbook.EventMemberAdded, added}, {runbook.EventMemberRemoved, removed}} {
			for _, m := range set.members {
				if err := em.add(set.typ, memberEventID(set.typ, m.ID, m.At), runbook.MemberEvent{
					MessageType: set.typ, RunbookName: rb.Name, RunbookVersion: rb.Version, BatchID: batchID,
					BatchMemberID: m.ID, MemberKey: m.Key,
				}); err != nil {
					return err
				}
				em.info(set.typ, batchAttrs(sr, batchID, slog.Int64(keyBatchMemberID, m.ID), slog.String(keyMemberKey, m.Key))...)
			}
		}
		return nil
	})
}
