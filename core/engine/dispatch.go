package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

// Application properties of a directive message. Subscriptions filter on
// PropService (and PropLane in the one-topic-set topology).
const (
	PropMessageType = topology.PropertyMessageType
	PropService     = topology.PropertyService
	PropStepType    = "step_type"
	PropTenantID    = "tenant_id"
	PropJobID       = "job_id"
	PropStepID      = "step_id"
	PropAttemptNo   = "attempt_no"
	PropLeaseID     = "lease_id"
	PropLane        = topology.PropertyLane
	PropMode        = "mode"
	PropMessageKey  = "message_key"

	MessageTypeDirective = "directive"
)

// newAttempt creates the next attempt of step s with a fresh lease and the
// job's pinned routing, and enqueues its directive, delivered at deliverAt
// (zero: at once). A delayed attempt (a retry after backoff) leaves the step
// FAILED_RETRY, waiting, until a worker acknowledges it: cancelling the job
// meanwhile cancels the step at once.
func (r *run) newAttempt(ctx context.Context, s *ledger.Step, deliverAt time.Time, reason string) error {
	if kind, why, held := r.holdFor(s); held {
		return r.hold(ctx, s, kind, why)
	}
	s.AttemptNo++
	s.LeaseID = uuid.NewString()
	status, start := ledger.StepDispatching, r.now
	if deliverAt.After(r.now) {
		status, start = ledger.StepFailedRetry, deliverAt
		if r.job.Status == ledger.JobInProgress || r.job.Status == ledger.JobDispatching {
			setJobStatus(r.tx, r.job, ledger.JobFailedRetry, "STEP_WAITING_FOR_RETRY", r.now)
		}
	} else {
		s.FailureClass, s.Reason = "", ""
	}
	setStepStatus(r.tx, s, status, reason, r.now)
	attempt := &ledger.Attempt{
		JobID: r.job.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo, LeaseID: s.LeaseID,
		Status: status, Routing: r.job.Routing, AckDeadline: start.Add(s.AckTimeout),
	}
	if err := r.tx.InsertAttempt(ctx, attempt); err != nil {
		return err
	}
	r.tx.Append(ledger.Event{JobID: r.job.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo, Type: ledger.EventAttemptCreated,
		Data: map[string]any{"lease_id": s.LeaseID, "topic": attempt.Routing.Topic, "partition": attempt.Routing.Partition,
			"resolved_mode": attempt.Routing.Mode, "routing_key_used": attempt.Routing.RoutingKey,
			"decision_source": attempt.Routing.DecisionSource, "deliver_at": start.UTC().Format(time.RFC3339Nano)}})
	if err := r.tx.UpdateStep(ctx, s); err != nil {
		return err
	}
	r.job.CurrentStepID = s.StepID
	if r.job.Status == ledger.JobQueued {
		setJobStatus(r.tx, r.job, ledger.JobDispatching, "FIRST_STEP_DISPATCHED", r.now)
	}
	msg, err := r.directiveMessage(ctx, s, attempt, deliverAt)
	if err != nil {
		return err
	}
	r.tx.Enqueue(msg)
	return nil
}

// directiveMessage builds the outbox message carrying an attempt's directive.
func (r *run) directiveMessage(ctx context.Context, s *ledger.Step, a *ledger.Attempt, deliverAt time.Time) (ledger.OutboxMessage, error) {
	job := r.job
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
	if len(s.Params) > 0 {
		if err := protojson.Unmarshal(s.Params, payload); err != nil {
			return ledger.OutboxMessage{}, fmt.Errorf("step %s params: %w", s.StepID, err)
		}
	}
	node, _ := r.def.Node(s.NodeID)
	upstream, err := r.upstream(ctx, node)
	if err != nil {
		return ledger.OutboxMessage{}, err
	}
	input := job.InputRef
	var refs []*luciusv1.ArtifactRef
	for _, art := range upstream {
		refs = append(refs, &luciusv1.ArtifactRef{Name: art.Name, Uri: art.URI, MediaType: art.MediaType,
			SizeBytes: art.SizeBytes, Sha256: art.SHA256})
	}
	if len(upstream) > 0 {
		input = upstream[0].URI
	}
	d := &luciusv1.Directive{
		JobId:             job.JobID,
		TenantId:          job.TenantID,
		StepId:            s.StepID,
		ProtocolId:        job.WorkflowID,
		StepType:          s.Type,
		Service:           s.Service,
		AttemptNo:         int32(a.AttemptNo),
		LeaseId:           a.LeaseID,
		InputRef:          input,
		WorkspaceRef:      r.e.workspaceRef(job),
		OutputRef:         job.OutputRef,
		Payload:           payload,
		CorrelationId:     job.CorrelationID,
		Traceparent:       props["traceparent"],
		CallbackUrls:      r.e.callbackURLs(job.JobID, s.StepID, a.AttemptNo),
		StepIndex:         int32(s.Index),
		FinalStep:         s.Kind == ledger.KindTask && final(r.def, node),
		UpstreamArtifacts: refs,
		JobInputRef:       job.InputRef,
		Routing:           RoutingToProto(a.Routing),
		AckTimeout:        durationpb.New(s.AckTimeout),
		IssueTime:         timestamppb.New(r.now),
		WorkflowVersion:   int32(job.WorkflowVersion),
	}
	leaseEnd := r.now.Add(s.AckTimeout)
	if deliverAt.After(r.now) {
		leaseEnd = deliverAt.Add(s.AckTimeout)
	}
	if node.Task != nil {
		d.LeaseTimeout = durationpb.New(node.Task.Timeout)
		leaseEnd = leaseEnd.Add(node.Task.Timeout)
	}
	if d.CallbackToken, err = r.e.callbackToken(job, s, a.AttemptNo, a.LeaseID, r.now, leaseEnd); err != nil {
		return ledger.OutboxMessage{}, fmt.Errorf("directive %s/%s: callback token: %w", job.JobID, s.StepID, err)
	}
	body, err := protojson.Marshal(d)
	if err != nil {
		return ledger.OutboxMessage{}, fmt.Errorf("directive %s/%s: %w", job.JobID, s.StepID, err)
	}
	if len(body) > MaxInlineMessageBytes {
		if body, err = r.detach(ctx, d, body); err != nil {
			return ledger.OutboxMessage{}, err
		}
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
		Priority:      job.Priority,
	}, nil
}

