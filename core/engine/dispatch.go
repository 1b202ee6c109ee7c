package engine

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/bus"
	"github.com/lucius-platform/lucius/core/ledger"
)

// Application properties of a directive message. Subscriptions filter on
// PropService (and PropLane in the one-topic-set topology).
const (
	PropMessageType = "MessageType"
	PropService     = "service"
	PropStepType    = "step_type"
	PropTenantID    = "tenant_id"
	PropJobID       = "job_id"
	PropStepID      = "step_id"
	PropAttemptNo   = "attempt_no"
	PropLeaseID     = "lease_id"
	PropLane        = "lane"
	PropMode        = "mode"
	PropMessageKey  = "message_key"

	MessageTypeDirective = "directive"
)

// dispatch starts a new attempt of steps[i] now.
func (e *Engine) dispatch(ctx context.Context, tx *ledger.Tx, job *ledger.Job, steps []ledger.Step, i int, now time.Time) error {
	return e.newAttempt(ctx, tx, job, steps, i, now, time.Time{}, "STEP_DISPATCHED")
}

// newAttempt creates the next attempt of steps[i] with a fresh lease and the
// job's pinned routing, and enqueues its directive, delivered at deliverAt (zero:
// at once).
func (e *Engine) newAttempt(ctx context.Context, tx *ledger.Tx, job *ledger.Job, steps []ledger.Step, i int,
	now, deliverAt time.Time, reason string) error {
	s := &steps[i]
	s.AttemptNo++
	s.LeaseID = uuid.NewString()
	s.FailureClass, s.Reason = "", ""
	setStepStatus(tx, s, ledger.StepDispatching, reason, now)
	start := now
	if deliverAt.After(now) {
		start = deliverAt
	}
	attempt := &ledger.Attempt{
		JobID: job.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo, LeaseID: s.LeaseID,
		Status: ledger.StepDispatching, Routing: job.Routing, AckDeadline: start.Add(s.AckTimeout),
	}
	if err := tx.InsertAttempt(ctx, attempt); err != nil {
		return err
	}
	tx.Append(ledger.Event{JobID: job.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo, Type: ledger.EventAttemptCreated,
		Data: map[string]any{"lease_id": s.LeaseID, "topic": attempt.Routing.Topic, "partition": attempt.Routing.Partition,
			"resolved_mode": attempt.Routing.Mode, "routing_key_used": attempt.Routing.RoutingKey,
			"decision_source": attempt.Routing.DecisionSource, "deliver_at": start.UTC().Format(time.RFC3339Nano)}})
	if err := tx.UpdateStep(ctx, s); err != nil {
		return err
	}
	job.CurrentStepID = s.StepID
	msg, err := e.directiveMessage(ctx, job, steps, i, attempt, now, deliverAt)
	if err != nil {
		return err
	}
	tx.Enqueue(msg)
	return nil
}

