package engine

import (
	"context"
	"errors"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
)

// Cancel asks a job to stop (seed 004 §1.5). A job with work running becomes
// CANCELLING: nothing new starts and the job becomes CANCELLED when the running
// work reaches a terminal state. A job with nothing running is CANCELLED at
// once. A terminal job is left as it is. A request no orchestrator claimed yet is
// marked, and is created cancelled when claimed. It returns the job's view afterwards.
func (e *Engine) Cancel(ctx context.Context, jobID, reason string) (*ledger.Job, error) {
	return Cancel(ctx, e.store, jobID, reason, e.cfg.Now)
}

// Cancel is Engine.Cancel for callers that only hold a store (the gateway).
func Cancel(ctx context.Context, store *ledger.Store, jobID, reason string, clock func() time.Time) (*ledger.Job, error) {
	if reason == "" {
		reason = "cancelled by request"
	}
	if clock == nil {
		clock = time.Now
	}
	err := store.InTx(ctx, func(tx *ledger.Tx) error {
		now := clock()
		if _, _, err := tx.LockRequest(ctx, jobID); err != nil {
			return err
		}
		job, err := tx.LockJob(ctx, jobID)
		if errors.Is(err, ledger.ErrNotFound) {
			tx.Append(ledger.Event{JobID: jobID, Type: ledger.EventCancelRequested, Reason: reason,
				Data: map[string]any{"before_claim": true, "principal": principal(ctx)}})
			return tx.MarkRequestCancelled(ctx, jobID, reason)
		}
		if err != nil {
			return err
		}
		if job.Status.Terminal() || job.Status == ledger.JobCancelling {
			return nil
		}
		tx.Append(ledger.Event{JobID: jobID, Type: ledger.EventCancelRequested, Reason: reason,
			Data: map[string]any{"principal": principal(ctx)}})
		job.CancelRequestedAt, job.Reason = now, reason
		steps, err := tx.NodeSteps(ctx, jobID)
		if err != nil {
			return err
		}
		nodes := map[string]*ledger.Step{}
		for i := range steps {
			nodes[steps[i].StepID] = &steps[i]
		}
		if err := cancelWaiting(ctx, tx, jobID, nodes, "CANCELLED_DURING_BACKOFF"); err != nil {
			return err
		}
		running := false
		for _, s := range nodes {
			running = running || s.Status.InFlight() || s.Children.Running > 0
		}
		if running {
			setJobStatus(tx, job, ledger.JobCancelling, "CANCEL_REQUESTED", now)
			return tx.UpdateJob(ctx, job)
		}
		return finish(ctx, tx, job, nodes, ledger.JobCancelled, "CANCELLED_NOTHING_IN_FLIGHT", reason, now)
	})
	if err != nil {
		return nil, err
	}
	return store.GetJob(ctx, jobID)
}

// cancelWaiting cancels the job's steps waiting for a retry or the next poll
// at once: they are not running, and their next attempt must not start. Their fan-out parents
// (in nodes, by step id) stop counting them as running.
func cancelWaiting(ctx context.Context, tx *ledger.Tx, jobID string, nodes map[string]*ledger.Step, code string) error {
	waiting, err := tx.CancelWaiting(ctx, jobID, code)
	if err != nil {
		return err
	}
	for _, w := range waiting {
		tx.Append(ledger.Event{JobID: jobID, StepID: w.StepID, AttemptNo: w.AttemptNo, Type: ledger.EventStepStatusChanged,
			FromStatus: string(w.Status), ToStatus: string(ledger.StepCancelled), Reason: code})
		if node := nodes[w.StepID]; node != nil {
			node.Status = ledger.StepCancelled // keep the caller's view current
		}
		if parent := nodes[w.Parent]; parent != nil {
			parent.Children.Running--
			if err := tx.UpdateStep(ctx, parent); err != nil {
				return err
			}
		}
	}
	return nil
}
