package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

// The protocols of seed 003 as convergent steps: each looks at a batch's
// rows as they are and does what is due, so a redelivered or reordered event
// only repeats a check. Every function here runs under the batch's lock.

// effects are what a handler does after its transaction commits: cancelling
// jobs and starting polls go through the engine's own transactions.
type effects struct {
	cancel []string // job ids
	repoll []string // job ids
}

// advanceInit runs a batch's init steps in order: the next one when the
// previous succeeded; the batch becomes active when all did, failed when one
// failed (the rest are cancelled).
func (x *runbookExecutor) advanceInit(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, fx *effects, now time.Time) error {
	if b.Status != runbook.BatchInitDispatched {
		return nil
	}
	rows, err := x.rows(tx).InitSteps(ctx, b.ID)
	if err != nil {
		return err
	}
	for i, r := range rows {
		switch r.Status {
		case runbook.StepSucceeded:
			continue
		case runbook.StepPending:
			rb, err := x.definition(ctx, b.Name, r.Version)
			if err != nil {
				return err
			}
			step, ok := rb.Step(r.StepName)
			if !ok {
				return x.failExec(ctx, tx, b, r, fmt.Sprintf("runbook %s v%d has no init step %q", b.Name, r.Version, r.StepName), fx, now)
			}
			return x.dispatchExec(ctx, tx, b, r, step, now)
		case runbook.StepDispatched, runbook.StepPolling:
			return nil // waiting for it
		default: // failed, poll_timeout, cancelled: the batch cannot start
			jobs, err := x.rows(tx).Cancel(ctx, rows[i+1:], "an earlier init step did not succeed", now)
			if err != nil {
				return err
			}
			fx.cancel = append(fx.cancel, jobs...)
			x.log.WarnContext(ctx, "runbook batch failed in init", "batch_id", b.ID, "step", r.StepName, "status", r.Status)
			return x.rows(tx).SetBatchStatus(ctx, b, runbook.BatchFailed, now)
		}
	}
	x.log.InfoContext(ctx, "runbook batch active", "batch_id", b.ID, "runbook", b.Name)
	return x.rows(tx).SetBatchStatus(ctx, b, runbook.BatchActive, now)
}

