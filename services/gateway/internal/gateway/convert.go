package gateway

import (
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

func jobStatusToProto(s ledger.JobStatus) luciusv1.JobStatus {
	return luciusv1.JobStatus(luciusv1.JobStatus_value["JOB_STATUS_"+string(s)])
}

func jobStatusFromProto(s luciusv1.JobStatus) ledger.JobStatus {
	return ledger.JobStatus(s.String()[len("JOB_STATUS_"):])
}

func stepStatusToProto(s ledger.StepStatus) luciusv1.StepStatus {
	return luciusv1.StepStatus(luciusv1.StepStatus_value["STEP_STATUS_"+string(s)])
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func structOf(raw []byte) *structpb.Struct {
	if len(raw) == 0 {
		return nil
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, s); err != nil {
		return nil
	}
	return s
}

func jobToProto(j *ledger.Job) *luciusv1.Job {
	return &luciusv1.Job{
		JobId: j.JobID, TenantId: j.TenantID, RequestType: j.RequestType, WorkflowId: j.WorkflowID,
		WorkflowVersion: int32(j.WorkflowVersion),
		Status:          jobStatusToProto(j.Status), Routing: engine.RoutingToProto(j.Routing),
		InputRef: j.InputRef, OutputRef: j.OutputRef, DocId: j.DocID, CorrelationId: j.CorrelationID,
		CallbackUrl: j.CallbackURL, Payload: structOf(j.Payload), OwnerId: j.OwnerID, OwnerEpoch: j.OwnerEpoch,
		CurrentStepId: j.CurrentStepID, Reason: j.Reason, ResultRef: j.ResultRef,
		CreateTime: ts(j.CreatedAt), UpdateTime: ts(j.UpdatedAt), CompleteTime: ts(j.CompletedAt), CancelTime: ts(j.CancelRequestedAt),
		ReplayOf: j.ReplayOf, DeadlineTime: ts(j.DeadlineAt), SubmittedBy: j.SubmittedBy,
		AssetId: j.AssetID, AssetRevision: int32(j.AssetRevision), Priority: int32(j.Priority),
	}
}

func stepToProto(s ledger.StepWithAttempts) *luciusv1.Step {
	out := &luciusv1.Step{
		JobId: s.JobID, StepId: s.StepID, StepIndex: int32(s.Index), StepType: s.Type, Service: s.Service,
		Status: stepStatusToProto(s.Status), AttemptNo: int32(s.AttemptNo), MaxAttempts: int32(s.MaxAttempts),
		Output: structOf(s.Output), FailureClass: s.FailureClass, Reason: s.Reason,
		CreateTime: ts(s.CreatedAt), UpdateTime: ts(s.UpdatedAt), CompleteTime: ts(s.CompletedAt),
		NodeId: s.NodeID, Kind: s.Kind, ParentStepId: s.Parent, ChildIndex: int32(s.ChildNo), Params: structOf(s.Params),
	}
	if s.Kind == ledger.KindFanOut {
		c := s.Children
		out.Children = &luciusv1.ChildCounts{Total: int32(c.Total), Pending: int32(c.Pending), Running: int32(c.Running),
			Succeeded: int32(c.Succeeded), Failed: int32(c.Failed)}
	}
	for _, a := range s.Artifacts {
		out.Artifacts = append(out.Artifacts, &luciusv1.ArtifactRef{Name: a.Name, Uri: a.URI, MediaType: a.MediaType,
			SizeBytes: a.SizeBytes, Sha256: a.SHA256})
	}
	for _, a := range s.Attempts {
		out.Attempts = append(out.Attempts, &luciusv1.Attempt{
			AttemptNo: int32(a.AttemptNo), LeaseId: a.LeaseID, Status: stepStatusToProto(a.Status),
			Routing: engine.RoutingToProto(a.Routing), WorkerId: a.WorkerID, FailureClass: a.FailureClass, Reason: a.Reason,
			CreateTime: ts(a.CreatedAt), AckTime: ts(a.AckedAt), CompleteTime: ts(a.CompletedAt),
			AckDeadline: ts(a.AckDeadline), LeaseExpireTime: ts(a.LeaseExpiresAt), Progress: structOf(a.Progress),
		})
	}
	return out
}

func eventToProto(e ledger.Event) *luciusv1.JobEvent {
	out := &luciusv1.JobEvent{EventId: e.ID, JobId: e.JobID, StepId: e.StepID, AttemptNo: int32(e.AttemptNo), Type: e.Type,
		FromStatus: e.FromStatus, ToStatus: e.ToStatus, Reason: e.Reason, CreateTime: ts(e.CreatedAt)}
	if e.Data != nil {
		if s, err := structpb.NewStruct(e.Data); err == nil {
			out.Data = s
		}
	}
	return out
}

func deadLetterToProto(d ledger.DeadLetter) *luciusv1.DeadLetter {
	kind := luciusv1.DeadLetterKind_DEAD_LETTER_KIND_STEP
	if d.Kind == ledger.DeadLetterBus {
		kind = luciusv1.DeadLetterKind_DEAD_LETTER_KIND_BUS
	}
	return &luciusv1.DeadLetter{
		DeadLetterId: d.ID, Kind: kind, JobId: d.JobID, StepId: d.StepID, AttemptNo: int32(d.AttemptNo),
		Reason: d.Reason, Description: d.Description, Entity: d.Entity, MessageId: d.MessageID, Body: string(d.Body),
		Properties: d.Properties, CreateTime: ts(d.CreatedAt), ReplayJobId: d.ReplayJobID,
	}
}
