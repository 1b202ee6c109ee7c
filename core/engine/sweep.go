package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
)

// ErrFenced means: an owner's write named an epoch the job has moved past.
var ErrFenced = errors.New("fenced: the job's owner epoch moved on")

// Swept says what a sweeper operation did; Applied is false when the
// candidate no longer qualified under the job's lock (it was answered,
// reclaimed, retried or finished meanwhile) and nothing changed.
type Swept struct {
	Applied bool
	// Outcome names what happened, e.g. RETRIED, FAILED_FINAL, REENQUEUED.
	Outcome string
}

// sweepRule is what one attempt sweeper repairs.
type sweepRule struct {
	code   string              // event reason, e.g. ACK_TIMEOUT
	states []ledger.StepStatus // the step states it applies to
	// due re-checks the scan's condition under the lock.
	due func(tx *ledger.Tx, a *ledger.Attempt, now time.Time) (bool, error)
	// repair applies it to a live job and names the outcome.
	repair func(tx *ledger.Tx, r *run, job *ledger.Job, step *ledger.Step, attempt *ledger.Attempt, now time.Time) (string, error)
}

// sweepStep applies rule to the named attempt under the job's lock when it is
// still the step's current attempt, the step is in one of the rule's states
// and the rule is still due. In a job that already ended (failed fast, SLA)
// there is nothing to retry: the step, which can no longer finish, is closed
// CANCELLED, so it neither shows as running nor is found again.
func (e *Engine) sweepStep(ctx context.Context, k ledger.AttemptKey, rule sweepRule) (Swept, error) {
	var out Swept
	err := e.store.InTx(ctx, func(tx *ledger.Tx) error {
		out = Swept{}
		now := e.cfg.Now()
		job, err := tx.LockJob(ctx, k.JobID)
		if err != nil {
			return err
		}
		step, err := tx.LockStep(ctx, k.JobID, k.StepID)
		if err != nil {
			return err
		}
		if step.AttemptNo != k.AttemptNo || step.LeaseID != k.LeaseID || !oneOf(step.Status, rule.states) {
			return nil // answered, retried or finished since the scan
		}
		attempt, err := tx.Attempt(ctx, k.JobID, k.StepID, k.AttemptNo)
		if err != nil {
			return err
		}
		if due, err := rule.due(tx, attempt, now); err != nil || !due {
			return err
		}
		if job.Status.Terminal() {
			out = Swept{Applied: true, Outcome: "CLOSED"}
			return closeAfterJob(ctx, tx, job, step, attempt, rule.code, now)
		}
		r, err := e.open(ctx, tx, job, now)
		if err != nil {
			return err
		}
		if node, ok := r.nodes[step.NodeID]; ok && step.Kind != ledger.KindChild {
			step = node
		}
		outcome, err := rule.repair(tx, r, job, step, attempt, now)
		if err != nil || outcome == "" {
			return err
		}
		if err := r.advance(ctx); err != nil {
			return err
		}
		out = Swept{Applied: true, Outcome: outcome}
		return tx.UpdateJob(ctx, job)
	})
	return out, err
}

// closeAfterJob cancels a step of an ended job whose attempt timed out.
func closeAfterJob(ctx context.Context, tx *ledger.Tx, job *ledger.Job, step *ledger.Step, attempt *ledger.Attempt, code string, now time.Time) error {
	reason := "JOB_" + string(job.Status) + "_" + code
	setStepStatus(tx, step, ledger.StepCancelled, reason, now)
	step.Reason = code
	attempt.Status, attempt.Reason, attempt.CompletedAt = ledger.StepCancelled, code, now
	if step.Kind == ledger.KindChild {
		parent, err := tx.Step(ctx, job.JobID, step.Parent)
		if err != nil {
			return err
		}
		parent.Children.Running--
		if err := tx.UpdateStep(ctx, parent); err != nil {
			return err
		}
	}
	return writeStep(ctx, tx, step, attempt)
}

