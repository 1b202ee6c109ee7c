package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

// Outcome is what a callback did (lucius.v1.CallbackOutcome).
type Outcome = luciusv1.CallbackOutcome

// Reasons recorded on rejected callbacks; they name the outcome.
const (
	ReasonStaleAttempt  = "STALE_ATTEMPT"
	ReasonLeaseMismatch = "LEASE_MISMATCH"
	ReasonAfterTerminal = "AFTER_TERMINAL"
	ReasonDuplicate     = "DUPLICATE"
	// ReasonOutputTooLarge fails a step whose RESULT output exceeds the limit.
	ReasonOutputTooLarge = "OUTPUT_TOO_LARGE"
)

// CallbackKey names the attempt a worker's callback speaks for, as its
// directive named it, and the worker that calls.
type CallbackKey struct {
	JobID, StepID string
	AttemptNo     int
	LeaseID       string
	// CorrelationID is what the worker echoed from its directive; it is set
	// on the events the callback causes.
	CorrelationID string
	// WorkerID names the worker instance; empty when it gave none.
	WorkerID string
}

// callbackKey is a CallbackKey with the kind of callback it came with.
type callbackKey struct {
	CallbackKey
	kind string // ACK, RESULT, HEARTBEAT or CHECKPOINT
}

// attemptNotFound is the error of a callback naming the step's current
// attempt number and lease when the ledger holds no such attempt.
func (k callbackKey) attemptNotFound() error {
	return fmt.Errorf("attempt %s/%s#%d: %w", k.JobID, k.StepID, k.AttemptNo, ledger.ErrNotFound)
}

// callbackTx runs a callback's transaction and sets the correlation id the
// worker echoed on every event of the job it appended (seed 004 §12: the id
// travels ingress → directive → callbacks → events).
func (e *Engine) callbackTx(ctx context.Context, key callbackKey, fn func(tx *ledger.Tx) error) error {
	return e.store.InTx(ctx, func(tx *ledger.Tx) error {
		err := fn(tx)
		tx.Annotate(key.JobID, "correlation_id", key.CorrelationID)
		return err
	})
}

// AckResult is the answer to Ack.
type AckResult struct {
	Outcome    Outcome
	StepStatus ledger.StepStatus
}

// Ack applies a worker's pickup signal: DISPATCHING or AWAITING_ACK become
// IN_PROGRESS with the execution lease running, and the job becomes
// IN_PROGRESS on its first acknowledged step.
func (e *Engine) Ack(ctx context.Context, k CallbackKey) (AckResult, error) {
	key := callbackKey{k, "ACK"}
	var out AckResult
	err := e.callbackTx(ctx, key, func(tx *ledger.Tx) error {
		now := e.cfg.Now()
		job, step, attempt, err := lockStep(ctx, tx, key)
		if err != nil {
			return err
		}
		out.StepStatus = step.Status
		if outcome, rejected := checkCallback(tx, job, step, key, step.Status == ledger.StepInProgress || step.Status == ledger.StepPolling); rejected {
			out.Outcome = outcome
			return nil
		}
		if attempt == nil {
			return key.attemptNotFound()
		}
		if err := e.startStep(ctx, tx, job, step, attempt, k.WorkerID, now); err != nil {
			return err
		}
		if err := writeStep(ctx, tx, step, attempt); err != nil {
			return err
		}
		out = AckResult{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED, StepStatus: step.Status}
		return tx.UpdateJob(ctx, job)
	})
	return out, err
}

// ResultStatus is how an attempt ended, as its worker reports it.
type ResultStatus string

// The statuses a RESULT reports.
const (
	// ResultSucceeded: the attempt did its work; its output and artifacts
	// are kept on the step.
	ResultSucceeded ResultStatus = "SUCCEEDED"
	// ResultFailed: the attempt failed; Result.Retryable decides whether
	// the step is retried.
	ResultFailed ResultStatus = "FAILED"
	// ResultPolling: the work goes on elsewhere; the step waits in POLLING
	// with its attempt closed until it is polled again.
	ResultPolling ResultStatus = "POLLING"
)

