package engine

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

// Outcome is what a callback did (lucius.v1.CallbackOutcome).
type Outcome = luciusv1.CallbackOutcome

// Reasons recorded on rejected callbacks; they name the outcome.
const (
	ReasonStaleAttempt  = "STALE_ATTEMPT"
	ReasonLeaseMismatch = "LEASE_MISMATCH"
	ReasonAfterTerminal = "AFTER_TERMINAL"
	ReasonDuplicate     = "DUPLICATE"
)

// callbackKey identifies the attempt a callback speaks for.
type callbackKey struct {
	jobID, stepID string
	attemptNo     int
	leaseID       string
	kind          string // ACK or RESULT
}

// AckResult is the answer to Ack.
type AckResult struct {
	Outcome    Outcome
	StepStatus ledger.StepStatus
}

// Ack applies a worker's pickup signal: DISPATCHING or AWAITING_ACK become
// IN_PROGRESS, and the job becomes IN_PROGRESS on its first acknowledged step.
func (e *Engine) Ack(ctx context.Context, req *luciusv1.AckRequest) (AckResult, error) {
	key := callbackKey{req.GetJobId(), req.GetStepId(), int(req.GetAttemptNo()), req.GetLeaseId(), "ACK"}
	var out AckResult
	err := e.store.InTx(ctx, func(tx *ledger.Tx) error {
		now := e.cfg.Now()
		job, _, step, err := lockStep(ctx, tx, key)
		if err != nil {
			return err
		}
		out.StepStatus = step.Status
		if outcome, rejected := checkCallback(tx, job, step, key, step.Status == ledger.StepInProgress || step.Status == ledger.StepPolling); rejected {
			out.Outcome = outcome
			return nil
		}
		attempt, err := tx.Attempt(ctx, key.jobID, key.stepID, key.attemptNo)
		if err != nil {
			return err
		}
		startStep(tx, job, step, attempt, req.GetWorkerId(), now)
		if err := writeStep(ctx, tx, step, attempt); err != nil {
			return err
		}
		if err := tx.UpdateJob(ctx, job); err != nil {
			return err
		}
		out = AckResult{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED, StepStatus: step.Status}
		return nil
	})
	return out, err
}

// ResultResult is the answer to Result.
type ResultResult struct {
	Outcome    Outcome
	StepStatus ledger.StepStatus
	JobStatus  ledger.JobStatus
}

// Result applies the end of an attempt. SUCCEEDED advances the job to its next
// step or completes it; FAILED retries (RETRYABLE, attempts left, after backoff)
// or fails the step and the job. A CANCELLING job becomes CANCELLED instead of
// starting anything new. A Result before any Ack implies the Ack.
func (e *Engine) Result(ctx context.Context, req *luciusv1.ResultRequest) (ResultResult, error) {
	key := callbackKey{req.GetJobId(), req.GetStepId(), int(req.GetAttemptNo()), req.GetLeaseId(), "RESULT"}
	var out ResultResult
	err := e.store.InTx(ctx, func(tx *ledger.Tx) error {
		now := e.cfg.Now()
		job, steps, step, err := lockStep(ctx, tx, key)
		if err != nil {
			return err
		}
		out.StepStatus, out.JobStatus = step.Status, job.Status
		if outcome, rejected := checkCallback(tx, job, step, key, false); rejected {
			out.Outcome = outcome
			return nil
		}
		attempt, err := tx.Attempt(ctx, key.jobID, key.stepID, key.attemptNo)
		if err != nil {
			return err
		}
		if step.Status != ledger.StepInProgress && step.Status != ledger.StepPolling {
			startStep(tx, job, step, attempt, req.GetWorkerId(), now) // RESULT implies ACK
		}
		attempt.WorkerID = firstNonEmpty(req.GetWorkerId(), attempt.WorkerID)
		attempt.CompletedAt = now
		idx := step.Index
		if req.GetStatus() == luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED {
			if err := e.succeed(ctx, tx, job, steps, idx, attempt, req, now); err != nil {
				return err
			}
		} else if err := e.fail(ctx, tx, job, steps, idx, attempt, req, now); err != nil {
			return err
		}
		out = ResultResult{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED, StepStatus: steps[idx].Status, JobStatus: job.Status}
		return nil
	})
	return out, err
}

