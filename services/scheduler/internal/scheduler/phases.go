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

// phases dispatches the due phases of the version's active batches, at most
// Batch phases per tick, a transaction per batch.
func (s *Scheduler) phases(ctx context.Context, now time.Time, sr *runbook.StoredRunbook) error {
	ids, err := s.runbooks.DueBatches(ctx, now, sr.ID, sr.Runbook.Version, s.batch)
	if err != nil {
		err = fmt.Errorf("find due phases of %s v%d: %w", sr.Runbook.Name, sr.Runbook.Version, err)
		s.failed(ctx, stagePhases, err, runbookAttrs(sr)...)
		return err
	}
	var errs []error
	budget := s.batch
	for _, id := range ids {
		if budget <= 0 {
			break
		}
		n, err := s.dispatchPhases(ctx, now, sr, id, budget)
		if err != nil {
			err = fmt.Errorf("due phases of batch %d: %w", id, err)
			s.failed(ctx, stagePhases, err, batchAttrs(sr, id)...)
			errs = append(errs, err)
		}
		budget -= n
	}
	return errors.Join(errs...)
}

// dispatchPhases claims the due phases of one batch (at most limit) and, for
// each, pre-creates the step executions of every active member with params
// rendered from the member's data, marks the phase dispatched and emits
// phase-due. A member whose params do not render gets its steps failed with
// the error (and is counted and logged); the others go on. It returns the
// number of phases dispatched.
func (s *Scheduler) dispatchPhases(ctx context.Context, now time.Time, sr *runbook.StoredRunbook, batchID int64, limit int) (int, error) {
	rb := sr.Runbook
	dispatched := 0
	err := s.inTx(ctx, "dispatch phases", func(ctx context.Context, q *runbook.Schedule, em *emitter) error {
		dispatched = 0
		start, locked, err := q.LockLiveBatch(ctx, batchID, sr.ID, []string{runbook.BatchActive})
		if err != nil || !locked {
			return err // not locked: another scheduler holds it, or it is no longer active
		}
		due, err := q.ClaimPhases(ctx, batchID, rb.Version, now, limit)
		if err != nil || len(due) == 0 {
			return err
		}
		members, err := q.ActiveMembers(ctx, batchID)
		if err != nil {
			return err
		}
		current, err := q.CurrentMembers(ctx, sr.DataTable, start)
		if err != nil {
			return err
		}
		data := make(map[string]runbook.Member, len(current))
		for _, m := range current {
			data[m.Key] = m
		}
		for _, p := range due {
			def, ok := rb.Phase(p.Name)
			if !ok {
				return fmt.Errorf("phase execution %d: phase %q is not in %s v%d", p.ID, p.Name, rb.Name, rb.Version)
			}
			if err := s.dispatchPhase(ctx, q, em, now, sr, batchID, start, p, def, members, data); err != nil {
				return fmt.Errorf("phase %s: %w", p.Name, err)
			}
			dispatched++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return dispatched, nil
}

func (s *Scheduler) dispatchPhase(ctx context.Context, q *runbook.Schedule, em *emitter, now time.Time, sr *runbook.StoredRunbook,
	batchID int64, start time.Time, p runbook.DuePhase, def runbook.Phase, members []runbook.BatchMember, data map[string]runbook.Member) error {
	rb := sr.Runbook
	phaseAttrs := func(more ...slog.Attr) []slog.Attr {
		return batchAttrs(sr, batchID, append([]slog.Attr{slog.String(keyPhase, p.Name), slog.Int64(keyPhaseExecutionID, p.ID)}, more...)...)
	}
	have, err := q.MembersWithSteps(ctx, p.ID)
	if err != nil {
		return err
	}
	hasSteps := make(map[int64]bool, len(have))
	for _, id := range have {
		hasSteps[id] = true
	}
	memberIDs := make([]int64, 0, len(members))
	var rows []runbook.PhaseStep
	failed, missing := 0, 0
	for _, m := range members {
		if hasSteps[m.ID] {
			memberIDs = append(memberIDs, m.ID)
			continue
		}
		md, ok := data[m.Key]
		if !ok {
			// No current data with the batch's time: the member is leaving the
			// batch (the next member pass removes it), so it gets no steps.
			missing++
			em.info("member without current data for the batch time gets no steps",
				phaseAttrs(slog.Int64(keyBatchMemberID, m.ID), slog.String(keyMemberKey, m.Key))...)
			continue
		}
		memberRows, renderErr := stepRows(p.ID, m.ID, def, runbook.MemberVars(md, batchID, start))
		if renderErr != nil {
			failed++
			em.problem(stageRender, "member params do not render; its steps are failed",
				phaseAttrs(slog.Int64(keyBatchMemberID, m.ID), slog.String(keyMemberKey, m.Key), slog.String("err", renderErr.Error()))...)
		}
		rows = append(rows, memberRows...)
		memberIDs = append(memberIDs, m.ID)
	}
	if len(rows) > 0 {
		if err := q.InsertPhaseSteps(ctx, rows, now); err != nil {
			return fmt.Errorf("create step executions: %w", err)
		}
	}
	pending, err := q.PhaseDispatched(ctx, p.ID, now)
	if err != nil {
		return err
	}
	if !pending {
		return fmt.Errorf("phase execution %d is no longer pending", p.ID)
	}
	if err := em.add(runbook.EventPhaseDue, phaseDueID(p.ID), runbook.PhaseDueEvent{
		MessageType: runbook.EventPhaseDue, RunbookName: rb.Name, RunbookVersion: rb.Version, BatchID: batchID,
		PhaseExecutionID: p.ID, PhaseName: p.Name, OffsetMinutes: p.OffsetMinutes, DueAt: runbook.FormatTime(p.DueAt),
		MemberIDs: memberIDs, // members come by id: ascending
	}); err != nil {
		return err
	}
	em.info("phase due", phaseAttrs(slog.String("due_at", runbook.FormatTime(p.DueAt)), slog.Int("members", len(memberIDs)),
		slog.Int("steps", len(rows)), slog.Int("members_failed", failed), slog.Int("members_without_data", missing))...)
	return nil
}

// stepRows are the step executions of one member in one phase. When any step's params do not render, every step of the
// member is created failed (running some of a member's steps but not others
// would leave it half-done): the one that does not render with its error,
// the others naming it. The returned error is the render failure.
func stepRows(phaseExecutionID, batchMemberID int64, def runbook.Phase, vars map[string]string) ([]runbook.PhaseStep, error) {
	params := make([][]byte, len(def.Steps))
	problems := make([]error, len(def.Steps))
	var first error
	for i, step := range def.Steps {
		rendered, err := step.Params.Render(vars)
		if err == nil {
			params[i], err = json.Marshal(rendered)
		}
		if err != nil {
			problems[i] = fmt.Errorf("step %s: params do not render: %w", step.Name, err)
			params[i] = []byte("{}")
			if first == nil {
				first = problems[i]
			}
		}
	}
	rows := make([]runbook.PhaseStep, len(def.Steps))
	for i, step := range def.Steps {
		status, message := runbook.StepPending, (*string)(nil)
		switch {
		case problems[i] != nil:
			status, message = runbook.StepFailed, ptr(problems[i].Error())
		case first != nil:
			status, message = runbook.StepFailed, ptr("not run: another step of the member in this phase failed: "+first.Error())
		}
		rows[i] = runbook.PhaseStep{PhaseID: phaseExecutionID, MemberID: batchMemberID, Index: i, Step: step,
			Params: params[i], Status: status, Message: message}
	}
	return rows, first
}

func ptr[T any](v T) *T { return &v }