// Result is how an attempt ended (a worker's RESULT).
type Result struct {
	// Status is SUCCEEDED, FAILED or POLLING; any other value is a failure.
	Status ResultStatus
	// Retryable makes a failed attempt worth another after the node's
	// backoff; otherwise the step fails for good.
	Retryable bool
	// Reason says why the attempt failed, or how a POLLING step is doing.
	Reason string
	// Output is the attempt's output, a JSON object (a POLLING step's
	// progress); nil when it has none.
	Output json.RawMessage
	// Artifacts are the files a successful attempt produced.
	Artifacts []ledger.Artifact
}

// ResultResult is the answer to Result.
type ResultResult struct {
	Outcome    Outcome
	StepStatus ledger.StepStatus
	JobStatus  ledger.JobStatus
}

// Result applies the end of an attempt. SUCCEEDED records the output and
// moves the job on; FAILED retries (RETRYABLE, attempts left, after the node's
// backoff) or fails the step for good, which fails the job fast unless the
// node has an on_failure path. A RESULT before any ACK implies the ACK. The
// result of a step still running when its job ended is recorded on the step only.
func (e *Engine) Result(ctx context.Context, k CallbackKey, res Result) (ResultResult, error) {
	key := callbackKey{k, "RESULT"}
	var out ResultResult
	err := e.callbackTx(ctx, key, func(tx *ledger.Tx) error {
		now := e.cfg.Now()
		job, step, attempt, err := lockStep(ctx, tx, key)
		if err != nil {
			return err
		}
		out.StepStatus, out.JobStatus = step.Status, job.Status
		// A POLLING step's current attempt has ended: another RESULT for it repeats one.
		if outcome, rejected := checkCallback(tx, job, step, key, step.Status == ledger.StepPolling); rejected {
			out.Outcome = outcome
			return nil
		}
		if attempt == nil {
			return key.attemptNotFound()
		}
		if step.Status != ledger.StepInProgress && step.Status != ledger.StepPolling {
			if err := e.startStep(ctx, tx, job, step, attempt, k.WorkerID, now); err != nil {
				return err
			}
		}
		attempt.WorkerID = firstNonEmpty(k.WorkerID, attempt.WorkerID)
		attempt.CompletedAt = now
		var r *run
		if !job.Status.Terminal() {
			if r, err = e.open(ctx, tx, job, now); err != nil {
				return err
			}
			if node, ok := r.nodes[step.NodeID]; ok && step.Kind != ledger.KindChild {
				step = node // the run's copy, so evaluation sees this result
			}
		}
		if err := e.settle(ctx, tx, r, job, step, attempt, res, now); err != nil {
			return err
		}
		metrics.stepResult(tx, step, attempt, now)
		if r != nil {
			if err := r.advance(ctx); err != nil {
				return err
			}
		}
		out = ResultResult{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED, StepStatus: step.Status, JobStatus: job.Status}
		return tx.UpdateJob(ctx, job)
	})
	return out, err
}

// settle records how an attempt ended on the step, its attempt and, for a
// fan-out child, its parent's counters. r is nil when the job already ended.
func (e *Engine) settle(ctx context.Context, tx *ledger.Tx, r *run, job *ledger.Job, step *ledger.Step,
	attempt *ledger.Attempt, res Result, now time.Time) error {
	if res.Status == ResultPolling {
		if err := e.poll(ctx, tx, job, step, attempt, res, now); err != nil {
			return err
		}
		return schedulePoll(ctx, tx, r, step, now)
	}
	if step.RetryBase > 0 { // it may have been polling on a schedule: no more
		if err := tx.EndPoll(ctx, job.JobID, step.StepID); err != nil {
			return err
		}
	}
	if res.Status != ResultSucceeded {
		f := failure{class: classNonRetryable, code: "RESULT_FAILED_NON_RETRYABLE", reason: res.Reason, backoff: true}
		if res.Retryable {
			f.class, f.code = classRetryable, "RESULT_FAILED_RETRYABLE"
		}
		return e.failAttempt(ctx, tx, r, job, step, attempt, f, now)
	}
	if res.Output != nil {
		if len(res.Output) > e.cfg.OutputLimit {
			return e.failAttempt(ctx, tx, r, job, step, attempt, failure{class: classNonRetryable, code: ReasonOutputTooLarge,
				reason: fmt.Sprintf("%s: the output is %d bytes, over the %d-byte limit; write large results as artifacts and return their refs",
					ReasonOutputTooLarge, len(res.Output), e.cfg.OutputLimit)}, now)
		}
		step.Output = res.Output
	}
	step.Artifacts = res.Artifacts
	setStepStatus(tx, step, ledger.StepSucceeded, "RESULT_SUCCEEDED", now)
	attempt.Status = ledger.StepSucceeded
	parent, err := e.parentOf(ctx, tx, r, job, step)
	if err != nil {
		return err
	}
	if parent != nil {
		parent.Children.Running--
		parent.Children.Succeeded++
	}
	return e.writeSettled(ctx, tx, r, step, attempt, parent, now)
}

