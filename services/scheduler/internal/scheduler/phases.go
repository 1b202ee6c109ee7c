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

// phases dispatches the due phases of the version's active batches, at most
// Batch phases per tick, a transaction per batch.
func (s *Scheduler) phases(ctx context.Context, now time.Time, sr *runbook.StoredRunbook) error {
	ids, err := collectIDs(s.store.Pool().Query(ctx, sqlDueBatches, now, sr.ID, sr.Runbook.Version, s.batch))
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

// duePhase is a claimed phase_executions row.
type duePhase struct {
	id            int64
	name          string
	offsetMinutes int
	dueAt         time.Time
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
	err := s.inTx(ctx, "dispatch phases", func(ctx context.Context, q pgx.Tx, em *emitter) error {
		dispatched = 0
		var start time.Time
		err := q.QueryRow(ctx, sqlLockLiveBatch, batchID, sr.ID, []string{runbook.BatchActive}).Scan(&start)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another scheduler holds it, or it is no longer active
		}
		if err != nil {
			return err
		}
		start = start.UTC()
		rows, err := q.Query(ctx, sqlClaimPhases, batchID, rb.Version, now, limit)
		if err != nil {
			return err
		}
		due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (duePhase, error) {
			var p duePhase
			err := r.Scan(&p.id, &p.name, &p.offsetMinutes, &p.dueAt)
			p.dueAt = p.dueAt.UTC()
			return p, err
		})
		if err != nil || len(due) == 0 {
			return err
		}
		members, err := activeMembers(ctx, q, batchID)
		if err != nil {
			return err
		}
		current, err := s.runbooks.CurrentMembers(ctx, q, sr.DataTable, start)
		if err != nil {
			return err
		}
		data := make(map[string]runbook.Member, len(current))
		for _, m := range current {
			data[m.Key] = m
		}
		for _, p := range due {
			def, ok := rb.Phase(p.name)
			if !ok {
				return fmt.Errorf("phase execution %d: phase %q is not in %s v%d", p.id, p.name, rb.Name, rb.Version)
			}
			if err := s.dispatchPhase(ctx, q, em, now, sr, batchID, start, p, def, members, data); err != nil {
				return fmt.Errorf("phase %s: %w", p.name, err)
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

func (s *Scheduler) dispatchPhase(ctx context.Context, q pgx.Tx, em *emitter, now time.Time, sr *runbook.StoredRunbook,
	batchID int64, start time.Time, p duePhase, def runbook.Phase, members []member, data map[string]runbook.Member) error {
	rb := sr.Runbook
	phaseAttrs := func(more ...slog.Attr) []slog.Attr {
		return batchAttrs(sr, batchID, append([]slog.Attr{slog.String(keyPhase, p.name), slog.Int64(keyPhaseExecutionID, p.id)}, more...)...)
	}
	have, err := collectIDs(q.Query(ctx, sqlMembersWithSteps, p.id))
	if err != nil {
		return err
	}
	hasSteps := make(map[int64]bool, len(have))
	for _, id := range have {
		hasSteps[id] = true
	}
	memberIDs := make([]int64, 0, len(members))
	var rows [][]any
	failed, missing := 0, 0
	for _, m := range members {
		if hasSteps[m.id] {
			memberIDs = append(memberIDs, m.id)
			continue
		}
		md, ok := data[m.key]
		if !ok {
			// No current data with the batch's time: the member is leaving the
			// batch (the next member pass removes it), so it gets no steps.
			missing++
			em.info("member without current data for the batch time gets no steps",
				phaseAttrs(slog.Int64(keyBatchMemberID, m.id), slog.String(keyMemberKey, m.key))...)
			continue
		}
		memberRows, renderErr := stepRows(p.id, m.id, def, runbook.MemberVars(md, batchID, start), now)
		if renderErr != nil {
			failed++
			em.problem(stageRender, "member params do not render; its steps are failed",
				phaseAttrs(slog.Int64(keyBatchMemberID, m.id), slog.String(keyMemberKey, m.key), slog.String("err", renderErr.Error()))...)
		}
		rows = append(rows, memberRows...)
		memberIDs = append(memberIDs, m.id)
	}
	if len(rows) > 0 {
		if _, err := q.CopyFrom(ctx, pgx.Identifier{"step_executions"}, stepColumns, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("create step executions: %w", err)
		}
	}
	tag, err := q.Exec(ctx, sqlPhaseDispatched, p.id, now)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("phase execution %d is no longer pending", p.id)
	}
	if err := em.add(runbook.EventPhaseDue, phaseDueID(p.id), runbook.PhaseDueEvent{
		MessageType: runbook.EventPhaseDue, RunbookName: rb.Name, RunbookVersion: rb.Version, BatchID: batchID,
		PhaseExecutionID: p.id, PhaseName: p.name, OffsetMinutes: p.offsetMinutes, DueAt: runbook.FormatTime(p.dueAt),
		MemberIDs: memberIDs, // members come by id: ascending
	}); err != nil {
		return err
	}
	em.info("phase due", phaseAttrs(slog.String("due_at", runbook.FormatTime(p.dueAt)), slog.Int("members", len(memberIDs)),
		slog.Int("steps", len(rows)), slog.Int("members_failed", failed), slog.Int("members_without_data", missing))...)
	return nil
}

// stepRows are the step_executions rows of one member in one phase (columns
// as stepColumns). When any step's params do not render, every step of the
// member is created failed (running some of a member's steps but not others
// would leave it half-done): the one that does not render with its error,
// the others naming it. The returned error is the render failure.
func stepRows(phaseExecutionID, batchMemberID int64, def runbook.Phase, vars map[string]string, now time.Time) ([][]any, error) {
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
	rows := make([][]any, len(def.Steps))
	for i, step := range def.Steps {
		status, message := runbook.StepPending, (*string)(nil)
		switch {
		case problems[i] != nil:
			status, message = runbook.StepFailed, ptr(problems[i].Error())
		case first != nil:
			status, message = runbook.StepFailed, ptr("not run: another step of the member in this phase failed: "+first.Error())
		}
		interval, timeout := pollSettings(step)
		rows[i] = []any{phaseExecutionID, batchMemberID, runbook.KindPhase, step.Name, int32(i), step.WorkerID,
			step.Function, string(params[i]), status, message, step.IsPollStep, int32Ptr(interval), int32Ptr(timeout),
			step.OnFailure, now}
	}
	return rows, first
}

func ptr[T any](v T) *T { return &v }

func int32Ptr(p *int) *int32 {
	if p == nil {
		return nil
	}
	return ptr(int32(*p))
}
