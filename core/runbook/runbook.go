package runbook

import (
	"maps"
	"regexp"
	"slices"
)

// Runbook is a validated runbook version (see Parse).
type Runbook struct {
	Name        string
	Description string
	Version     int
	// Columns are the member data columns (data_source.columns), in order.
	Columns []string
	// OverdueBehavior is OverdueRerun or OverdueIgnore.
	OverdueBehavior string
	// RerunInit re-runs the init steps of live batches when this version takes over.
	RerunInit bool
	// Init steps run once per batch, in order, before any phase.
	Init   []Step
	Phases []Phase
	// Rollbacks are the named step lists a failed phase step's OnFailure names.
	Rollbacks       map[string][]Step
	OnMemberRemoved []Step
	// Source is the YAML the runbook was parsed from; the store keeps it.
	Source []byte
}

// Phase is a group of steps due an offset before the batch start time.
type Phase struct {
	Name string
	// OffsetMinutes counts minutes before the batch start time, as seed 003
	// does (7200: five days before; negative: after the start). The phase is
	// due at batch_start_time − offset_minutes.
	OffsetMinutes int
	Steps         []Step
}

// Step is one unit of work a worker runs for a member (or, in init, for a batch).
type Step struct {
	Name string
	// WorkerID is the worker pool: a Lucius service name.
	WorkerID string
	// Function is the handler (step type) the worker runs.
	Function string
	// Params are the templated parameters; nil renders as {}.
	Params *Params
	// IsPollStep: the worker may answer "still in progress"; the step is
	// polled every PollIntervalSec until it ends or PollTimeoutSec passed.
	IsPollStep      bool
	PollIntervalSec int
	PollTimeoutSec  int
	// OnFailure names a rollback (phase steps only).
	OnFailure string
	// TimeoutSeconds is the execution lease of one dispatch; 0: the default.
	TimeoutSeconds int
}

// Overdue behaviours: what a new version does with phases its predecessor
// had already run.
const (
	OverdueRerun  = "rerun"
	OverdueIgnore = "ignore"
)

// Batch statuses (batches.status).
const (
	BatchDetected       = "detected"
	BatchInitDispatched = "init_dispatched"
	BatchActive         = "active"
	BatchCompleted      = "completed"
	BatchFailed         = "failed"
)

// Batch member statuses (batch_members.status).
const (
	MemberActive  = "active"
	MemberRemoved = "removed"
)

// Phase execution statuses (phase_executions.status).
const (
	PhasePending    = "pending"
	PhaseDispatched = "dispatched"
	PhaseCompleted  = "completed"
	PhaseFailed     = "failed"
	PhaseSkipped    = "skipped"
)

// Step execution statuses (step_executions.status and init_executions.status).
const (
	StepPending     = "pending"
	StepDispatched  = "dispatched"
	StepSucceeded   = "succeeded"
	StepFailed      = "failed"
	StepPolling     = "polling"
	StepPollTimeout = "poll_timeout"
	StepRolledBack  = "rolled_back"
	StepCancelled   = "cancelled"
)

// Step execution kinds (step_executions.kind).
const (
	KindPhase    = "phase"
	KindRollback = "rollback"
	KindRemoval  = "removal"
)

// System variables every member step may use in its params; init steps may
// use only VarBatchID and VarBatchStartTime.
const (
	VarMemberKey      = "_member_key"
	VarBatchTime      = "_batch_time"
	VarBatchID        = "_batch_id"
	VarBatchStartTime = "_batch_start_time"
)

// Limits of the language.
const (
	// MaxSourceBytes bounds a runbook's YAML.
	MaxSourceBytes = 1 << 20
	// MaxDepth bounds the nesting of YAML maps and lists (a step's params
	// start at depth 6).
	MaxDepth = 32
	// MaxColumns bounds data_source.columns (PostgreSQL allows 1600 columns a table).
	MaxColumns = 1000
	// MaxVersion is the largest version (the column is a PostgreSQL int).
	MaxVersion = 1<<31 - 1
	// MaxOffsetMinutes bounds a phase offset either way (ten years).
	MaxOffsetMinutes = 10 * 365 * 24 * 60
	// MaxTimeoutSeconds bounds timeout_seconds (seven days, as for workflow tasks).
	MaxTimeoutSeconds = 7 * 24 * 3600
	// MaxPollSeconds bounds poll_interval_sec and poll_timeout_sec (90 days).
	MaxPollSeconds = 90 * 24 * 3600
)

var (
	namePattern     = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	columnPattern   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	stepNamePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)
	workerPattern   = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	// functionPattern is the workflow language's handler pattern: the
	// executor registers each function as a workflow task handler.
	functionPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)
)

// Phase returns the phase called name.
func (r *Runbook) Phase(name string) (Phase, bool) {
	for _, ph := range r.Phases {
		if ph.Name == name {
			return ph, true
		}
	}
	return Phase{}, false
}

// Step returns the step called name, wherever it is declared (init, a phase,
// a rollback or on_member_removed); step names are unique in a runbook.
func (r *Runbook) Step(name string) (Step, bool) {
	var found Step
	ok := false
	r.eachStep(func(_ string, s Step) bool {
		if s.Name == name {
			found, ok = s, true
			return false
		}
		return true
	})
	return found, ok
}

// eachStep calls fn with every step and the section holding it ("init",
// "phase <name>", "rollback <name>", "on_member_removed") until fn returns false.
func (r *Runbook) eachStep(fn func(section string, s Step) bool) {
	for _, s := range r.Init {
		if !fn("init", s) {
			return
		}
	}
	for _, ph := range r.Phases {
		for _, s := range ph.Steps {
			if !fn("phase "+ph.Name, s) {
				return
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Rollbacks)) {
		for _, s := range r.Rollbacks[name] {
			if !fn("rollback "+name, s) {
				return
			}
		}
	}
	for _, s := range r.OnMemberRemoved {
		if !fn("on_member_removed", s) {
			return
		}
	}
}