// Failure classes of an attempt.
const (
	classRetryable    = "RETRYABLE"
	classNonRetryable = "NON_RETRYABLE"
)

// failure is how an attempt ended badly, whatever reported it: a RESULT, an ACK
// timeout or an expired lease.
type failure struct {
	class  string // RETRYABLE or NON_RETRYABLE
	code   string // the event reason, e.g. ACK_TIMEOUT
	reason string // human-readable
	// backoff delays the next attempt by the node's retry policy; without it the
	// next attempt is dispatched at once.
	backoff bool
	// track is the retry track a retry counts on (TrackAck); empty for
	// TrackExecution.
	track string
}

// failAttempt ends an attempt that failed: a retryable failure with attempts
// left starts the next attempt (same pinned routing, new lease), anything else
// fails the step for good with a dead-letter record, and the job fails fast
// unless an on_failure path takes over. r is nil when the job already ended.
func (e *Engine) failAttempt(ctx context.Context, tx *ledger.Tx, r *run, job *ledger.Job, step *ledger.Step,
	attempt *ledger.Attempt, f failure, now time.Time) error {
	step.FailureClass, step.Reason = f.class, f.reason
	attempt.FailureClass, attempt.Reason = f.class, f.reason
	attempt.CompletedAt = now
	if f.class == classRetryable && step.AttemptNo-step.RetryBase < step.MaxAttempts && r != nil && job.Status != ledger.JobCancelling {
		node, _ := r.def.Node(step.NodeID)
		attempt.Status = ledger.StepFailedRetry
		setStepStatus(tx, step, ledger.StepFailedRetry, f.code, now)
		if err := tx.UpdateAttempt(ctx, attempt); err != nil {
			return err
		}
		metrics.stepRetried(tx, step, cmp.Or(f.track, TrackExecution))
		at := now
		if f.backoff {
			at = now.Add(node.Task.Retry.Backoff(step.AttemptNo))
		}
		return r.newAttempt(ctx, step, at, "RETRY")
	}
	code := f.code
	if f.class == classRetryable {
		code = "MAX_ATTEMPTS_EXHAUSTED"
	}
	attempt.Status = ledger.StepFailedFinal
	setStepStatus(tx, step, ledger.StepFailedFinal, code, now)
	if err := tx.InsertDeadLetter(ctx, ledger.DeadLetter{Kind: ledger.DeadLetterStep, JobID: job.JobID, StepID: step.StepID,
		AttemptNo: step.AttemptNo, Reason: code, Description: f.reason}); err != nil {
		return err
	}
	if r != nil && job.Reason == "" {
		job.Reason = fmt.Sprintf("step %s failed (%s): %s", step.StepID, code, f.reason)
	}
	parent, err := e.parentOf(ctx, tx, r, job, step)
	if err != nil {
		return err
	}
	if parent != nil {
		parent.Children.Running--
		parent.Children.Failed++
	}
	return e.writeSettled(ctx, tx, r, step, attempt, parent, now)
}

// parentOf returns a fan-out child's parent step (nil for a node step).
func (e *Engine) parentOf(ctx context.Context, tx *ledger.Tx, r *run, job *ledger.Job, step *ledger.Step) (*ledger.Step, error) {
	if step.Kind != ledger.KindChild {
		return nil, nil
	}
	if r != nil {
		return r.nodes[step.NodeID], nil
	}
	return tx.Step(ctx, job.JobID, step.Parent)
}