func (e *Engine) succeed(ctx context.Context, tx *ledger.Tx, job *ledger.Job, steps []ledger.Step, idx int,
	attempt *ledger.Attempt, req *luciusv1.ResultRequest, now time.Time) error {
	step := &steps[idx]
	if req.GetOutput() != nil {
		out, err := protojson.Marshal(req.GetOutput())
		if err != nil {
			return err
		}
		step.Output = json.RawMessage(out)
	}
	step.Artifacts = artifactsFromProto(req.GetArtifacts())
	setStepStatus(tx, step, ledger.StepSucceeded, "RESULT_SUCCEEDED", now)
	attempt.Status = ledger.StepSucceeded
	if err := writeStep(ctx, tx, step, attempt); err != nil {
		return err
	}
	switch {
	case job.Status == ledger.JobCancelling:
		if err := cancelPendingSteps(ctx, tx, steps, "JOB_CANCELLED", now); err != nil {
			return err
		}
		setJobStatus(tx, job, ledger.JobCancelled, "CANCELLED_AFTER_STEP", now)
	case idx+1 < len(steps):
		if err := e.dispatch(ctx, tx, job, steps, idx+1, now); err != nil {
			return err
		}
	default:
		job.ResultRef = job.OutputRef
		setJobStatus(tx, job, ledger.JobSucceeded, "ALL_STEPS_SUCCEEDED", now)
	}
	return tx.UpdateJob(ctx, job)
}

func (e *Engine) fail(ctx context.Context, tx *ledger.Tx, job *ledger.Job, steps []ledger.Step, idx int,
	attempt *ledger.Attempt, req *luciusv1.ResultRequest, now time.Time) error {
	step := &steps[idx]
	class := "NON_RETRYABLE"
	if req.GetFailureClass() == luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE {
		class = "RETRYABLE"
	}
	step.FailureClass, step.Reason = class, req.GetReason()
	attempt.Status, attempt.FailureClass, attempt.Reason = ledger.StepFailedFinal, class, req.GetReason()
	retry := class == "RETRYABLE" && step.AttemptNo < step.MaxAttempts && job.Status != ledger.JobCancelling
	if retry {
		attempt.Status = ledger.StepFailedRetry
		setStepStatus(tx, step, ledger.StepFailedRetry, "RESULT_FAILED_RETRYABLE", now)
		if err := tx.UpdateAttempt(ctx, attempt); err != nil {
			return err
		}
		if err := e.newAttempt(ctx, tx, job, steps, idx, now, now.Add(e.backoff(step.AttemptNo)), "RETRY_AFTER_BACKOFF"); err != nil {
			return err
		}
		return tx.UpdateJob(ctx, job)
	}
	reason := "RESULT_FAILED_NON_RETRYABLE"
	if class == "RETRYABLE" {
		reason = "MAX_ATTEMPTS_EXHAUSTED"
	}
	setStepStatus(tx, step, ledger.StepFailedFinal, reason, now)
	if err := writeStep(ctx, tx, step, attempt); err != nil {
		return err
	}
	if err := cancelPendingSteps(ctx, tx, steps, "JOB_ENDED", now); err != nil {
		return err
	}
	if job.Status == ledger.JobCancelling {
		setJobStatus(tx, job, ledger.JobCancelled, "CANCELLED_AFTER_STEP", now)
	} else {
		job.Reason = step.StepID + ": " + req.GetReason()
		setJobStatus(tx, job, ledger.JobFailedFinal, reason, now)
	}
	return tx.UpdateJob(ctx, job)
}

// backoff is the delay before attempt n+1: RetryBackoff doubled per attempt, capped.
func (e *Engine) backoff(n int) time.Duration {
	d := e.cfg.RetryBackoff
	for i := 1; i < n && d < e.cfg.MaxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, e.cfg.MaxRetryBackoff)
}