// directiveMessage builds the outbox message carrying an attempt's directive.
func (e *Engine) directiveMessage(ctx context.Context, job *ledger.Job, steps []ledger.Step, i int,
	a *ledger.Attempt, now, deliverAt time.Time) (ledger.OutboxMessage, error) {
	s := steps[i]
	props := map[string]string{
		PropMessageType: MessageTypeDirective,
		PropService:     s.Service,
		PropStepType:    s.Type,
		PropTenantID:    job.TenantID,
		PropJobID:       job.JobID,
		PropStepID:      s.StepID,
		PropAttemptNo:   strconv.Itoa(a.AttemptNo),
		PropLeaseID:     a.LeaseID,
		PropLane:        a.Routing.Mode,
		PropMode:        a.Routing.Mode,
		PropMessageKey:  a.Routing.RoutingKey,
	}
	otel.GetTextMapPropagator().Inject(ctx, bus.PropertiesCarrier(props))

	payload := &structpb.Struct{}
	if len(job.Payload) > 0 {
		if err := protojson.Unmarshal(job.Payload, payload); err != nil {
			return ledger.OutboxMessage{}, fmt.Errorf("job %s payload: %w", job.JobID, err)
		}
	}
	input, upstream := job.InputRef, []*luciusv1.ArtifactRef(nil)
	if i > 0 {
		prev := steps[i-1]
		for _, art := range prev.Artifacts {
			upstream = append(upstream, &luciusv1.ArtifactRef{Name: art.Name, Uri: art.URI, MediaType: art.MediaType,
				SizeBytes: art.SizeBytes, Sha256: art.SHA256})
		}
		if len(prev.Artifacts) > 0 {
			input = prev.Artifacts[0].URI
		}
	}
	d := &luciusv1.Directive{
		JobId:             job.JobID,
		TenantId:          job.TenantID,
		StepId:            s.StepID,
		ProtocolId:        job.ProtocolID,
		StepType:          s.Type,
		Service:           s.Service,
		AttemptNo:         int32(a.AttemptNo),
		LeaseId:           a.LeaseID,
		InputRef:          input,
		WorkspaceRef:      e.workspaceRef(job),
		OutputRef:         job.OutputRef,
		Payload:           payload,
		CorrelationId:     job.CorrelationID,
		Traceparent:       props["traceparent"],
		CallbackUrls:      e.callbackURLs(job.JobID, s.StepID, a.AttemptNo),
		StepIndex:         int32(s.Index),
		FinalStep:         i == len(steps)-1,
		UpstreamArtifacts: upstream,
		JobInputRef:       job.InputRef,
		Routing:           RoutingToProto(a.Routing),
		AckTimeout:        durationpb.New(s.AckTimeout),
		IssueTime:         timestamppb.New(now),
	}
	body, err := protojson.Marshal(d)
	if err != nil {
		return ledger.OutboxMessage{}, fmt.Errorf("directive %s/%s: %w", job.JobID, s.StepID, err)
	}
	return ledger.OutboxMessage{
		MessageID:     fmt.Sprintf("directive/%s/%s/%d", job.JobID, s.StepID, a.AttemptNo),
		Destination:   a.Routing.Topic,
		Kind:          ledger.KindDirective,
		JobID:         job.JobID,
		StepID:        s.StepID,
		AttemptNo:     a.AttemptNo,
		Body:          body,
		ContentType:   "application/json",
		Properties:    props,
		Key:           a.Routing.RoutingKey,
		CorrelationID: job.CorrelationID,
		Subject:       s.Type,
		ScheduledAt:   deliverAt,
	}, nil
}

// workspaceRef is the job's workspace: <root>/lucius/<tenant>/<job_id>/ (seed
// 004 §13.3). Steps write under <workspace>/<step_type>/<attempt_no>/.
func (e *Engine) workspaceRef(job *ledger.Job) string {
	return fmt.Sprintf("%s/lucius/%s/%s/", e.cfg.WorkspaceRoot, url.PathEscape(job.TenantID), job.JobID)
}

func (e *Engine) callbackURLs(jobID, stepID string, attemptNo int) *luciusv1.CallbackEndpoints {
	c := &luciusv1.CallbackEndpoints{GrpcTarget: e.cfg.Callbacks.GRPCTarget}
	if base := strings.TrimSuffix(e.cfg.Callbacks.RESTBaseURL, "/"); base != "" {
		route := fmt.Sprintf("%s/v1/jobs/%s/steps/%s/attempts/%d", base, jobID, url.PathEscape(stepID), attemptNo)
		c.AckUrl, c.ResultUrl = route+":ack", route+":result"
	}
	return c
}

// RoutingToProto converts pinned routing to its API form.
func RoutingToProto(r ledger.Routing) *luciusv1.Routing {
	return &luciusv1.Routing{
		ResolvedMode:   r.Mode,
		Partition:      int32(r.Partition),
		RoutingKeyUsed: r.RoutingKey,
		Topic:          r.Topic,
		DecisionSource: luciusv1.DecisionSource(luciusv1.DecisionSource_value["DECISION_SOURCE_"+r.DecisionSource]),
		DecisionReason: r.DecisionReason,
	}
}
