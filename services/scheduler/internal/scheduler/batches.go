package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lucius-platform/lucius/core/runbook"
)

// detect creates a batch for every batch time the version's current members
// have and no batch of the runbook has yet, at most Batch per tick.
func (s *Scheduler) detect(ctx context.Context, now time.Time, sr *runbook.StoredRunbook) error {
	times, err := s.runbooks.CurrentBatchTimes(ctx, nil, sr.DataTable)
	if err != nil {
		s.failed(ctx, stageDetect, err, runbookAttrs(sr)...)
		return err
	}
	if len(times) == 0 {
		return nil
	}
	known, err := s.runbooks.KnownBatchTimes(ctx, sr.Runbook.Name, times)
	if err != nil {
		err = fmt.Errorf("batches of %s: %w", sr.Runbook.Name, err)
		s.failed(ctx, stageDetect, err, runbookAttrs(sr)...)
		return err
	}
	have := make(map[int64]bool, len(known))
	for _, t := range known {
		have[t.UnixMicro()] = true
	}
	var errs []error
	tried := 0
	for _, start := range times {
		if have[start.UnixMicro()] {
			continue
		}
		if tried == s.batch {
			break // the rest next tick
		}
		tried++
		if err := s.detectBatch(ctx, now, sr, start); err != nil {
			err = fmt.Errorf("detect batch %s of %s v%d: %w", runbook.FormatTime(start), sr.Runbook.Name, sr.Runbook.Version, err)
			s.failed(ctx, stageDetect, err, append(runbookAttrs(sr), slog.String(keyBatchStart, runbook.FormatTime(start)))...)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// detectBatch creates one batch in one transaction: the batch, its members,
// a pending execution of every phase, and, when the version has init steps,
// the init executions and a batch-init event (the batch waits in
// init_dispatched); without init steps the batch is active at once.
func (s *Scheduler) detectBatch(ctx context.Context, now time.Time, sr *runbook.StoredRunbook, start time.Time) error {
	rb := sr.Runbook
	return s.inTx(ctx, "detect batch", func(ctx context.Context, q *runbook.Schedule, em *emitter) error {
		if active, err := lockActiveVersion(ctx, q, sr.ID); err != nil || !active {
			return err
		}
		members, err := q.CurrentMembers(ctx, sr.DataTable, start)
		if err != nil || len(members) == 0 {
			return err // none: the members left since the batch times were read
		}
		status, initAt := runbook.BatchActive, (*time.Time)(nil)
		if len(rb.Init) > 0 {
			status, initAt = runbook.BatchInitDispatched, &now
		}
		keys := make([]string, len(members))
		for i, m := range members {
			keys[i] = m.Key
		}
		batchID, inserted, err := q.InsertBatch(ctx, runbook.NewBatch{RunbookID: sr.ID, Name: rb.Name, Start: start,
			Status: status, Members: keys, InitAt: initAt}, now)
		if err != nil {
			return fmt.Errorf("insert batch: %w", err)
		}
		if !inserted {
			return nil // another scheduler detected it
		}
		for _, ph := range rb.Phases {
			if err := q.InsertPhase(ctx, batchID, ph, dueAt(start, ph.OffsetMinutes), rb.Version, runbook.PhasePending); err != nil {
				return fmt.Errorf("phase %s: %w", ph.Name, err)
			}
		}
		if len(rb.Init) > 0 {
			if _, err := insertInit(ctx, q, rb, batchID, start, now); err != nil {
				return err
			}
			if err := em.add(runbook.EventBatchInit, batchInitID(batchID, rb.Version), runbook.BatchInitEvent{
				MessageType: runbook.EventBatchInit, RunbookName: rb.Name, RunbookVersion: rb.Version, BatchID: batchID,
				BatchStartTime: runbook.FormatTime(start), MemberCount: len(members),
			}); err != nil {
				return err
			}
		}
		em.info("batch detected", batchAttrs(sr, batchID, slog.String(keyBatchStart, runbook.FormatTime(start)),
			slog.String("status", status), slog.Int("members", len(members)), slog.Int("phases", len(rb.Phases)),
			slog.Int("init_steps", len(rb.Init)))...)
		return nil
	})
}

// insertInit creates the init executions of a version for a batch (pending,
// params rendered with the batch variables) unless they exist, and returns
// how many it created.
func insertInit(ctx context.Context, q *runbook.Schedule, rb *runbook.Runbook, batchID int64, start, now time.Time) (int, error) {
	vars := runbook.BatchVars(batchID, start)
	created := 0
	for i, step := range rb.Init {
		params, err := step.Params.Render(vars)
		if err != nil {
			// The parser allows only batch variables in init steps, so this
			// is not reachable with a stored version: a plain error.
			return 0, fmt.Errorf("init step %s: %w", step.Name, err)
		}
		body, err := json.Marshal(params)
		if err != nil {
			return 0, fmt.Errorf("init step %s: %w", step.Name, err)
		}
		inserted, err := q.InsertInit(ctx, batchID, rb.Version, i, step, body, now)
		if err != nil {
			return 0, fmt.Errorf("init step %s: %w", step.Name, err)
		}
		if inserted {
			created++
		}
	}
	return created, nil
}
