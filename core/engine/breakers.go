package engine

import (
	"context"
	"fmt"

	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/core/ledger"
)

// Reasons of the steps held back and released.
const (
	ReasonCircuitOpen     = "CIRCUIT_OPEN"
	ReasonCircuitReleased = "CIRCUIT_RELEASED"
	ReasonPaused          = "PAUSED"
	ReasonResumed         = "RESUMED"
)

// holdReasons are each kind of hold's reasons: when a step is held, and
// when it is released.
var holdReasons = map[string]struct{ held, released string }{
	ledger.HoldCircuit: {ReasonCircuitOpen, ReasonCircuitReleased},
	ledger.HoldPause:   {ReasonPaused, ReasonResumed},
}

// Pauses tells whether an operator paused a job's work (package config's
// live snapshot answers it): the pause's description when it did.
type Pauses interface {
	Paused(tenant, lane, workflow string) (string, bool)
}

// holdFor says whether step s must wait instead of getting an attempt now,
// and why: an operator's pause of its job first, then its service's circuit
// breaker. A step being released skips the hold it was released from.
func (r *run) holdFor(s *ledger.Step) (kind, why string, held bool) {
	if p := r.e.cfg.Pauses; p != nil && !r.releasing(s, ledger.HoldPause) {
		if what, paused := p.Paused(r.job.TenantID, r.job.Routing.Mode, r.job.WorkflowID); paused {
			return ledger.HoldPause, fmt.Sprintf("%s: %s; the step waits for a resume", ReasonPaused, what), true
		}
	}
	if b := r.e.cfg.Breakers; b != nil && !r.releasing(s, ledger.HoldCircuit) && b.Holding(s.Service) {
		return ledger.HoldCircuit, fmt.Sprintf("%s: the circuit breaker of service %s holds new directives; the step waits",
			ReasonCircuitOpen, s.Service), true
	}
	return "", "", false
}

func (r *run) releasing(s *ledger.Step, kind string) bool {
	return r.released.step == s.StepID && r.released.kind == kind
}

// hold keeps step s from being dispatched: it waits READY, with no attempt
// out, until ReleaseHold. Holding never fails a job: its SLA still bounds
// the wait, and cancelling the job cancels the step at once.
func (r *run) hold(ctx context.Context, s *ledger.Step, kind, why string) error {
	code := holdReasons[kind].held
	setStepStatus(r.tx, s, ledger.StepReady, code, r.now)
	s.Reason = why
	if err := r.tx.HoldStep(ctx, ledger.HeldStep{JobID: r.job.JobID, StepID: s.StepID, Kind: kind, Service: s.Service,
		Tenant: r.job.TenantID, Lane: r.job.Routing.Mode, Workflow: r.job.WorkflowID, Priority: r.job.Priority}); err != nil {
		return err
	}
	r.job.CurrentStepID = s.StepID
	if r.job.Status == ledger.JobQueued {
		setJobStatus(r.tx, r.job, ledger.JobDispatching, code, r.now)
	}
	r.e.log.InfoContext(ctx, "step held", telemetry.JobID(r.job.JobID), telemetry.StepID(s.StepID), "hold", kind, "reason", why)
	return r.tx.UpdateStep(ctx, s)
}

// ReleaseHold dispatches a held step: a new attempt, past the hold it was
// released from (a half-open probe, a closed breaker's backlog, a resumed
// pause); another hold may still apply to it (a paused job's step whose
// breaker is open waits on). A hold whose step no longer waits (cancelled,
// its job ended) is only forgotten.
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
		r.released.step, r.released.kind = step.StepID, h.Kind
		if err := r.newAttempt(ctx, step, now, holdReasons[h.Kind].released); err != nil {
			return err
		}
		out = Swept{Applied: true, Outcome: "RELEASED"}
		return tx.UpdateJob(ctx, job)
	})
	return out, err
}