// ExpireAck applies the dispatch track to an attempt nobody acknowledged in
// time: a new attempt (same pinned routing, new lease) while attempts remain,
// else the step fails for good (ACK_TIMEOUT).
func (e *Engine) ExpireAck(ctx context.Context, k ledger.AttemptKey) (Swept, error) {
	return e.sweepStep(ctx, k, sweepRule{code: "ACK_TIMEOUT",
		states: []ledger.StepStatus{ledger.StepDispatching, ledger.StepAwaitingAck, ledger.StepFailedRetry},
		due: func(_ *ledger.Tx, a *ledger.Attempt, now time.Time) (bool, error) {
			return a.AckedAt.IsZero() && !a.AckDeadline.IsZero() && now.After(a.AckDeadline), nil
		},
		repair: func(tx *ledger.Tx, r *run, job *ledger.Job, step *ledger.Step, attempt *ledger.Attempt, now time.Time) (string, error) {
			tx.Append(ledger.Event{JobID: job.JobID, StepID: step.StepID, AttemptNo: step.AttemptNo, Type: ledger.EventAckTimeout,
				Reason: "ACK_TIMEOUT", Data: map[string]any{"ack_deadline": attempt.AckDeadline.UTC().Format(time.RFC3339Nano)}})
			return e.expire(ctx, tx, r, job, step, attempt, failure{class: classRetryable, code: "ACK_TIMEOUT",
				reason: fmt.Sprintf("no ACK within %s", step.AckTimeout), track: TrackAck}, now)
		}})
}

// ExpireLease applies the retry track to an acknowledged attempt whose lease
// ran out without a RESULT or heartbeat (LEASE_EXPIRED).
func (e *Engine) ExpireLease(ctx context.Context, k ledger.AttemptKey) (Swept, error) {
	return e.sweepStep(ctx, k, sweepRule{code: "LEASE_EXPIRED",
		states: []ledger.StepStatus{ledger.StepInProgress},
		due: func(_ *ledger.Tx, a *ledger.Attempt, now time.Time) (bool, error) {
			return !a.LeaseExpiresAt.IsZero() && now.After(a.LeaseExpiresAt), nil
		},
		repair: func(tx *ledger.Tx, r *run, job *ledger.Job, step *ledger.Step, attempt *ledger.Attempt, now time.Time) (string, error) {
			tx.Append(ledger.Event{JobID: job.JobID, StepID: step.StepID, AttemptNo: step.AttemptNo, Type: ledger.EventLeaseExpired,
				Reason: "LEASE_EXPIRED", Data: map[string]any{"lease_expired_at": attempt.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)}})
			return e.expire(ctx, tx, r, job, step, attempt, failure{class: classRetryable, code: "LEASE_EXPIRED",
				reason: "no RESULT or heartbeat before the lease expired", backoff: true}, now)
		}})
}

func (e *Engine) expire(ctx context.Context, tx *ledger.Tx, r *run, job *ledger.Job, step *ledger.Step,
	attempt *ledger.Attempt, f failure, now time.Time) (string, error) {
	if err := e.failAttempt(ctx, tx, r, job, step, attempt, f, now); err != nil {
		return "", err
	}
	if step.Status == ledger.StepFailedFinal {
		return "FAILED_FINAL", nil
	}
	return "RETRIED", nil
}

// Redispatch enqueues the directive of an attempt stuck DISPATCHING whose
// outbox message is gone (abandoned, or lost with a restored backup): the same
// attempt and lease, so a worker that did get it dedupes the copy.
func (e *Engine) Redispatch(ctx context.Context, k ledger.AttemptKey) (Swept, error) {
	return e.sweepStep(ctx, k, sweepRule{code: "DISPATCHING_TOO_LONG",
		states: []ledger.StepStatus{ledger.StepDispatching},
		due: func(tx *ledger.Tx, _ *ledger.Attempt, _ time.Time) (bool, error) {
			pending, err := tx.HasPendingDirective(ctx, k)
			return !pending, err
		},
		repair: func(tx *ledger.Tx, r *run, job *ledger.Job, step *ledger.Step, attempt *ledger.Attempt, now time.Time) (string, error) {
			n, err := tx.DirectiveCount(ctx, k)
			if err != nil {
				return "", err
			}
			msg, err := r.directiveMessage(ctx, step, attempt, time.Time{})
			if err != nil {
				return "", err
			}
			msg.MessageID = fmt.Sprintf("%s#%d", msg.MessageID, n+1)
			tx.Enqueue(msg)
			tx.Append(ledger.Event{JobID: job.JobID, StepID: step.StepID, AttemptNo: step.AttemptNo, Type: ledger.EventRedispatched,
				Reason: "DISPATCHING_TOO_LONG", Data: map[string]any{"message_id": msg.MessageID}})
			return "REENQUEUED", nil
		}})
}