// lockStep locks the job and returns it with its steps and the named step.
func lockStep(ctx context.Context, tx *ledger.Tx, key callbackKey) (*ledger.Job, []ledger.Step, *ledger.Step, error) {
	job, err := tx.LockJob(ctx, key.jobID)
	if err != nil {
		return nil, nil, nil, err
	}
	steps, err := tx.Steps(ctx, key.jobID)
	if err != nil {
		return nil, nil, nil, err
	}
	step, _ := findStep(steps, key.stepID)
	if step == nil {
		return nil, nil, nil, stepNotFound(key.jobID, key.stepID)
	}
	return job, steps, step, nil
}

// checkCallback applies the guards every callback passes before it may change
// state. A rejected callback is recorded as an event with its reason.
// alreadyApplied tells whether this kind of callback already took effect for
// the current attempt (an ACK for a step that is already running).
func checkCallback(tx *ledger.Tx, job *ledger.Job, step *ledger.Step, key callbackKey, alreadyApplied bool) (Outcome, bool) {
	current := key.attemptNo == step.AttemptNo && key.leaseID == step.LeaseID
	var outcome Outcome
	var reason string
	switch {
	case current && (alreadyApplied || (step.Status.Terminal() && (key.kind == "ACK" || finishedByThisAttempt(step)))):
		outcome, reason = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE, ReasonDuplicate
	case step.Status.Terminal() || job.Status.Terminal():
		outcome, reason = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_AFTER_TERMINAL, ReasonAfterTerminal
	case key.attemptNo != step.AttemptNo:
		outcome, reason = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT, ReasonStaleAttempt
	case key.leaseID != step.LeaseID:
		outcome, reason = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_LEASE_MISMATCH, ReasonLeaseMismatch
	default:
		return 0, false
	}
	typ := ledger.EventCallbackRejected
	if outcome == luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE {
		typ = ledger.EventCallbackDuplicate
	}
	tx.Append(ledger.Event{JobID: key.jobID, StepID: key.stepID, AttemptNo: key.attemptNo, Type: typ, Reason: reason,
		Data: map[string]any{"callback": key.kind, "lease_id": key.leaseID, "current_attempt_no": step.AttemptNo,
			"step_status": string(step.Status), "job_status": string(job.Status)}})
	return outcome, true
}

// finishedByThisAttempt: a terminal step whose status came from a RESULT of its
// current attempt (as opposed to a cancellation), so a repeat RESULT is a duplicate.
func finishedByThisAttempt(step *ledger.Step) bool {
	return step.Status == ledger.StepSucceeded || step.Status == ledger.StepFailedFinal
}

// startStep records the pickup of the current attempt.
func startStep(tx *ledger.Tx, job *ledger.Job, step *ledger.Step, attempt *ledger.Attempt, workerID string, now time.Time) {
	setStepStatus(tx, step, ledger.StepInProgress, "ACKNOWLEDGED", now)
	if step.StartedAt.IsZero() {
		step.StartedAt = now
	}
	attempt.Status, attempt.AckedAt = ledger.StepInProgress, now
	attempt.WorkerID = workerID
	if job.Status == ledger.JobDispatching || job.Status == ledger.JobQueued || job.Status == ledger.JobFailedRetry {
		setJobStatus(tx, job, ledger.JobInProgress, "STEP_ACKNOWLEDGED", now)
	}
}

// writeStep persists a step and its attempt.
func writeStep(ctx context.Context, tx *ledger.Tx, step *ledger.Step, attempt *ledger.Attempt) error {
	if err := tx.UpdateStep(ctx, step); err != nil {
		return err
	}
	return tx.UpdateAttempt(ctx, attempt)
}

func artifactsFromProto(refs []*luciusv1.ArtifactRef) []ledger.Artifact {
	out := make([]ledger.Artifact, len(refs))
	for i, r := range refs {
		out[i] = ledger.Artifact{Name: r.GetName(), URI: r.GetUri(), MediaType: r.GetMediaType(),
			SizeBytes: r.GetSizeBytes(), SHA256: r.GetSha256()}
	}
	return out
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
