package ledger

import (
	"encoding/json"
	"time"
)

// JobStatus is a job's lifecycle state (names match lucius.v1.JobStatus without prefix).
type JobStatus string

// Job states.
const (
	JobReceived    JobStatus = "RECEIVED"
	JobQueued      JobStatus = "QUEUED"
	JobDispatching JobStatus = "DISPATCHING"
	JobInProgress  JobStatus = "IN_PROGRESS"
	JobSucceeded   JobStatus = "SUCCEEDED"
	JobFailedRetry JobStatus = "FAILED_RETRY"
	JobFailedFinal JobStatus = "FAILED_FINAL"
	JobCancelling  JobStatus = "CANCELLING"
	JobCancelled   JobStatus = "CANCELLED"
)

// Terminal reports whether the state can never change again.
func (s JobStatus) Terminal() bool {
	return s == JobSucceeded || s == JobFailedFinal || s == JobCancelled
}

// StepStatus is a step's lifecycle state (names match lucius.v1.StepStatus without prefix).
type StepStatus string

// Step states.
const (
	StepPending     StepStatus = "PENDING"
	StepReady       StepStatus = "READY"
	StepDispatching StepStatus = "DISPATCHING"
	StepAwaitingAck StepStatus = "AWAITING_ACK"
	StepInProgress  StepStatus = "IN_PROGRESS"
	StepPolling     StepStatus = "POLLING"
	StepSucceeded   StepStatus = "SUCCEEDED"
	StepFailedRetry StepStatus = "FAILED_RETRY"
	StepFailedFinal StepStatus = "FAILED_FINAL"
	StepCancelled   StepStatus = "CANCELLED"
	StepSkipped     StepStatus = "SKIPPED"
	StepRolledBack  StepStatus = "ROLLED_BACK"
)

// Terminal reports whether the state can never change again.
func (s StepStatus) Terminal() bool {
	switch s {
	case StepSucceeded, StepFailedFinal, StepCancelled, StepSkipped, StepRolledBack:
		return true
	}
	return false
}

// InFlight reports whether a worker may be holding the step.
func (s StepStatus) InFlight() bool {
	return s == StepDispatching || s == StepAwaitingAck || s == StepInProgress || s == StepPolling
}

// Event types of the audit trail.
const (
	EventJobAccepted       = "JOB_ACCEPTED"
	EventJobQueued         = "JOB_QUEUED"
	EventJobCreated        = "JOB_CREATED"
	EventJobStatusChanged  = "JOB_STATUS_CHANGED"
	EventStepStatusChanged = "STEP_STATUS_CHANGED"
	EventAttemptCreated    = "ATTEMPT_CREATED"
	EventCallbackRejected  = "CALLBACK_REJECTED"
	EventCallbackDuplicate = "CALLBACK_DUPLICATE"
	EventOwnerChanged      = "OWNER_CHANGED"
	EventCancelRequested   = "CANCEL_REQUESTED"
	EventBranchTaken       = "BRANCH_TAKEN"
	EventFanOutExpanded    = "FAN_OUT_EXPANDED"
	EventStepsCancelled    = "STEPS_CANCELLED"
	EventCallbackDelivery  = "CALLBACK_DELIVERY"
	EventAckTimeout        = "ACK_TIMEOUT"
	EventLeaseExpired      = "LEASE_EXPIRED"
	EventRedispatched      = "DIRECTIVE_REENQUEUED"
	EventSLAExceeded       = "SLA_EXCEEDED"
	EventJobReplayed       = "JOB_REPLAYED"
	EventFenced            = "WRITE_FENCED"
	EventOutboxStale       = "OUTBOX_STALE"
	EventBusDeadLetter     = "BUS_DEAD_LETTER"
	EventRequestRequeued   = "JOB_REQUEST_REQUEUED"
	EventCallbackRefused   = "CALLBACK_REFUSED"
	// EventCheckpointSaved: an executing attempt saved a checkpoint of its
	// progress (data: checkpoint_name, uri, size_bytes, sha256, worker_id).
	EventCheckpointSaved = "CHECKPOINT_SAVED"
)

// Outbox message kinds.
const (
	KindJobRequest = "job-request" // accepted command → orchestrator-jobs queue
	KindDirective  = "directive"   // attempt → directive topic
	// KindCompletion is the POST of a terminal job's {job_id, status, result_ref}
	// to its callback_url; Destination holds the URL.
	KindCompletion = "completion-callback"
	// KindJobUpdate tells a job's notify topic that it ended or that a step
	// reports POLLING (the runbook executor listens).
	KindJobUpdate = "job-update"
	// KindRunbookEvent is a scheduler event on orchestrator-events (seed 003).
	KindRunbookEvent = "runbook-event"
)

// Routing is a pinned routing decision.
type Routing struct {
	Mode           string
	Partition      int
	RoutingKey     string
	Topic          string
	DecisionSource string
	DecisionReason string
}

// Request is an accepted command.
type Request struct {
	JobID string
	// RequestKey is what makes two submits the same request (derived from
	// the tenant and idempotency key, or the canonical command): a second
	// request with it repeats the first. Empty: the job id (replays and
	// runbook members, whose ids are derived).
	RequestKey     string
	TenantID       string // normalized
	IdempotencyKey string
	RequestHash    string
	RequestType    string
	// WorkflowVersion pins the version of the request type's workflow.
	WorkflowVersion int
	InputRef        string
	OutputRef       string
	DocID           string
	CorrelationID   string
	CallbackURL     string
	Command         json.RawMessage // protojson of the envelope
	Routing         Routing
	// ReplayOf names the failed job this request replays.
	ReplayOf string
	// Notify names a bus topic that gets a job-update message when the job
	// ends or a step reports POLLING (jobs of the runbook executor).
	Notify     string
	ReceivedAt time.Time
	// Asset is the asset the request names, if any (see AssetRef).
	Asset AssetRef
	// Principal names who submitted it (issuer#subject; an operator's for a
	// replay, "runbook:<table>" for a runbook row): the job's submitted_by and
	// the JOB_ACCEPTED event's principal; never a secret.
	Principal string
}

