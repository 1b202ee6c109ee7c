package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lucius-platform/lucius/core/runbook"
)

// transitions moves the live batches of the version's runbook that another
// version governs to this (the active) one, a transaction per batch; then,
// for an ignore version, records that its overdue phases were dealt with.
func (s *Scheduler) transitions(ctx context.Context, now time.Time, sr *runbook.StoredRunbook) error {
	ids, err := s.runbooks.TransitionCandidates(ctx, sr.Runbook.Name, sr.ID, liveStatuses, s.batch)
	if err != nil {
		err = fmt.Errorf("find batches to move to %s v%d: %w", sr.Runbook.Name, sr.Runbook.Version, err)
		s.failed(ctx, stageTransition, err, runbookAttrs(sr)...)
		return err
	}
	if len(ids) > 0 {
		// A version applied a moment ago has an empty member table until its
		// data is loaded. Moving batches to it now would remove every member
		// (member-removed, removal steps); they wait for the first load.
		loaded, err := s.runbooks.HasMemberData(ctx, sr.DataTable)
		if err != nil {
			err = fmt.Errorf("member data of %s v%d: %w", sr.Runbook.Name, sr.Runbook.Version, err)
			s.failed(ctx, stageTransition, err, runbookAttrs(sr)...)
			return err
		}
		if !loaded {
			s.log.LogAttrs(ctx, slog.LevelInfo, "live batches wait for the member data of the active version",
				append(runbookAttrs(sr), slog.Int("batches", len(ids)))...)
			return nil
		}
	}
	var errs []error
	for _, id := range ids {
		if err := s.transition(ctx, now, sr, id); err != nil {
			err = fmt.Errorf("move batch %d to %s v%d: %w", id, sr.Runbook.Name, sr.Runbook.Version, err)
			s.failed(ctx, stageTransition, err, batchAttrs(sr, id)...)
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 || sr.Runbook.OverdueBehavior != runbook.OverdueIgnore || sr.IgnoreOverdueApplied {
		return errors.Join(errs...)
	}
	applied, err := s.runbooks.MarkIgnoreApplied(ctx, sr.ID, sr.Runbook.Name, liveStatuses)
	if err != nil {
		err = fmt.Errorf("mark ignore applied for %s v%d: %w", sr.Runbook.Name, sr.Runbook.Version, err)
		s.failed(ctx, stageTransition, err, runbookAttrs(sr)...)
		return err
	}
	if applied {
		s.log.LogAttrs(ctx, slog.LevelInfo, "overdue phases ignored for every live batch of the version", runbookAttrs(sr)...)
	}
	return nil
}

// transition moves one batch. The old version's pending phases are skipped;
// the new version's phases are created due at start + offset, those already
// overdue pending (rerun: due at once) or skipped (ignore). With rerun_init,
// the new version's init steps run again for the batch.
func (s *Scheduler) transition(ctx context.Context, now time.Time, sr *runbook.StoredRunbook, batchID int64) error {
	rb := sr.Runbook
	return s.inTx(ctx, "version transition", func(ctx context.Context, q *runbook.Schedule, em *emitter) error {
		if active, err := lockActiveVersion(ctx, q, sr.ID); err != nil || !active {
			return err
		}
		t, locked, err := q.LockTransition(ctx, batchID, sr.ID, liveStatuses)
		if err != nil || !locked {
			return err // not locked: moved already, or another scheduler is moving it
		}
		start, status, from := t.Start, t.Status, t.FromVersion
		skippedOld, err := q.MoveBatch(ctx, batchID, sr.ID, rb.Version)
		if err != nil {
			return err
		}
		existing, err := q.PhaseStatuses(ctx, batchID, rb.Version)
		if err != nil {
			return err
		}
		var pending, overdueSkipped int
		for _, ph := range rb.Phases {
			due := dueAt(start, ph.OffsetMinutes)
			st := runbook.PhasePending
			if !due.After(now) && rb.OverdueBehavior == runbook.OverdueIgnore {
				st = runbook.PhaseSkipped
			}
			old, ok := existing[ph.Name]
			switch {
			case !ok:
				if err := q.InsertPhase(ctx, batchID, ph, due, rb.Version, st); err != nil {
					return fmt.Errorf("phase %s: %w", ph.Name, err)
				}
			case old == runbook.PhaseSkipped && st == runbook.PhasePending:
				// The batch comes back to a version that governed it before:
				// its phases that a transition skipped are due again.
				if err := q.RevivePhase(ctx, batchID, rb.Version, ph.Name); err != nil {
					return fmt.Errorf("phase %s: %w", ph.Name, err)
				}
			default:
				continue // this version's row stands (dispatched, completed, failed, pending)
			}
			if st == runbook.PhasePending {
				pending++
			} else {
				overdueSkipped++
			}
		}
		attrs := batchAttrs(sr, batchID, slog.Int("from_version", from), slog.String("status", status),
			slog.String(keyBatchStart, runbook.FormatTime(start)),
			slog.Int64("old_phases_skipped", skippedOld), slog.Int("phases_pending", pending),
			slog.Int("overdue_phases_skipped", overdueSkipped), slog.String("overdue_behavior", rb.OverdueBehavior))
		if rb.RerunInit && len(rb.Init) > 0 {
			created, err := insertInit(ctx, q, rb, batchID, start, now)
			if err != nil {
				return err
			}
			// Init runs once per batch and version: a batch coming back to a
			// version whose init it ran keeps that.
			if created > 0 {
				if err := q.InitDispatched(ctx, batchID, now); err != nil {
					return err
				}
				members, err := q.ActiveMembers(ctx, batchID)
				if err != nil {
					return err
				}
				if err := em.add(runbook.EventBatchInit, batchInitID(batchID, rb.Version), runbook.BatchInitEvent{
					MessageType: runbook.EventBatchInit, RunbookName: rb.Name, RunbookVersion: rb.Version, BatchID: batchID,
					BatchStartTime: runbook.FormatTime(start), MemberCount: len(members),
				}); err != nil {
					return err
				}
				attrs = append(attrs, slog.Bool("init_rerun", true))
			}
		}
		em.info("batch moved to the active runbook version", attrs...)
		return nil
	})
}
