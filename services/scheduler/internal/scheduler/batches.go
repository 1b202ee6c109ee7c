package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

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
	rows, err := s.store.Pool().Query(ctx, sqlKnownBatchTimes, sr.Runbook.Name, times)
	if err != nil {
		err = fmt.Errorf("batches of %s: %w", sr.Runbook.Name, err)
		s.failed(ctx, stageDetect, err, runbookAttrs(sr)...)
		return err
	}
	known, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
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
	return s.inTx(ctx, "detect batch", func(ctx context.Context, q pgx.Tx, em *emitter) error {
		if active, err := lockActiveVersion(ctx, q, sr.ID); err != nil || !active {
			return err
		}
		members, err := s.runbooks.CurrentMembers(ctx, q, sr.DataTable, start)
		if err != nil || len(members) == 0 {
			return err // none: the members left since the batch times were read
		}
		status, initAt := runbook.BatchActive, (*time.Time)(nil)
		if len(rb.Init) > 0 {
			status, initAt = runbook.BatchInitDispatched, &now
		}
		var batchID int64
		err = q.QueryRow(ctx, sqlInsertBatch, sr.ID, rb.Name, start, status, now, initAt).Scan(&batchID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another scheduler detected it
		}
		if err != nil {
			return fmt.Errorf("insert batch: %w", err)
		}
		keys := make([]string, len(members))
		for i, m := range members {
			keys[i] = m.Key
		}
		if _, err := q.Exec(ctx, sqlInsertBatchMembers, batchID, keys, now); err != nil {
			return fmt.Errorf("insert members: %w", err)
		}
		for _, ph := range rb.Phases {
			if _, err := q.Exec(ctx, sqlInsertPhase, batchID, ph.Name, ph.OffsetMinutes, dueAt(start, ph.OffsetMinutes),
				rb.Version, runbook.PhasePending); err != nil {
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
func insertInit(ctx context.Context, q pgx.Tx, rb *runbook.Runbook, batchID int64, start, now time.Time) (int, error) {
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
		interval, timeout := pollSettings(step)
		tag, err := q.Exec(ctx, sqlInsertInit, batchID, step.Name, i, rb.Version, step.WorkerID, step.Function,
			string(body), step.IsPollStep, interval, timeout, now)
		if err != nil {
			return 0, fmt.Errorf("init step %s: %w", step.Name, err)
		}
		created += int(tag.RowsAffected())
	}
	return created, nil
}

// pollSettings are a step's poll_interval_sec and poll_timeout_sec: NULL
// unless it is a poll step.
func pollSettings(s runbook.Step) (interval, timeout *int) {
	if !s.IsPollStep {
		return nil, nil
	}
	i, t := s.PollIntervalSec, s.PollTimeoutSec
	return &i, &t
}
