package engine

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
)

// MessageTypeJobUpdate is the MessageType of job-update messages.
const MessageTypeJobUpdate = "job-update"

// JobUpdate is the body of a job-update message, sent to a job's notify
// topic when the job ends and when one of its steps reports POLLING.
type JobUpdate struct {
	MessageType   string `json:"messageType"`
	JobID         string `json:"jobId"`
	CorrelationID string `json:"correlationId,omitempty"`
	// Status is the job's status; terminal unless StepStatus is POLLING.
	Status     string `json:"status"`
	StepID     string `json:"stepId,omitempty"`
	StepStatus string `json:"stepStatus,omitempty"`
	AttemptNo  int    `json:"attemptNo,omitempty"`
	// Output is the step's output (the last task's, for an ended job).
	Output json.RawMessage `json:"output,omitempty"`
	Reason string          `json:"reason,omitempty"`
	At     time.Time       `json:"at"`
}

// jobUpdate builds the job-update message of a job (step may be nil).
func jobUpdate(job *ledger.Job, step *ledger.Step, now time.Time) (ledger.OutboxMessage, error) {
	u := JobUpdate{MessageType: MessageTypeJobUpdate, JobID: job.JobID, CorrelationID: job.CorrelationID,
		Status: string(job.Status), Reason: job.Reason, At: now.UTC()}
	id := fmt.Sprintf("job-update/%s/%s", job.JobID, job.Status)
	if step != nil {
		u.StepID, u.StepStatus, u.AttemptNo, u.Output = step.StepID, string(step.Status), step.AttemptNo, step.Output
		if step.Status == ledger.StepPolling {
			id = fmt.Sprintf("job-update/%s/%s/%d/POLLING", job.JobID, step.StepID, step.AttemptNo)
			u.Reason = step.Reason
		}
	}
	body, err := json.Marshal(u)
	if err != nil {
		return ledger.OutboxMessage{}, err
	}
	return ledger.OutboxMessage{MessageID: id, Destination: job.Notify, Kind: ledger.KindJobUpdate, JobID: job.JobID,
		Body: body, ContentType: "application/json", CorrelationID: job.CorrelationID,
		Properties: map[string]string{PropMessageType: MessageTypeJobUpdate, PropJobID: job.JobID}}, nil
}

// lastTask is the task step whose output an ended job reports: the one that
// ran last (a single-task job's only step).
func lastTask(nodes map[string]*ledger.Step) *ledger.Step {
	var last *ledger.Step
	for _, s := range nodes {
		if s.Kind != ledger.KindTask || s.AttemptNo == 0 {
			continue
		}
		if last == nil || s.CompletedAt.After(last.CompletedAt) || (s.CompletedAt.Equal(last.CompletedAt) && s.Index > last.Index) {
			last = s
		}
	}
	return last
}
