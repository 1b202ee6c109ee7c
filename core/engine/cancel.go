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
				Data: map[string]any{"before_claim": true}})
			return tx.MarkRequestCancelled(ctx, jobID, reason)
		}
		if err != nil {
			return err
		}
		if job.Status.Terminal() || job.Status == ledger.JobCancelling {
			return nil
		}
		tx.Append(ledger.Event{JobID: jobID, Type: ledger.EventCancelRequested, Reason: reason})
		job.CancelRequestedAt, job.Reason = now, reason
		steps, err := tx.NodeSteps(ctx, jobID)
		if err != nil {
			return err
		}
		nodes := map[string]*ledger.Step{}
		running := false
		for i := range steps {
			s := &steps[i]
			nodes[s.NodeID] = s
			running = running || s.Status.InFlight() || s.Status == ledger.StepFailedRetry || s.Children.Running > 0
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