// Job is a claimed, executing (or finished) request.
type Job struct {
	JobID           string
	TenantID        string
	RequestType     string
	WorkflowID      string
	WorkflowVersion int
	Status          JobStatus
	Routing         Routing
	InputRef        string
	OutputRef       string
	DocID           string
	CorrelationID   string
	CallbackURL     string
	// Payload is the workflow inputs: the command's payload with defaults applied.
	Payload           json.RawMessage
	OwnerID           string
	OwnerEpoch        int64
	OwnerHeartbeatAt  time.Time
	CurrentStepID     string
	Reason            string
	ResultRef         string
	CancelRequestedAt time.Time
	// ReplayOf names the failed job this one replays.
	ReplayOf string
	// Notify is the request's job-update topic (see Request.Notify).
	Notify string
	// SubmittedBy is the request's Principal, and AssetID and AssetRevision
	// its asset revision (read with the job's view: GetJob, ListJobs; empty
	// on the orchestrator's locked copy).
	SubmittedBy   string
	AssetID       string
	AssetRevision int
	// Priority is the command's (0–10): the job's messages carry it.
	Priority int
	// DeadlineAt is the job's SLA: still running then, it fails with SLA_EXCEEDED.
	DeadlineAt time.Time
	// ReceivedAt is when its request was accepted (the submit); CreatedAt
	// when an orchestrator created the job, or for a job read before that
	// (GetJob, ListJobs), the submit too.
	ReceivedAt  time.Time
	CreatedAt   time.Time
	UpdatedAt   time.Time
	CompletedAt time.Time
}

// Artifact is a reference to something a step wrote.
type Artifact struct {
	Name      string `json:"name"`
	URI       string `json:"uri"`
	MediaType string `json:"media_type,omitempty"`
	SizeBytes int64  `json:"size_bytes,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
}

// Step kinds: a workflow node's type, or KindChild for a fan-out child.
const (
	KindStart       = "start"
	KindEnd         = "end"
	KindTask        = "task"
	KindConditional = "conditional"
	KindFanOut      = "fan_out"
	KindFanIn       = "fan_in"
	KindChild       = "child"
)

// Step is one workflow node of a job, or one child of a fan-out node.
type Step struct {
	JobID   string
	StepID  string
	NodeID  string
	Kind    string
	Parent  string // the fan-out step of a child
	ChildNo int    // a child's index
	Index   int    // the node's position in the definition
	// Type is the handler of a task or child, or the node type.
	Type        string
	Service     string
	Status      StepStatus
	AttemptNo   int
	LeaseID     string
	MaxAttempts int
	// RetryBase: attempts up to this one do not count against MaxAttempts
	// (the attempts of the job a replay replays, and those before a poll).
	RetryBase    int
	AckTimeout   time.Duration
	Params       json.RawMessage // the rendered params sent as the directive's payload
	Output       json.RawMessage
	Artifacts    []Artifact
	FailureClass string
	Reason       string
	// Fan-out nodes: whether children exist, and how many are in each state.
	Expanded    bool
	Children    Children
	CreatedAt   time.Time
	UpdatedAt   time.Time
	StartedAt   time.Time
	CompletedAt time.Time
}

// Children counts a fan-out's children by state.
type Children struct {
	Total, Pending, Running, Succeeded, Failed int
}

// Executable reports whether the step dispatches work to a worker.
func (s *Step) Executable() bool { return s.Kind == KindTask || s.Kind == KindChild }

// Attempt is one dispatch of a step under a lease.
type Attempt struct {
	JobID        string
	StepID       string
	AttemptNo    int
	LeaseID      string
	Status       StepStatus
	Routing      Routing
	WorkerID     string
	FailureClass string
	Reason       string
	CreatedAt    time.Time
	AckDeadline  time.Time
	AckedAt      time.Time
	// LeaseExpiresAt is when an acknowledged attempt's execution times out.
	LeaseExpiresAt  time.Time
	LastHeartbeatAt time.Time
	Progress        json.RawMessage
	CompletedAt     time.Time
}

// Dead-letter kinds.
const (
	DeadLetterStep = "step"
	DeadLetterBus  = "bus"
)

// DeadLetter is something that could not be processed.
type DeadLetter struct {
	ID          int64
	Kind        string
	JobID       string
	StepID      string
	AttemptNo   int
	Reason      string
	Description string
	Entity      string
	MessageID   string
	Body        []byte
	Properties  map[string]string
	CreatedAt   time.Time
	ReplayJobID string
}

// Event is one entry of a job's audit trail.
type Event struct {
	ID         int64
	JobID      string
	StepID     string
	AttemptNo  int
	Type       string
	FromStatus string
	ToStatus   string
	Reason     string
	Data       map[string]any
	CreatedAt  time.Time
}

// OutboxMessage is a message waiting to be published.
type OutboxMessage struct {
	ID            int64
	MessageID     string
	Destination   string
	Kind          string
	JobID         string
	StepID        string
	AttemptNo     int
	Body          []byte
	ContentType   string
	Properties    map[string]string
	Key           string
	CorrelationID string
	Subject       string
	ScheduledAt   time.Time
	CreatedAt     time.Time
	Attempts      int
	// Priority (0–10) orders the message among those waiting (see
	// bus.PriorityHeadStart), in the outbox and on the bus.
	Priority int
}