func (e *Engine) writeSettled(ctx context.Context, tx *ledger.Tx, r *run, step *ledger.Step,
	attempt *ledger.Attempt, parent *ledger.Step, now time.Time) error {
	if err := writeStep(ctx, tx, step, attempt); err != nil {
		return err
	}
	if parent == nil {
		return nil
	}
	if r == nil {
		closeFanOut(tx, parent, now) // the job ended; close the fan-out once its last child is back
	}
	return tx.UpdateStep(ctx, parent)
}

// Heartbeat is what a worker's heartbeat reports besides being alive.
type Heartbeat struct {
	// Progress is the attempt's progress, a JSON object; nil when it gave
	// none (the last one recorded stays).
	Progress json.RawMessage
}

// HeartbeatResult is the answer to Heartbeat.
type HeartbeatResult struct {
	Outcome        Outcome
	StepStatus     ledger.StepStatus
	LeaseExpiresAt time.Time
	// CallbackToken replaces the attempt's token: it expires with the new lease.
	CallbackToken string
}

// Heartbeat extends the lease of the current attempt by the node's timeout
// and records its progress. A heartbeat before any ACK implies the ACK.
func (e *Engine) Heartbeat(ctx context.Context, k CallbackKey, hb Heartbeat) (HeartbeatResult, error) {
	key := callbackKey{k, "HEARTBEAT"}
	var out HeartbeatResult
	err := e.callbackTx(ctx, key, func(tx *ledger.Tx) error {
		now := e.cfg.Now()
		job, step, attempt, err := lockStep(ctx, tx, key)
		if err != nil {
			return err
		}
		out.StepStatus = step.Status
		if outcome, rejected := checkCallback(tx, job, step, key, false); rejected {
			out.Outcome = outcome
			return nil
		}
		if attempt == nil {
			return key.attemptNotFound()
		}
		if step.Status != ledger.StepInProgress && step.Status != ledger.StepPolling {
			if err := e.startStep(ctx, tx, job, step, attempt, k.WorkerID, now); err != nil {
				return err
			}
			if err := tx.UpdateStep(ctx, step); err != nil {
				return err
			}
		}
		timeout, err := e.timeout(ctx, job, step)
		if err != nil {
			return err
		}
		attempt.LeaseExpiresAt, attempt.LastHeartbeatAt = now.Add(timeout), now
		if hb.Progress != nil {
			attempt.Progress = hb.Progress
		}
		if err := tx.UpdateAttempt(ctx, attempt); err != nil {
			return err
		}
		token, err := e.callbackToken(job, step, attempt.AttemptNo, attempt.LeaseID, now, attempt.LeaseExpiresAt)
		if err != nil {
			return err
		}
		out = HeartbeatResult{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED, StepStatus: step.Status,
			LeaseExpiresAt: attempt.LeaseExpiresAt, CallbackToken: token}
		return tx.UpdateJob(ctx, job)
	})
	return out, err
}

// timeout is the execution lease of a step's node.
func (e *Engine) timeout(ctx context.Context, job *ledger.Job, step *ledger.Step) (time.Duration, error) {
	def, err := e.cfg.Definitions.Get(ctx, job.WorkflowID, job.WorkflowVersion)
	if err != nil {
		return 0, err
	}
	if node, ok := def.Node(step.NodeID); ok && node.Task != nil {
		return node.Task.Timeout, nil
	}
	return workflow.DefaultTimeout, nil
}

// lockStep locks the job and the named step and returns them with the
// attempt the callback names (nil when there is none), in one round trip.
func lockStep(ctx context.Context, tx *ledger.Tx, key callbackKey) (*ledger.Job, *ledger.Step, *ledger.Attempt, error) {
	job, step, attempt, err := tx.LockCallback(ctx, key.JobID, key.StepID, key.AttemptNo)
	if job != nil && (errors.Is(err, ledger.ErrNotFound) || (err == nil && !step.Executable())) {
		return nil, nil, nil, fmt.Errorf("job %s has no step %q that runs work: %w", key.JobID, key.StepID, ErrUnknownStep)
	}
	return job, step, attempt, err
}

