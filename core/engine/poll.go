package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
)

// poll records a RESULT POLLING: the work goes on elsewhere, so the attempt
// ends and the step waits in POLLING, without a lease, until Repoll starts
// the next attempt. Its output (progress) is kept on the step; the job's
// notify topic hears of it.
func (e *Engine) poll(ctx context.Context, tx *ledger.Tx, job *ledger.Job, step *ledger.Step, attempt *ledger.Attempt,
	res Result, now time.Time) error {
	if res.Output != nil {
		if len(res.Output) > e.cfg.OutputLimit {
			return fmt.Errorf("%s: a POLLING output of %d bytes is over the %d-byte limit", ReasonOutputTooLarge, len(res.Output), e.cfg.OutputLimit)
		}
		step.Output, attempt.Progress = res.Output, res.Output
	}
	step.Reason = res.Reason
	attempt.Status = ledger.StepPolling
	setStepStatus(tx, step, ledger.StepPolling, "RESULT_POLLING", now)
	if err := writeStep(ctx, tx, step, attempt); err != nil {
		return err
	}
	if job.Notify == "" {
		return nil
	}
	msg, err := jobUpdate(job, step, now)
	if err != nil {
		return err
	}
	tx.Enqueue(msg)
	return nil
}

// Repoll dispatches the next attempt of a step waiting in POLLING (a
// runbook's poll-check): same pinned routing, a new lease. The poll does not
// count against the step's retry attempts. Nothing happens (Applied false)
// when the step is not POLLING any more or the job ended.
func (e *Engine) Repoll(ctx context.Context, jobID, stepID string) (Swept, error) {
	var out Swept
	err := e.store.InTx(ctx, func(tx *ledger.Tx) error {
		out = Swept{}
		now := e.cfg.Now()
		job, err := tx.LockJob(ctx, jobID)
		if err != nil || job.Status.Terminal() {
			return err
		}
		step, err := tx.LockStep(ctx, jobID, stepID)
		if err != nil || step.Status != ledger.StepPolling {
			return err
		}
		r, err := e.open(ctx, tx, job, now)
		if err != nil {
			return err
		}
		if node, ok := r.nodes[step.NodeID]; ok && step.Kind != ledger.KindChild {
			step = node
		}
		if err := r.repoll(ctx, step); err != nil {
			return err
		}
		out = Swept{Applied: true, Outcome: "REDISPATCHED"}
		return tx.UpdateJob(ctx, job)
	})
	return out, err
}

// repoll dispatches the next attempt of a POLLING step at once, same pinned
// routing and a new lease; the polls so far do not count against its retry
// attempts.
func (r *run) repoll(ctx context.Context, step *ledger.Step) error {
	step.RetryBase = step.AttemptNo
	return r.newAttempt(ctx, step, r.now, "REPOLL")
}

// schedulePoll sets when a step that answered POLLING is dispatched again,
// when its node polls on a schedule (poll_interval); otherwise it waits for
// a poll-check (Repoll). r is nil when the job already ended.
func schedulePoll(ctx context.Context, tx *ledger.Tx, r *run, step *ledger.Step, now time.Time) error {
	if r == nil {
		return nil
	}
	node, ok := r.def.Node(step.NodeID)
	if !ok || node.Task == nil || node.Task.PollInterval == 0 {
		return nil
	}
	return tx.SchedulePoll(ctx, step.JobID, step.StepID, now, now.Add(node.Task.PollInterval))
}

// PollDue polls a step whose scheduled poll is due (ledger.Store.DuePolls):
// its next attempt is dispatched (REPOLLED; polls do not count against the
// retry attempts), or, poll_timeout after its first POLLING answer, the step
// fails for good with POLL_TIMEOUT. A step that stopped polling meanwhile
// (answered, cancelled, its job ended) is left alone.
func (e *Engine) PollDue(ctx context.Context, k ledger.AttemptKey) (Swept, error) {
	return e.sweepStep(ctx, k, sweepRule{code: "POLL",
		states: []ledger.StepStatus{ledger.StepPolling},
		due:    func(*ledger.Tx, *ledger.Attempt, time.Time) (bool, error) { return true, nil },
		repair: func(tx *ledger.Tx, r *run, job *ledger.Job, step *ledger.Step, attempt *ledger.Attempt, now time.Time) (string, error) {
			node, ok := r.def.Node(step.NodeID)
			if !ok || node.Task == nil || node.Task.PollInterval == 0 {
				return "", tx.EndPoll(ctx, job.JobID, step.StepID) // its definition polls on no schedule
			}
			if timeout := node.Task.PollTimeout; timeout > 0 {
				started, err := tx.PollStarted(ctx, job.JobID, step.StepID)
				if err != nil {
					return "", err
				}
				if !started.IsZero() && !now.Before(started.Add(timeout)) {
					if err := tx.EndPoll(ctx, job.JobID, step.StepID); err != nil {
						return "", err
					}
					return e.expire(ctx, tx, r, job, step, attempt, failure{class: classNonRetryable, code: ReasonPollTimeout,
						reason: fmt.Sprintf("still POLLING %s after its first POLLING answer (poll_timeout)", timeout)}, now)
				}
			}
			if err := tx.PollDispatched(ctx, job.JobID, step.StepID); err != nil {
				return "", err
			}
			if err := r.repoll(ctx, step); err != nil {
				return "", err
			}
			return "REPOLLED", nil
		}})
}

// ReasonPollTimeout fails a step still POLLING poll_timeout after its first
// POLLING answer.
const ReasonPollTimeout = "POLL_TIMEOUT"