// ExpireSLA fails a job still running past its deadline (SLA_EXCEEDED). Work
// still running may finish; its results are recorded on the steps only.
func (e *Engine) ExpireSLA(ctx context.Context, jobID string) (Swept, error) {
	var out Swept
	err := e.store.InTx(ctx, func(tx *ledger.Tx) error {
		out = Swept{}
		now := e.cfg.Now()
		job, err := tx.LockJob(ctx, jobID)
		if err != nil || job.Status.Terminal() || job.DeadlineAt.IsZero() || !now.After(job.DeadlineAt) {
			return err
		}
		steps, err := tx.NodeSteps(ctx, jobID)
		if err != nil {
			return err
		}
		nodes := map[string]*ledger.Step{}
		for i := range steps {
			nodes[steps[i].NodeID] = &steps[i]
		}
		tx.Append(ledger.Event{JobID: jobID, Type: ledger.EventSLAExceeded, Reason: "SLA_EXCEEDED",
			Data: map[string]any{"deadline": job.DeadlineAt.UTC().Format(time.RFC3339Nano)}})
		if err := tx.InsertDeadLetter(ctx, ledger.DeadLetter{Kind: ledger.DeadLetterStep, JobID: jobID, Reason: "SLA_EXCEEDED",
			Description: "the job was still running at its deadline"}); err != nil {
			return err
		}
		job.Reason = fmt.Sprintf("SLA_EXCEEDED: still running at its deadline %s", job.DeadlineAt.UTC().Format(time.RFC3339))
		out = Swept{Applied: true, Outcome: "FAILED_FINAL"}
		return finish(ctx, tx, job, nodes, ledger.JobFailedFinal, "SLA_EXCEEDED", job.Reason, now)
	})
	return out, err
}

// Recover is a new owner's first write to a reclaimed job, at the epoch it
// holds: it evaluates the job again, so anything that became ready while its
// owner was gone starts. A write at an older epoch changes nothing (ErrFenced).
func (e *Engine) Recover(ctx context.Context, jobID, owner string, epoch int64) error {
	var fenced error
	err := e.store.InTx(ctx, func(tx *ledger.Tx) error {
		fenced = nil
		job, err := tx.LockJob(ctx, jobID)
		if err != nil {
			return err
		}
		if job.OwnerID != owner || job.OwnerEpoch != epoch {
			// Record the rejected write (committed), then report it.
			tx.Append(ledger.Event{JobID: jobID, Type: ledger.EventFenced, Reason: "STALE_OWNER_EPOCH",
				Data: map[string]any{"owner": owner, "epoch": epoch, "current_owner": job.OwnerID, "current_epoch": job.OwnerEpoch}})
			fenced = fmt.Errorf("recover %s as %s@%d (now %s@%d): %w", jobID, owner, epoch, job.OwnerID, job.OwnerEpoch, ErrFenced)
			return nil
		}
		if job.Status.Terminal() {
			return nil
		}
		r, err := e.open(ctx, tx, job, e.cfg.Now())
		if err != nil {
			return err
		}
		return r.advance(ctx)
	})
	if err != nil {
		return err
	}
	return fenced
}

func oneOf(s ledger.StepStatus, states []ledger.StepStatus) bool {
	for _, x := range states {
		if s == x {
			return true
		}
	}
	return false
}