// checkCallback applies the guards every callback passes before it may change
// state. A rejected callback is recorded as an event with its reason.
// alreadyApplied tells whether this kind of callback already took effect for
// the current attempt (an ACK for a step that is already running).
func checkCallback(tx *ledger.Tx, job *ledger.Job, step *ledger.Step, key callbackKey, alreadyApplied bool) (Outcome, bool) {
	current := key.AttemptNo == step.AttemptNo && key.LeaseID == step.LeaseID
	var outcome Outcome
	var reason string
	switch {
	case current && (alreadyApplied || finishedByThisAttempt(step)):
		outcome, reason = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE, ReasonDuplicate
	case step.Status.Terminal():
		outcome, reason = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_AFTER_TERMINAL, ReasonAfterTerminal
	case key.AttemptNo != step.AttemptNo:
		outcome, reason = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT, ReasonStaleAttempt
	case key.LeaseID != step.LeaseID:
		outcome, reason = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_LEASE_MISMATCH, ReasonLeaseMismatch
	default:
		return 0, false
	}
	typ := ledger.EventCallbackRejected
	if outcome == luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE {
		typ = ledger.EventCallbackDuplicate
	}
	tx.Append(ledger.Event{JobID: key.JobID, StepID: key.StepID, AttemptNo: key.AttemptNo, Type: typ, Reason: reason,
		Data: map[string]any{"callback": key.kind, "lease_id": key.LeaseID, "current_attempt_no": step.AttemptNo,
			"step_status": string(step.Status), "job_status": string(job.Status)}})
	return outcome, true
}

// finishedByThisAttempt: a terminal step whose status came from a RESULT of its
// current attempt (as opposed to a cancellation), so a repeat RESULT is a duplicate.
func finishedByThisAttempt(step *ledger.Step) bool {
	return step.Status == ledger.StepSucceeded || step.Status == ledger.StepFailedFinal
}

// startStep records the pickup of the current attempt and starts its
// execution lease (the node's timeout).
func (e *Engine) startStep(ctx context.Context, tx *ledger.Tx, job *ledger.Job, step *ledger.Step, attempt *ledger.Attempt, workerID string, now time.Time) error {
	setStepStatus(tx, step, ledger.StepInProgress, "ACKNOWLEDGED", now)
	if step.StartedAt.IsZero() {
		step.StartedAt = now
	}
	attempt.Status, attempt.AckedAt = ledger.StepInProgress, now
	attempt.WorkerID = workerID
	metrics.stepAcked(tx, step, attempt, now)
	timeout, err := e.timeout(ctx, job, step)
	if err != nil {
		return err
	}
	attempt.LeaseExpiresAt = now.Add(timeout)
	if job.Status == ledger.JobDispatching || job.Status == ledger.JobQueued || job.Status == ledger.JobFailedRetry {
		setJobStatus(tx, job, ledger.JobInProgress, "STEP_ACKNOWLEDGED", now)
	}
	return nil
}

// writeStep persists a step and its attempt.
func writeStep(ctx context.Context, tx *ledger.Tx, step *ledger.Step, attempt *ledger.Attempt) error {
	if err := tx.UpdateStep(ctx, step); err != nil {
		return err
	}
	return tx.UpdateAttempt(ctx, attempt)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// DetachedDirective returns the whole directive of an attempt whose bus
// message carried it detached (Directive.detached). ErrNotFound when the
// attempt does not exist, was sent whole, or leaseID is not its lease.
// It answers a contract Directive: the bus message the engine itself wrote.
func (e *Engine) DetachedDirective(ctx context.Context, jobID, stepID string, attemptNo int, leaseID string) (*luciusv1.Directive, error) {
	body, lease, err := e.store.DetachedDirective(ctx, jobID, stepID, attemptNo)
	if err != nil {
		return nil, err
	}
	if lease != leaseID {
		return nil, fmt.Errorf("detached directive %s/%s#%d: lease %s: %w", jobID, stepID, attemptNo, leaseID, ledger.ErrNotFound)
	}
	d := &luciusv1.Directive{}
	if err := protojson.Unmarshal(body, d); err != nil {
		return nil, fmt.Errorf("detached directive %s/%s#%d: %w", jobID, stepID, attemptNo, err)
	}
	return d, nil
}