// detach keeps a directive too large for a bus message in the ledger (with
// its attempt) and returns the body of the message that carries it
// detached: everything but payload and upstream artifacts, which the worker
// fetches with CallbackService.GetDirective.
func (r *run) detach(ctx context.Context, d *luciusv1.Directive, whole []byte) ([]byte, error) {
	if err := r.tx.DetachDirective(ctx, d.GetJobId(), d.GetStepId(), int(d.GetAttemptNo()), whole); err != nil {
		return nil, err
	}
	stub := proto.CloneOf(d)
	stub.Payload, stub.UpstreamArtifacts, stub.Detached = nil, nil, true
	body, err := protojson.Marshal(stub)
	if err != nil {
		return nil, fmt.Errorf("directive %s/%s: %w", d.GetJobId(), d.GetStepId(), err)
	}
	r.e.log.DebugContext(ctx, "directive detached: too large for a bus message", telemetry.JobID(d.GetJobId()),
		telemetry.StepID(d.GetStepId()), telemetry.AttemptNo(int(d.GetAttemptNo())), "bytes", len(whole))
	return body, nil
}

// upstream collects the artifacts of the work a node builds on: the nearest
// tasks and fan-outs before it that succeeded (through start, conditional and
// fan_in nodes), in declaration order; a fan-out contributes its children's
// artifacts in index order.
func (r *run) upstream(ctx context.Context, node *workflow.Node) ([]ledger.Artifact, error) {
	var out []ledger.Artifact
	seen := map[string]bool{}
	var walk func(n *workflow.Node) error
	walk = func(n *workflow.Node) error {
		for _, p := range r.def.Preds(n.ID) {
			if seen[p.ID] {
				continue
			}
			seen[p.ID] = true
			ps := r.nodes[p.ID]
			if ps == nil || ps.Status != ledger.StepSucceeded {
				continue // not run, or on a branch not taken
			}
			switch p.Type {
			case workflow.TypeTask:
				out = append(out, ps.Artifacts...)
			case workflow.TypeFanOut:
				results, err := r.childResults(ctx, ps)
				if err != nil {
					return err
				}
				for _, res := range results {
					out = append(out, res.Artifacts...)
				}
			default:
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(node)
}

// final reports whether a task leads only to end nodes: its result is the
// job's, and the worker writes it to output_ref.
func final(d *workflow.Definition, n *workflow.Node) bool {
	if len(n.Next) == 0 {
		return false
	}
	for _, id := range n.Next {
		if next, ok := d.Node(id); !ok || next.Type != workflow.TypeEnd {
			return false
		}
	}
	return true
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

// completionMessage is the outbox message POSTing a terminal job's outcome to
// its callback_url (seed 001 §13.2).
func completionMessage(job *ledger.Job, now time.Time) (ledger.OutboxMessage, error) {
	// result_url is the field seed 001 §13.2 names; result_ref is its
	// deprecated alias, kept for receivers written against it.
	body, err := json.Marshal(map[string]any{
		"job_id": job.JobID, "status": string(job.Status), "result_url": job.ResultRef, "result_ref": job.ResultRef,
		"reason": job.Reason, "correlation_id": job.CorrelationID, "completed_at": now.UTC().Format(time.RFC3339Nano),
	})
	if err != nil {
		return ledger.OutboxMessage{}, err
	}
	// The deliverer signs with the tenant's webhook secrets at delivery.
	return ledger.OutboxMessage{MessageID: "completion/" + job.JobID, Destination: job.CallbackURL,
		Kind: ledger.KindCompletion, JobID: job.JobID, Body: body, ContentType: "application/json",
		CorrelationID: job.CorrelationID, Properties: map[string]string{"tenant_id": job.TenantID}}, nil
}
