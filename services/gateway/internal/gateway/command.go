package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/workflow"
)

// commandService implements lucius.v1.CommandService.
type commandService struct {
	luciusv1.UnimplementedCommandServiceServer
	store     *ledger.Store
	workflows *registry.Registry
	config    *config.Watcher
	policy    Policy
	gate      *gate
	rates     *rateLimits
	log       *slog.Logger
	submits   metric.Int64Counter
}

var _ luciusv1.CommandServiceServer = (*commandService)(nil)

func newCommandService(store *ledger.Store, workflows *registry.Registry, cfg *config.Watcher, policy Policy,
	log *slog.Logger) (*commandService, error) {
	policy.Payload.defaults()
	submits, err := otel.Meter("lucius/gateway").Int64Counter("lucius_gateway_submits_total",
		metric.WithDescription("Commands submitted, by outcome (accepted, duplicate, invalid, conflict, limited, rate_limited) and request type."))
	if err != nil {
		return nil, err
	}
	return &commandService{store: store, workflows: workflows, config: cfg, policy: policy, gate: newGate(100 * time.Millisecond),
		rates: newRateLimits(cfg.Current, policy.MaxKeyLimiters),
		log:   log, submits: submits}, nil
}

// Submit checks the caller holds the tenant, applies the tenant's request
// rates, bounds the payload, validates the envelope, derives the request key
// (what makes a repeat the same request), mints the job id and stores the request with its orchestrator-jobs message in one transaction,
// unless an admission limit refuses it (429).
func (s *commandService) Submit(ctx context.Context, req *luciusv1.SubmitRequest) (*luciusv1.SubmitResponse, error) {
	cmd := req.GetCommand()
	// The tenant comes from the token: a partner submits only for its own.
	if err := auth.RequireTenant(ctx, cmd.GetTenantId()); err != nil {
		s.count(ctx, "forbidden", cmd.GetRequestType())
		s.log.WarnContext(ctx, "call denied", "principal", principalName(ctx), "method", luciusv1.CommandService_Submit_FullMethodName,
			"reason", server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_NOT_HELD), "tenant_id", auth.NormalizeTenant(cmd.GetTenantId()))
		return nil, err
	}
	// Rates next: a tenant over its rate costs no validation or database work.
	if st := s.rates.allowSubmit(cmd); st != nil {
		s.count(ctx, "rate_limited", cmd.GetRequestType())
		return nil, st.Err()
	}
	if vs := checkPayload(cmd.GetPayload(), s.policy.Payload); vs != nil {
		s.count(ctx, "invalid", cmd.GetRequestType())
		return nil, server.InvalidArgument(vs...).Err()
	}
	a, violations, err := admit(cmd, registryWorkflows{ctx, s.workflows}, s.config.Current(), s.policy)
	if err != nil {
		s.log.ErrorContext(ctx, "look up workflow", telemetry.Err(err))
		return nil, server.Error(codes.Unavailable, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE, "the workflow registry is unavailable; retry").Err()
	}
	if violations != nil {
		s.count(ctx, "invalid", cmd.GetRequestType())
		return nil, server.InvalidArgument(violations...).Err()
	}
	if p, paused := s.config.Current().Paused(a.tenant, string(a.route.Mode), a.workflow.ID); paused && p.RefuseSubmits {
		s.count(ctx, "paused", cmd.GetRequestType())
		return nil, server.Error(codes.Unavailable, luciusv1.ErrorReason_ERROR_REASON_WORK_PAUSED,
			p.Label()+" is paused by an operator and takes no new commands; retry after it resumes",
			"scope", p.Scope, "key", p.Key).Err()
	}
	away, probe := s.gate.enter(a.tenant, a.limits.Tenant)
	if away != nil {
		// Refused at its limit a moment ago: refuse again without writing or
		// encoding anything, unless this repeats an accepted command
		// (answered as a duplicate).
		exists, err := away.lookup(ctx, func(ctx context.Context) (bool, error) { return s.store.RequestExists(ctx, a.requestKey) })
		if err != nil || !exists {
			s.count(ctx, "limited", cmd.GetRequestType())
			loop.Sleep(ctx, refusalPace(a.retryAfter))
			return nil, limitError(away.limit, a.retryAfter).Err()
		}
	}
	res, err := s.accept(ctx, a, cmd, ledger.NewJobID(time.Now()))
	log := s.log.With(telemetry.JobID(res.JobID), telemetry.TenantID(a.tenant), slog.String(telemetry.KeyRequestType, cmd.GetRequestType()),
		slog.String(telemetry.KeyCorrelationID, cmd.GetCorrelationId()))
	var limit *ledger.LimitError
	errors.As(err, &limit)
	if away == nil {
		s.gate.done(a.tenant, probe, limit, res.Created)
	}
	switch {
	case limit != nil:
		s.count(ctx, "limited", cmd.GetRequestType())
		log.InfoContext(ctx, "command refused: admission limit", "scope", limit.Scope, "limit", limit.Limit)
		return nil, limitError(limit, a.retryAfter).Err()
	case errors.Is(err, ledger.ErrIdempotencyConflict):
		s.count(ctx, "conflict", cmd.GetRequestType())
		log.InfoContext(ctx, "idempotency key reused for a different command")
		return nil, server.Error(codes.AlreadyExists, luciusv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_REUSED,
			"idempotency_key was already used by this tenant for a different command; use a new key",
			"job_id", res.JobID).Err()
	case errors.Is(err, ledger.ErrAssetDeleted):
		s.count(ctx, "asset_deleted", cmd.GetRequestType())
		log.InfoContext(ctx, "command refused: its asset is deleted", "asset_id", a.asset.AssetID)
		return nil, server.Error(codes.FailedPrecondition, luciusv1.ErrorReason_ERROR_REASON_ASSET_DELETED,
			"the asset these platform_id and platform_refs name was deleted; it takes no new revisions",
			"asset_id", a.asset.AssetID).Err()
	case errors.Is(err, errEncode):
		log.ErrorContext(ctx, "encode command", telemetry.Err(err))
		return nil, server.Error(codes.Internal, luciusv1.ErrorReason_ERROR_REASON_INTERNAL, "encode command").Err()
	case err != nil:
		log.ErrorContext(ctx, "accept command", telemetry.Err(err))
		return nil, server.Error(codes.Unavailable, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE, "the command could not be stored; retry").Err()
	}
	outcome := "accepted"
	if !res.Created {
		outcome = "duplicate"
	}
	s.count(ctx, outcome, cmd.GetRequestType())
	log.InfoContext(ctx, "command "+outcome, "mode", a.route.Mode, "partition", a.route.Partition, "workflow", a.workflow.Key())
	return &luciusv1.SubmitResponse{JobId: res.JobID, Status: jobStatusToProto(res.Status), Duplicate: !res.Created,
		AcceptTime: timestamppb.New(res.ReceivedAt), AssetId: a.asset.AssetID, AssetRevision: int32(res.AssetRevision)}, nil
}

