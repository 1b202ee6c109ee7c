// Package engine is Lucius's job state machine. It runs workflow definitions
// (package workflow): each transition of a job and its steps is decided by the
// pure evaluator and applied through one ledger transaction, so the state
// change, its audit events and the outbox messages it implies commit together
// (invariant 3). The orchestrator runs it for job creation and callbacks; the
// gateway runs it for cancellation; sweepers will run it for timeouts. Linear
// protocols and DAGs share this one code path.
//
// Its API speaks in its own types (CallbackKey, Result, Heartbeat,
// Checkpoint): a service converts the contract's requests at its edge. The
// contract's types it takes or returns are the bus messages it consumes and
// writes itself (QueuedJob, Directive) and a callback's Outcome.
//
// Guards, checked under the job's row lock:
//   - a terminal job or step never changes (late callbacks are recorded only);
//   - a callback applies only to the step's current (attempt_no, lease_id);
//   - nothing starts before every step it depends on is done, and nothing on a
//     branch not taken;
//   - a cancelled or failed job starts no new step.
package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

// Definitions finds workflow versions (package registry implements it).
type Definitions interface {
	Get(ctx context.Context, workflowID string, version int) (*workflow.Definition, error)
}

// Config configures an engine. Zero values take the documented defaults.
type Config struct {
	// Definitions resolves the workflow a job runs. Required.
	Definitions Definitions
	// Callbacks is where workers send ACK and RESULT, copied into every directive.
	Callbacks Callbacks
	// CallbackKeys sign each directive's callback token, which binds the
	// worker's callbacks to that attempt. Required; every process that
	// dispatches or serves callbacks shares the keys.
	CallbackKeys *auth.CallbackKeys
	// CallbackTokenGrace is how long a callback token outlives the attempt's
	// lease (default 5m), so a worker whose lease just lapsed still reaches
	// the stale-callback path instead of a refusal.
	CallbackTokenGrace time.Duration
	// WorkspaceRoot is the URL under which job workspaces live, e.g.
	// file:///var/lucius/workspace. Required.
	WorkspaceRoot string
	// OutputLimit caps a RESULT's inline output in bytes (default 256 KiB);
	// larger results belong in artifacts.
	OutputLimit int
	// DefaultSLA bounds a job's life when its workflow sets no sla_seconds
	// (default 24h): still running then, it fails with SLA_EXCEEDED.
	DefaultSLA time.Duration
	// Breakers says which worker services' circuit breakers hold new
	// directives; nil holds none. A held step waits READY (reason
	// CIRCUIT_OPEN) until ReleaseHold dispatches it.
	Breakers Breakers
	// Pauses says which jobs an operator paused; nil pauses none. A paused
	// job's next steps wait READY (reason PAUSED) until ReleaseHold.
	Pauses Pauses
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Breakers tells whether a worker service's circuit breaker holds new
// directives (package breaker's Cache implements it).
type Breakers interface {
	Holding(service string) bool
}

// Callbacks are the endpoints a directive tells workers to call.
type Callbacks struct {
	// GRPCTarget is a gRPC target for CallbackService, e.g. "dns:///orchestrator:9091".
	GRPCTarget string
	// RESTBaseURL is the base of the REST callback routes, e.g. "http://orchestrator:8081".
	RESTBaseURL string
}

// DefaultOutputLimit is the default cap on a RESULT's inline output.
const DefaultOutputLimit = 256 << 10

// Validate reports missing or inconsistent settings.
func (c Config) Validate() error {
	var errs []error
	if c.Definitions == nil {
		errs = append(errs, errors.New("engine: Definitions is required"))
	}
	if c.WorkspaceRoot == "" {
		errs = append(errs, errors.New("engine: WorkspaceRoot is required"))
	}
	if c.Callbacks.GRPCTarget == "" && c.Callbacks.RESTBaseURL == "" {
		errs = append(errs, errors.New("engine: Callbacks needs a gRPC target or a REST base URL"))
	}
	if c.CallbackKeys == nil {
		errs = append(errs, errors.New("engine: CallbackKeys is required"))
	}
	if c.OutputLimit < 0 {
		errs = append(errs, errors.New("engine: OutputLimit must not be negative"))
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
	if cfg.OutputLimit == 0 {
		cfg.OutputLimit = DefaultOutputLimit
	}
	if cfg.CallbackTokenGrace == 0 {
		cfg.CallbackTokenGrace = 5 * time.Minute
	}
	if cfg.DefaultSLA == 0 {
		cfg.DefaultSLA = 24 * time.Hour
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
	// ErrUnknownWorkflow: the job's workflow version cannot be found.
	ErrUnknownWorkflow = errors.New("unknown workflow")
)

// callbackToken signs the token of an attempt whose lease (or wait for an
// ACK) ends at leaseEnd.
func (e *Engine) callbackToken(job *ledger.Job, step *ledger.Step, attemptNo int, leaseID string, now, leaseEnd time.Time) (string, error) {
	return e.cfg.CallbackKeys.Sign(auth.Attempt{JobID: job.JobID, StepID: step.StepID, AttemptNo: attemptNo,
		LeaseID: leaseID, OwnerEpoch: job.OwnerEpoch, Service: step.Service}, now, leaseEnd.Add(e.cfg.CallbackTokenGrace))
}

// principal names who asked for a change (cancel, replay) in its event:
// the authenticated caller, or "lucius" for Lucius's own repairs.
func principal(ctx context.Context) string {
	if p := auth.FromContext(ctx); p != nil {
		return p.String()
	}
	return "lucius"
}

// setJobStatus moves the job and records the transition.
func setJobStatus(tx *ledger.Tx, j *ledger.Job, to ledger.JobStatus, reason string, now time.Time) {
	if j.Status == to {
		return
	}
	tx.Append(ledger.Event{JobID: j.JobID, Type: ledger.EventJobStatusChanged, FromStatus: string(j.Status),
		ToStatus: string(to), Reason: reason})
	if to.Terminal() && !j.Status.Terminal() {
		tx.ReleaseSlot(j.TenantID) // the admission slot the request took
		metrics.jobEnded(tx, j, to, now)
	}
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
