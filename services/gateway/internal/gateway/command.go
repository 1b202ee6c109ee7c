package gateway

import (
	"context"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/server"
	"github.com/lucius-platform/lucius/core/telemetry"
	"github.com/lucius-platform/lucius/core/workflow"
)

// commandService implements lucius.v1.CommandService.
type commandService struct {
	luciusv1.UnimplementedCommandServiceServer
	store     *ledger.Store
	workflows *registry.Registry
	policy    Policy
	log       *slog.Logger
	submits   metric.Int64Counter
}

var _ luciusv1.CommandServiceServer = (*commandService)(nil)

func newCommandService(store *ledger.Store, workflows *registry.Registry, policy Policy, log *slog.Logger) (*commandService, error) {
	submits, err := otel.Meter("lucius/gateway").Int64Counter("lucius_gateway_submits_total",
		metric.WithDescription("Commands submitted, by outcome (accepted, duplicate, invalid, conflict) and request type."))
	if err != nil {
		return nil, err
	}
	return &commandService{store: store, workflows: workflows, policy: policy, log: log, submits: submits}, nil
}

// Submit validates the envelope, derives the job id and stores the request with
// its orchestrator-jobs message in one transaction.
func (s *commandService) Submit(ctx context.Context, req *luciusv1.SubmitRequest) (*luciusv1.SubmitResponse, error) {
	cmd := req.GetCommand()
	a, violations, err := admit(cmd, registryWorkflows{ctx, s.workflows}, s.policy)
	if err != nil {
		s.log.ErrorContext(ctx, "look up workflow", telemetry.Err(err))
		return nil, server.Error(codes.Unavailable, server.ReasonUnavailable, "the workflow registry is unavailable; retry").Err()
	}
	if violations != nil {
		s.count(ctx, "invalid", cmd.GetRequestType())
		return nil, server.InvalidArgument(violations...).Err()
	}
	log := s.log.With(telemetry.JobID(a.jobID), telemetry.TenantID(a.tenant), slog.String(telemetry.KeyRequestType, cmd.GetRequestType()),
		slog.String(telemetry.KeyCorrelationID, cmd.GetCorrelationId()))
	pinned := ledger.Routing{Mode: string(a.route.Mode), Partition: a.route.Partition, RoutingKey: a.route.RoutingKey,
		Topic: a.route.Topic, DecisionSource: string(a.route.Source), DecisionReason: a.route.Reason}
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(cmd)
	log.DebugContext(ctx, "workflow pinned", "workflow", a.workflow.Key())
	if err != nil {
		return nil, server.Error(codes.Internal, server.ReasonInternal, "encode command").Err()
	}
	request := ledger.Request{
		JobID: a.jobID, TenantID: a.tenant, IdempotencyKey: cmd.GetIdempotencyKey(), RequestHash: a.hash,
		RequestType: cmd.GetRequestType(), WorkflowVersion: a.workflow.Version, InputRef: cmd.GetInputRef(), OutputRef: cmd.GetOutputRef(),
		DocID: cmd.GetDocId(), CorrelationID: cmd.GetCorrelationId(), CallbackURL: cmd.GetCallbackUrl(),
		Command: raw, Routing: pinned,
	}
	msg, err := engine.QueuedJobMessage(ctx, request, cmd)
	if err != nil {
		return nil, server.Error(codes.Internal, server.ReasonInternal, "encode queued job").Err()
	}
	res, err := s.store.Accept(ctx, request, msg)
	switch {
	case errors.Is(err, ledger.ErrIdempotencyConflict):
		s.count(ctx, "conflict", cmd.GetRequestType())
		log.InfoContext(ctx, "idempotency key reused for a different command")
		return nil, server.Error(codes.AlreadyExists, server.ReasonIdempotencyKeyReused,
			"idempotency_key was already used by this tenant for a different command; use a new key",
			"job_id", a.jobID).Err()
	case err != nil:
		log.ErrorContext(ctx, "accept command", telemetry.Err(err))
		return nil, server.Error(codes.Unavailable, server.ReasonUnavailable, "the command could not be stored; retry").Err()
	}
	outcome := "accepted"
	if !res.Created {
		outcome = "duplicate"
	}
	s.count(ctx, outcome, cmd.GetRequestType())
	log.InfoContext(ctx, "command "+outcome, "mode", a.route.Mode, "partition", a.route.Partition)
	return &luciusv1.SubmitResponse{JobId: a.jobID, Status: jobStatusToProto(res.Job.Status), Duplicate: !res.Created,
		AcceptTime: timestamppb.New(res.ReceivedAt)}, nil
}

func (s *commandService) count(ctx context.Context, outcome, requestType string) {
	s.submits.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome), attribute.String("request_type", requestType)))
}

// registryWorkflows answers admission's lookups from the registry.
type registryWorkflows struct {
	ctx context.Context
	reg *registry.Registry
}

func (w registryWorkflows) Latest(requestType string) (*workflow.Definition, error) {
	return w.reg.Get(w.ctx, requestType, 0)
}

func (w registryWorkflows) Known() []string {
	defs, err := w.reg.Store().ListDefinitions(w.ctx, "", 50)
	if err != nil {
		return nil
	}
	ids := make([]string, len(defs))
	for i, d := range defs {
		ids[i] = d.WorkflowID
	}
	return ids
}
