package engine

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

// MessageTypeJobRequest is the MessageType of orchestrator-jobs messages.
const MessageTypeJobRequest = "job-request"

// MaxInlineMessageBytes is the largest body the engine puts on the bus
// whole. Azure Service Bus Standard carries 256 KB a message, application
// properties and headers included; the rest is their room. A larger
// directive travels detached (Directive.detached; the worker fetches it with
// CallbackService.GetDirective), a larger orchestrator-jobs message without
// its command (the orchestrator reads the request's command in the ledger).
const MaxInlineMessageBytes = 192 << 10

// QueuedJobMessage builds the orchestrator-jobs message of an accepted request
// (its outbox row), carrying ctx's trace context.
func QueuedJobMessage(ctx context.Context, req ledger.Request, cmd *luciusv1.Command) (ledger.OutboxMessage, error) {
	q := &luciusv1.QueuedJob{JobId: req.JobID, Command: cmd, Routing: RoutingToProto(req.Routing),
		AcceptTime: timestamppb.Now(), ReplayOf: req.ReplayOf}
	body, err := protojson.Marshal(q)
	if err != nil {
		return ledger.OutboxMessage{}, err
	}
	if len(body) > MaxInlineMessageBytes {
		q.Command = nil // CreateJob reads it from the request row
		if body, err = protojson.Marshal(q); err != nil {
			return ledger.OutboxMessage{}, err
		}
	}
	props := map[string]string{PropMessageType: MessageTypeJobRequest, PropTenantID: req.TenantID, PropJobID: req.JobID}
	otel.GetTextMapPropagator().Inject(ctx, bus.PropertiesCarrier(props))
	return ledger.OutboxMessage{
		MessageID: "job-request/" + req.JobID, Destination: topology.QueueOrchestratorJobs, Kind: ledger.KindJobRequest,
		JobID: req.JobID, Body: body, ContentType: "application/json", Properties: props, Key: req.Routing.RoutingKey,
		CorrelationID: req.CorrelationID, Subject: req.RequestType, Priority: int(cmd.GetPriority()),
	}, nil
}

// storedCommand decodes the command a request was accepted with.
func storedCommand(req *ledger.Request) (*luciusv1.Command, error) {
	cmd := &luciusv1.Command{}
	if err := protojson.Unmarshal(req.Command, cmd); err != nil {
		return nil, fmt.Errorf("request %s: stored command: %w", req.JobID, err)
	}
	return cmd, nil
}
