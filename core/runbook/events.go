package runbook

// The five events the scheduler emits on orchestrator-events (seed 003):
// each message's MessageType application property and its body's
// messageType.
const (
	EventBatchInit     = "batch-init"
	EventPhaseDue      = "phase-due"
	EventMemberAdded   = "member-added"
	EventMemberRemoved = "member-removed"
	EventPollCheck     = "poll-check"
)

// The bodies, field for field as in seed 003 (names and order): the
// scheduler writes them, the runbook executor reads them as an Event.

// BatchInitEvent is batch-init: a batch was detected and its init steps are due.
type BatchInitEvent struct {
	MessageType    string `json:"messageType"`
	RunbookName    string `json:"runbookName"`
	RunbookVersion int    `json:"runbookVersion"`
	BatchID        int64  `json:"batchId"`
	BatchStartTime string `json:"batchStartTime"`
	MemberCount    int    `json:"memberCount"`
}

// PhaseDueEvent is phase-due: a phase of a batch is due for its members.
type PhaseDueEvent struct {
	MessageType      string  `json:"messageType"`
	RunbookName      string  `json:"runbookName"`
	RunbookVersion   int     `json:"runbookVersion"`
	BatchID          int64   `json:"batchId"`
	PhaseExecutionID int64   `json:"phaseExecutionId"`
	PhaseName        string  `json:"phaseName"`
	OffsetMinutes    int     `json:"offsetMinutes"`
	DueAt            string  `json:"dueAt"`
	MemberIDs        []int64 `json:"memberIds"` // batch_members ids, ascending; never null
}

// MemberEvent is member-added and member-removed.
type MemberEvent struct {
	MessageType    string `json:"messageType"`
	RunbookName    string `json:"runbookName"`
	RunbookVersion int    `json:"runbookVersion"`
	BatchID        int64  `json:"batchId"`
	BatchMemberID  int64  `json:"batchMemberId"`
	MemberKey      string `json:"memberKey"`
}

// PollCheckEvent names a step execution (stepExecutionId, as in the seed) or,
// for an init step, an init execution (initExecutionId instead; the seed
// names only step executions).
type PollCheckEvent struct {
	MessageType     string `json:"messageType"`
	RunbookName     string `json:"runbookName"`
	RunbookVersion  int    `json:"runbookVersion"`
	BatchID         int64  `json:"batchId"`
	StepExecutionID *int64 `json:"stepExecutionId,omitempty"`
	InitExecutionID *int64 `json:"initExecutionId,omitempty"`
	StepName        string `json:"stepName"`
	PollCount       int    `json:"pollCount"`
}

// Event is any of the five as a consumer reads it: the fields of every type,
// zero where a type has none.
type Event struct {
	MessageType      string `json:"messageType"`
	RunbookName      string `json:"runbookName"`
	RunbookVersion   int    `json:"runbookVersion"`
	BatchID          int64  `json:"batchId"`
	PhaseExecutionID int64  `json:"phaseExecutionId"`
	BatchMemberID    int64  `json:"batchMemberId"`
	MemberKey        string `json:"memberKey"`
	StepExecutionID  int64  `json:"stepExecutionId"`
	InitExecutionID  int64  `json:"initExecutionId"`
	StepName         string `json:"stepName"`
	PollCount        int    `json:"pollCount"`
}