// errEncode marks a command that could not be encoded for storage.
var errEncode = errors.New("encode")

// accept stores an admitted command under a new job id: the request with
// its pinned routing and the orchestrator-jobs message, under the admission
// limits. Accepted.JobID is the new id, or the earlier request's this repeats.
func (s *commandService) accept(ctx context.Context, a *admitted, cmd *luciusv1.Command, jobID string) (ledger.Accepted, error) {
	cmd.SubmittedBy = principalName(ctx) // never the caller's claim
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(cmd)
	if err != nil {
		return ledger.Accepted{JobID: jobID}, fmt.Errorf("%w command: %w", errEncode, err)
	}
	request := ledger.Request{
		JobID: jobID, RequestKey: a.requestKey, TenantID: a.tenant, IdempotencyKey: cmd.GetIdempotencyKey(), RequestHash: a.hash,
		RequestType: cmd.GetRequestType(), WorkflowVersion: a.workflow.Version, InputRef: cmd.GetInputRef(), OutputRef: cmd.GetOutputRef(),
		DocID: cmd.GetDocId(), CorrelationID: cmd.GetCorrelationId(), CallbackURL: cmd.GetCallbackUrl(), Principal: cmd.GetSubmittedBy(),
		Command: raw, Routing: ledger.Routing{Mode: string(a.route.Mode), Partition: a.route.Partition, RoutingKey: a.route.RoutingKey,
			Topic: a.route.Topic, DecisionSource: string(a.route.Source), DecisionReason: a.route.Reason},
		Asset: a.asset,
	}
	msg, err := engine.QueuedJobMessage(ctx, request, cmd)
	if err != nil {
		return ledger.Accepted{JobID: jobID}, fmt.Errorf("%w queued job: %w", errEncode, err)
	}
	res, err := s.store.Accept(ctx, request, msg, a.limits)
	res.JobID = cmp.Or(res.JobID, jobID) // a refused request is logged under the id it would have had
	return res, err
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

// limitError answers a submit over an admission limit: RESOURCE_EXHAUSTED
// (HTTP 429 with Retry-After) naming the limit.
func limitError(l *ledger.LimitError, retryAfter time.Duration) *status.Status {
	reason := map[string]luciusv1.ErrorReason{ledger.ScopeTenant: luciusv1.ErrorReason_ERROR_REASON_TENANT_LIMIT_REACHED, ledger.ScopeLane: luciusv1.ErrorReason_ERROR_REASON_LANE_LIMIT_REACHED,
		ledger.ScopeGlobal: luciusv1.ErrorReason_ERROR_REASON_GLOBAL_LIMIT_REACHED}[l.Scope]
	return server.ResourceExhausted(reason, l.Error()+"; retry later", retryAfter,
		"scope", l.Scope, "key", l.Key, "limit", strconv.Itoa(l.Limit))
}

// refusalPace is how long the answer to a submit the gate turns away is held
// back: about its Retry-After, at most maxRefusalPace. A client retrying in a
// tight loop, ignoring Retry-After, then retries no faster than it was told
// to per request in flight, instead of taking CPU and database round trips
// from other tenants (a 500 ms pace measurably raised their tail). Waiting
// costs a goroutine, not CPU. The pace is drawn from [½, 1½) of the bound, so
// that a flood's requests, answered together once, do not come back together
// every time after (a herd every Retry-After would, for a moment, hold both
// cores and the database pool).
func refusalPace(retryAfter time.Duration) time.Duration {
	p := min(retryAfter, maxRefusalPace)
	if p <= 0 {
		return 0
	}
	return p/2 + rand.N(p) //nolint:gosec // G404: jitter of a Retry-After hint
}

// maxRefusalPace keeps a long configured Retry-After from holding
// connections open.
const maxRefusalPace = 2 * time.Second
