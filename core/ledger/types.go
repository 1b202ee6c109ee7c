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
)

// Outbox message kinds.
const (
	KindJobRequest = "job-request" // accepted command → orchestrator-jobs queue
	KindDirective  = "directive"   // attempt → directive topic
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
	JobID          string
	TenantID       string // normalized
	IdempotencyKey string
	RequestHash    string
	RequestType    string
	InputRef       string
	OutputRef      string
	DocID          string
	CorrelationID  string
	CallbackURL    string
	Command        json.RawMessage // protojson of the envelope
	Routing        Routing
	ReceivedAt     time.Time
}

// Job is a claimed, executing (or finished) request.
type Job struct {
	JobID             string
	TenantID          string
	RequestType       string
	ProtocolID        string
	ProtocolVersion   int
	Status            JobStatus
	Routing           Routing
	InputRef          string
	OutputRef         string
	DocID             string
	CorrelationID     string
	CallbackURL       string
	Payload           json.RawMessage
	OwnerID           string
	OwnerEpoch        int64
	OwnerHeartbeatAt  time.Time
	CurrentStepID     string
	Reason            string
	ResultRef         string
	CancelRequestedAt time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
	CompletedAt       time.Time
}

// Artifact is a reference to something a step wrote.
type Artifact struct {
	Name      string `json:"name"`
	URI       string `json:"uri"`
	MediaType string `json:"media_type,omitempty"`
	SizeBytes int64  `json:"size_bytes,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
}

// Step is one unit of a job.
type Step struct {
	JobID        string
	StepID       string
	Index        int
	Type         string
	Service      string
	Status       StepStatus
	AttemptNo    int
	LeaseID      string
	MaxAttempts  int
	AckTimeout   time.Duration
	Output       json.RawMessage // JSON object or nil
	Artifacts    []Artifact
	FailureClass string
	Reason       string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	StartedAt    time.Time
	CompletedAt  time.Time
}

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
	CompletedAt  time.Time
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
}