// advancePhase runs a phase step index by step index across its members: a
// step at index i starts once every step at a lower index has ended (a
// barrier) and its member's own earlier steps succeeded. When every step and
// rollback has ended, the phase is completed (all succeeded, or cancelled
// because their member left) or failed.
func (x *runbookExecutor) advancePhase(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, phaseID int64, fx *effects, now time.Time) error {
	p, err := x.rows(tx).LockPhase(ctx, phaseID)
	if err != nil || (p.Status != runbook.PhaseDispatched) {
		return err
	}
	rows, err := x.rows(tx).PhaseSteps(ctx, phaseID)
	if err != nil {
		return err
	}
	var steps, rollbacks []*runbook.Execution
	for _, r := range rows {
		if r.Kind == runbook.KindRollback {
			rollbacks = append(rollbacks, r)
		} else {
			steps = append(steps, r)
		}
	}
	// A member's step cannot run once one of its earlier steps did not succeed.
	byMember := map[int64][]*runbook.Execution{}
	for _, r := range steps {
		byMember[r.MemberID] = append(byMember[r.MemberID], r)
	}
	for _, mine := range byMember {
		blocked := false
		for _, r := range mine {
			if blocked && !r.Terminal() {
				jobs, err := x.rows(tx).Cancel(ctx, []*runbook.Execution{r}, "an earlier step of this member did not succeed", now)
				if err != nil {
					return err
				}
				fx.cancel = append(fx.cancel, jobs...)
			}
			blocked = blocked || (r.Terminal() && r.Status != runbook.StepSucceeded)
		}
	}
	// The barrier: the lowest index with work not ended.
	barrier := -1
	for _, r := range steps {
		if !r.Terminal() && (barrier < 0 || r.StepIndex < barrier) {
			barrier = r.StepIndex
		}
	}
	if barrier >= 0 {
		rb, err := x.definition(ctx, b.Name, p.Version)
		if err != nil {
			return err
		}
		for _, r := range steps {
			if r.StepIndex != barrier || r.Status != runbook.StepPending {
				continue
			}
			step, ok := rb.Step(r.StepName)
			if !ok {
				if err := x.failExec(ctx, tx, b, r, fmt.Sprintf("runbook %s v%d has no step %q", b.Name, p.Version, r.StepName), fx, now); err != nil {
					return err
				}
				continue
			}
			if err := x.dispatchExec(ctx, tx, b, r, step, now); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range rollbacks {
		if !r.Terminal() {
			return nil // the phase ends when its rollbacks have
		}
	}
	status := runbook.PhaseCompleted
	for _, r := range steps {
		if r.Status == runbook.StepFailed || r.Status == runbook.StepPollTimeout || r.Status == runbook.StepRolledBack {
			status = runbook.PhaseFailed
		}
	}
	if err := x.rows(tx).EndPhase(ctx, p.ID, status, now); err != nil {
		return err
	}
	x.log.InfoContext(ctx, "runbook phase "+status, "batch_id", b.ID, "phase", p.Name, "steps", len(steps))
	return x.checkBatch(ctx, tx, b, now)
}

// checkBatch ends an active batch when every phase of its governing version
// has ended: completed, or failed when a phase failed.
func (x *runbookExecutor) checkBatch(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, now time.Time) error {
	if b.Status != runbook.BatchActive {
		return nil
	}
	open, failed, err := x.rows(tx).PhasesLeft(ctx, b)
	if err != nil || open > 0 {
		return err
	}
	status := runbook.BatchCompleted
	if failed > 0 {
		status = runbook.BatchFailed
	}
	x.log.InfoContext(ctx, "runbook batch "+status, "batch_id", b.ID, "runbook", b.Name)
	return x.rows(tx).SetBatchStatus(ctx, b, status, now)
}

// failExec ends a row as failed for a reason of the executor's own (not a
// worker's answer) and lets its protocol go on.
func (x *runbookExecutor) failExec(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, r *runbook.Execution, why string, fx *effects, now time.Time) error {
	if err := x.rows(tx).Finish(ctx, r, runbook.StepFailed, nil, why, now); err != nil {
		return err
	}
	return x.afterExec(ctx, tx, b, r, fx, now)
}

// afterExec moves on after a row ended (or started polling).
func (x *runbookExecutor) afterExec(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, r *runbook.Execution, fx *effects, now time.Time) error {
	switch r.Kind {
	case "init":
		return x.advanceInit(ctx, tx, b, fx, now)
	case runbook.KindRollback:
		return x.advanceRollback(ctx, tx, b, r.ParentID, fx, now)
	case runbook.KindRemoval:
		return x.advanceRemoval(ctx, tx, b, r.MemberID, fx, now)
	}
	if r.Status == runbook.StepFailed || r.Status == runbook.StepPollTimeout {
		if err := x.startRollback(ctx, tx, b, r, fx, now); err != nil {
			return err
		}
	}
	return x.advancePhase(ctx, tx, b, r.PhaseID, fx, now)
}

// startRollback creates and starts the rollback a failed phase step names.
func (x *runbookExecutor) startRollback(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, failed *runbook.Execution, fx *effects, now time.Time) error {
	if failed.OnFailure == "" {
		return nil
	}
	if exists, err := x.rows(tx).HasRollback(ctx, failed.ID); err != nil || exists {
		return err
	}
	p, err := x.rows(tx).LockPhase(ctx, failed.PhaseID)
	if err != nil {
		return err
	}
	rb, err := x.definition(ctx, b.Name, p.Version)
	if err != nil {
		return err
	}
	steps := rb.Rollbacks[failed.OnFailure]
	vars, err := x.rows(tx).MemberVars(ctx, b, failed.MemberID, p.Version, false)
	if err != nil {
		return err
	}
	if err := x.rows(tx).InsertSteps(ctx, failed.PhaseID, failed.MemberID, runbook.KindRollback, failed.ID, steps, vars); err != nil {
		return err
	}
	x.log.InfoContext(ctx, "runbook rollback started", "batch_id", b.ID, "step", failed.StepName, "rollback", failed.OnFailure)
	return x.advanceRollback(ctx, tx, b, failed.ID, fx, now)
}

// advanceRollback runs a rollback's steps in order; when all succeeded the
// failed step is rolled_back; when one failed it stays failed and says so.
func (x *runbookExecutor) advanceRollback(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, parentID int64, fx *effects, now time.Time) error {
	rows, err := x.rows(tx).RollbackSteps(ctx, parentID)
	if err != nil {
		return err
	}
	parent, err := x.rows(tx).ByID(ctx, runbook.TableSteps, parentID)
	if err != nil {
		return err
	}
	done, err := x.runInOrder(ctx, tx, b, rows, fx, now)
	if err != nil || !done {
		return err
	}
	for _, r := range rows {
		if r.Status != runbook.StepSucceeded {
			if err := x.rows(tx).NoteRollbackEnd(ctx, parentID, fmt.Sprintf("; rollback step %s ended %s", r.StepName, r.Status)); err != nil {
				return err
			}
			return x.advancePhase(ctx, tx, b, parent.PhaseID, fx, now)
		}
	}
	if err := x.rows(tx).RolledBack(ctx, parentID); err != nil {
		return err
	}
	return x.advancePhase(ctx, tx, b, parent.PhaseID, fx, now)
}

// advanceRemoval runs a removed member's on_member_removed steps in order.
func (x *runbookExecutor) advanceRemoval(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, memberID int64, fx *effects, now time.Time) error {
	rows, err := x.rows(tx).RemovalSteps(ctx, memberID)
	if err != nil {
		return err
	}
	_, err = x.runInOrder(ctx, tx, b, rows, fx, now)
	return err
}

// runInOrder starts the first pending row once the ones before it
// succeeded; after a row that did not succeed, the rest are cancelled. It
// reports whether every row has ended.
func (x *runbookExecutor) runInOrder(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, rows []*runbook.Execution, fx *effects, now time.Time) (bool, error) {
	for i, r := range rows {
		switch r.Status {
		case runbook.StepSucceeded:
			continue
		case runbook.StepDispatched, runbook.StepPolling:
			return false, nil
		case runbook.StepPending:
			rb, err := x.definition(ctx, b.Name, b.Version)
			if err != nil {
				return false, err
			}
			step, ok := rb.Step(r.StepName)
			if !ok {
				return false, x.failExec(ctx, tx, b, r, fmt.Sprintf("runbook %s v%d has no step %q", b.Name, b.Version, r.StepName), fx, now)
			}
			return false, x.dispatchExec(ctx, tx, b, r, step, now)
		default:
			jobs, err := x.rows(tx).Cancel(ctx, rows[i+1:], "an earlier step did not succeed", now)
			fx.cancel = append(fx.cancel, jobs...)
			return true, err
		}
	}
	return true, nil
}

// catchUp gives a member added to a running batch the steps of the phases
// already due (dispatched, completed, or failed for other members), and runs
// them (seed 003 member catch-up); the phase is open again until it caught up.
func (x *runbookExecutor) catchUp(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, memberID int64, fx *effects, now time.Time) error {
	phases, err := x.rows(tx).PhasesDue(ctx, b)
	if err != nil {
		return err
	}
	for _, p := range phases {
		live, err := x.rows(tx).HasPhaseStep(ctx, p.ID, memberID)
		if err != nil {
			return err
		}
		if live {
			continue
		}
		rb, err := x.definition(ctx, b.Name, p.Version)
		if err != nil {
			return err
		}
		phase, ok := rb.Phase(p.Name)
		if !ok {
			continue
		}
		vars, err := x.rows(tx).MemberVars(ctx, b, memberID, p.Version, false)
		if errors.Is(err, runbook.ErrNotFound) {
			continue // no longer current: its removal follows
		}
		if err != nil {
			return err
		}
		if err := x.rows(tx).InsertSteps(ctx, p.ID, memberID, runbook.KindPhase, 0, phase.Steps, vars); err != nil {
			return err
		}
		if p.Status != runbook.PhaseDispatched {
			// Work to do again: the phase ends once the newcomer caught up.
			if err := x.rows(tx).ReopenPhase(ctx, p.ID); err != nil {
				return err
			}
		}
		x.log.InfoContext(ctx, "runbook member catching up", "batch_id", b.ID, "phase", p.Name, "batch_member_id", memberID)
		if err := x.advancePhase(ctx, tx, b, p.ID, fx, now); err != nil {
			return err
		}
	}
	return nil
}

// removeMember cancels a removed member's unfinished work and runs the
// runbook's on_member_removed steps for it; phases it blocked move on.
func (x *runbookExecutor) removeMember(ctx context.Context, tx *ledger.Tx, b *runbook.LockedBatch, memberID int64, fx *effects, now time.Time) error {
	rows, err := x.rows(tx).MemberWork(ctx, memberID)
	if err != nil {
		return err
	}
	jobs, err := x.rows(tx).Cancel(ctx, rows, "member removed from the batch", now)
	if err != nil {
		return err
	}
	fx.cancel = append(fx.cancel, jobs...)
	started, err := x.rows(tx).RemovalStarted(ctx, memberID)
	if err != nil {
		return err
	}
	if !started {
		rb, err := x.definition(ctx, b.Name, b.Version)
		if err != nil {
			return err
		}
		if len(rb.OnMemberRemoved) > 0 {
			vars, err := x.rows(tx).MemberVars(ctx, b, memberID, b.Version, true)
			if err != nil {
				return err
			}
			if err := x.rows(tx).InsertSteps(ctx, 0, memberID, runbook.KindRemoval, 0, rb.OnMemberRemoved, vars); err != nil {
				return err
			}
		}
	}
	if err := x.advanceRemoval(ctx, tx, b, memberID, fx, now); err != nil {
		return err
	}
	phases := map[int64]bool{}
	for _, r := range rows {
		if r.PhaseID != 0 {
			phases[r.PhaseID] = true
		}
	}
	ids := make([]int64, 0, len(phases))
	for id := range phases {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if err := x.advancePhase(ctx, tx, b, id, fx, now); err != nil {
			return err
		}
	}
	return nil
}
