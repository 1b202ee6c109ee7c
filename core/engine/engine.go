// Package engine is Lucius's job state machine. It decides every transition of
// a job and its steps and applies it through one ledger transaction, so the state
// change, its audit events and the outbox messages it implies commit together
// (invariant 3). The orchestrator runs it for job creation and callbacks; the
// gateway runs it for cancellation; sweepers will run it for timeouts. There is
// no second code path.
//
// Guards, checked under the job's row lock:
//   - a terminal job or step never changes (late callbacks are recorded only);
//   - a callback applies only to the step's current (attempt_no, lease_id);
//   - a sequential protocol has at most one step in flight;
//   - a cancelled job starts no new step.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/protocol"
)

// Config configures an engine. Zero values take the documented defaults.
type Config struct {
	// Protocols maps request types to their steps. Required.
	Protocols *protocol.Registry
	// Callbacks is where workers send ACK and RESULT, copied into every directive.
	Callbacks Callbacks
	// WorkspaceRoot is the URL under which job workspaces live, e.g.
	// file:///var/lucius/workspace. Required.
	WorkspaceRoot string
	// RetryBackoff is the delay before a retryable failure's next attempt
	// (default 2s); it doubles per attempt up to MaxRetryBackoff (default 60s).
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	Logger          *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Callbacks are the endpoints a directive tells workers to call.
type Callbacks struct {
	// GRPCTarget is a gRPC target for CallbackService, e.g. "dns:///orchestrator:9091".
	GRPCTarget string
	// RESTBaseURL is the base of the REST callback routes, e.g. "http://orchestrator:8081".
	RESTBaseURL string
}

// Validate reports missing or inconsistent settings.
func (c Config) Validate() error {
	var errs []error
	if c.Protocols == nil {
		errs = append(errs, errors.New("engine: Protocols is required"))
	}
	if c.WorkspaceRoot == "" {
		errs = append(errs, errors.New("engine: WorkspaceRoot is required"))
	}
	if c.Callbacks.GRPCTarget == "" && c.Callbacks.RESTBaseURL == "" {
		errs = append(errs, errors.New("engine: Callbacks needs a gRPC target or a REST base URL"))
	}
	if c.RetryBackoff < 0 || c.MaxRetryBackoff < 0 {
		errs = append(errs, errors.New("engine: retry backoff must not be negative"))
	}
	return errors.Join(errs...)
}

// Engine applies transitions to jobs in a ledger.
type Engine struct {
	store *ledger.Store
	cfg   Config
	log   *slog.Logger
}

// New returns an engine over store.
func New(store *ledger.Store, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = 2 * time.Second
	}
	if cfg.MaxRetryBackoff == 0 {
		cfg.MaxRetryBackoff = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.WorkspaceRoot = strings.TrimSuffix(cfg.WorkspaceRoot, "/")
	return &Engine{store: store, cfg: cfg, log: cfg.Logger}, nil
}

// Store is the ledger the engine writes to.
func (e *Engine) Store() *ledger.Store { return e.store }

// Errors callers map to API statuses.
var (
	// ErrUnknownStep: the callback names a step the job does not have.
	ErrUnknownStep = errors.New("unknown step")
	// ErrUnknownProtocol: the job's request type has no protocol loaded.
	ErrUnknownProtocol = errors.New("unknown protocol")
)

// setJobStatus moves the job and records the transition.
func setJobStatus(tx *ledger.Tx, j *ledger.Job, to ledger.JobStatus, reason string, now time.Time) {
	if j.Status == to {
		return
	}
	tx.Append(ledger.Event{JobID: j.JobID, Type: ledger.EventJobStatusChanged, FromStatus: string(j.Status),
		ToStatus: string(to), Reason: reason})
	j.Status = to
	if to.Terminal() {
		j.CompletedAt = now
		j.CurrentStepID = ""
	}
}

// setStepStatus moves the step and records the transition.
func setStepStatus(tx *ledger.Tx, s *ledger.Step, to ledger.StepStatus, reason string, now time.Time) {
	if s.Status == to {
		return
	}
	tx.Append(ledger.Event{JobID: s.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo, Type: ledger.EventStepStatusChanged,
		FromStatus: string(s.Status), ToStatus: string(to), Reason: reason})
	s.Status = to
	if to.Terminal() {
		s.CompletedAt = now
	}
}

// cancelPendingSteps closes steps that will never run because the job ended.
func cancelPendingSteps(ctx context.Context, tx *ledger.Tx, steps []ledger.Step, reason string, now time.Time) error {
	for i := range steps {
		s := &steps[i]
		if s.Status == ledger.StepPending || s.Status == ledger.StepReady {
			setStepStatus(tx, s, ledger.StepCancelled, reason, now)
			s.Reason = reason
			if err := tx.UpdateStep(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

func findStep(steps []ledger.Step, id string) (*ledger.Step, int) {
	for i := range steps {
		if steps[i].StepID == id {
			return &steps[i], i
		}
	}
	return nil, -1
}

func stepNotFound(jobID, stepID string) error {
	return fmt.Errorf("job %s has no step %q: %w", jobID, stepID, ErrUnknownStep)
}
