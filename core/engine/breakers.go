package engine

import (
	"context"
	"fmt"

	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/telemetry"
)

// Reasons of the steps a circuit breaker holds and releases.
const (
	ReasonCircuitOpen     = "CIRCUIT_OPEN"
	ReasonCircuitReleased = "CIRCUIT_RELEASED"
)

// hold keeps step s from being dispatched while its service's breaker is
// open or half-open: it waits READY, with no attempt out, until ReleaseHold.
// A breaker never fails a job: the job's SLA still bounds the wait, and
// cancelling the job cancels the step at once.
func (r *run) hold(ctx context.Context, s *ledger.Step) error {
	setStepStatus(r.tx, s, ledger.StepReady, ReasonCircuitOpen, r.now)
	s.Reason = fmt.Sprintf("%s: the circuit breaker of service %s holds new directives; the step waits", ReasonCircuitOpen, s.Service)
	if err := r.tx.HoldStep(ctx, ledger.HeldStep{JobID: r.job.JobID, StepID: s.StepID, Service: s.Service, Priority: r.job.Priority}); err != nil {
		return err
	}
	r.job.CurrentStepID = s.StepID
	if r.job.Status == ledger.JobQueued {
		setJobStatus(r.tx, r.job, ledger.JobDispatching, ReasonCircuitOpen, r.now)
	}
	r.e.log.InfoContext(ctx, "step held by its circuit breaker", telemetry.JobID(r.job.JobID), telemetry.StepID(s.StepID),
		"service", s.Service)
	return r.tx.UpdateStep(ctx, s)
}

// ReleaseHold dispatches a step its breaker held: a new attempt, past the
// breaker (a half-open probe, or the backlog of a closed breaker). A hold
// whose step no longer waits (cancelled, its job ended) is only forgotten.
func (e *Engine) ReleaseHold(ctx context.Context, h ledger.HeldStep) (Swept, error) {
	var out Swept
	err := e.store.InTx(ctx, func(tx *ledger.Tx) error {
		out = Swept{}
		now := e.cfg.Now()
		job, err := tx.LockJob(ctx, h.JobID)
		if err != nil {
			return err
		}
		step, err := tx.LockStep(ctx, h.JobID, h.StepID)
		if err != nil {
			return err
		}
		if err := tx.Unhold(ctx, h.JobID, h.StepID); err != nil {
			return err
		}
		if step.Status != ledger.StepReady || job.Status.Terminal() || job.Status == ledger.JobCancelling {
			return nil
		}
		r, err := e.open(ctx, tx, job, now)
		if err != nil {
			return err
		}
		if node, ok := r.nodes[step.NodeID]; ok && step.Kind != ledger.KindChild {
			step = node
		}
		r.released = step.StepID
		if err := r.newAttempt(ctx, step, now, ReasonCircuitReleased); err != nil {
			return err
		}
		out = Swept{Applied: true, Outcome: "RELEASED"}
		return tx.UpdateJob(ctx, job)
	})
	return out, err
}
