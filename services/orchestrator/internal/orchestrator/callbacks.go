package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/apistatus"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// callbackService implements lucius.v1.CallbackService. Any orchestrator
// instance serves any job's callbacks: the job's row lock and the
// (attempt_no, lease_id) guard make concurrent and repeated callbacks safe.
type callbackService struct {
	luciusv1.UnimplementedCallbackServiceServer
	engine    *engine.Engine
	keys      *auth.CallbackKeys
	log       *slog.Logger
	callbacks metric.Int64Counter
}

var _ luciusv1.CallbackServiceServer = (*callbackService)(nil)

// outcomeRefused is the outcome of lucius_callbacks_total for a callback
// whose token was refused (nothing applied); the others are the engine's
// outcomes in lower case (applied, duplicate, stale_attempt, lease_mismatch,
// after_terminal). Seed 004 names one more, fenced: a callback whose write
// an owner epoch fenced. None is: any instance applies any job's callbacks,
// guarded by (attempt_no, lease_id) under the job's lock, not by its owner's
// epoch. Owners' fenced writes are lucius_orchestrator_fenced_writes_total.
const outcomeRefused = "refused"

func newCallbackService(eng *engine.Engine, keys *auth.CallbackKeys, log *slog.Logger) (*callbackService, error) {
	c, err := otel.Meter("lucius/orchestrator").Int64Counter("lucius_callbacks_total",
		metric.WithDescription("Worker callbacks, by kind (ack, result, heartbeat, checkpoint, get_directive) and outcome "+
			"(applied, duplicate, stale_attempt, lease_mismatch, after_terminal, refused; fenced never happens)."))
	if err != nil {
		return nil, err
	}
	return &callbackService{engine: eng, keys: keys, log: log, callbacks: c}, nil
}

// count counts a callback of kind (ACK, RESULT, …) with outcome.
func (s *callbackService) count(ctx context.Context, kind, outcome string) {
	s.callbacks.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", strings.ToLower(kind)), attribute.String("outcome", outcome)))
}

// admit checks the callback's token before anything is applied: it must be
// Lucius's, unexpired, name this very attempt, and the caller must serve the
// directive's service. A refusal is answered PERMISSION_DENIED and recorded
// as a CALLBACK_REFUSED event of the job (when the job exists).
func (s *callbackService) admit(ctx context.Context, kind, jobID, stepID string, attemptNo int32, leaseID, token string) error {
	p := auth.FromContext(ctx)
	want := auth.Attempt{JobID: jobID, StepID: stepID, AttemptNo: int(attemptNo), LeaseID: leaseID}
	_, err := s.keys.CheckCallback(p, token, want, time.Now())
	if err == nil {
		return nil
	}
	refusal := &auth.CallbackRefusal{Reason: auth.RefusedMalformed, Detail: err.Error()}
	errors.As(err, &refusal)
	s.count(ctx, kind, outcomeRefused)
	s.log.WarnContext(ctx, "callback "+kind+" refused", telemetry.JobID(jobID), telemetry.StepID(stepID),
		telemetry.AttemptNo(int(attemptNo)), "reason", refusal.Reason, "detail", refusal.Detail, "principal", p.String())
	event := ledger.Event{JobID: jobID, StepID: stepID, AttemptNo: int(attemptNo), Type: ledger.EventCallbackRefused,
		Reason: refusal.Reason, Data: map[string]any{"kind": kind, "detail": refusal.Detail, "principal": p.String()}}
	if rerr := s.engine.Store().RecordEvents(ctx, event); rerr != nil {
		s.log.DebugContext(ctx, "record refused callback", telemetry.JobID(jobID), telemetry.Err(rerr))
	}
	return server.Error(codes.PermissionDenied, luciusv1.ErrorReason_ERROR_REASON_CALLBACK_TOKEN_INVALID, "callback refused: "+refusal.Detail,
		"refusal", refusal.Reason).Err()
}

// Ack applies a worker's pickup signal.
func (s *callbackService) Ack(ctx context.Context, req *luciusv1.AckRequest) (*luciusv1.AckResponse, error) {
	if err := s.admit(ctx, "ACK", req.GetJobId(), req.GetStepId(), req.GetAttemptNo(), req.GetLeaseId(), req.GetCallbackToken()); err != nil {
		return nil, err
	}
	res, err := s.engine.Ack(ctx, callbackKey(req))
	if err != nil {
		return nil, s.callbackError(ctx, err, req.GetJobId(), req.GetStepId())
	}
	s.record(ctx, "ACK", res.Outcome, req.GetJobId(), req.GetStepId(), req.GetAttemptNo(), string(res.StepStatus), req.GetCorrelationId())
	return &luciusv1.AckResponse{Outcome: res.Outcome, StepStatus: stepStatus(res.StepStatus)}, nil
}

// Result applies the end of an attempt.
func (s *callbackService) Result(ctx context.Context, req *luciusv1.ResultRequest) (*luciusv1.ResultResponse, error) {
	if err := s.admit(ctx, "RESULT", req.GetJobId(), req.GetStepId(), req.GetAttemptNo(), req.GetLeaseId(), req.GetCallbackToken()); err != nil {
		return nil, err
	}
	report, err := resultFromProto(req)
	if err != nil {
		return nil, err // INVALID_ARGUMENT
	}
	res, err := s.engine.Result(ctx, callbackKey(req), report)
	if err != nil {
		return nil, s.callbackError(ctx, err, req.GetJobId(), req.GetStepId())
	}
	s.record(ctx, "RESULT", res.Outcome, req.GetJobId(), req.GetStepId(), req.GetAttemptNo(), string(res.StepStatus), req.GetCorrelationId())
	return &luciusv1.ResultResponse{Outcome: res.Outcome, StepStatus: stepStatus(res.StepStatus),
		JobStatus: luciusv1.JobStatus(luciusv1.JobStatus_value["JOB_STATUS_"+string(res.JobStatus)])}, nil
}

// Heartbeat extends the lease of a long-running attempt.
func (s *callbackService) Heartbeat(ctx context.Context, req *luciusv1.HeartbeatRequest) (*luciusv1.HeartbeatResponse, error) {
	if err := s.admit(ctx, "HEARTBEAT", req.GetJobId(), req.GetStepId(), req.GetAttemptNo(), req.GetLeaseId(), req.GetCallbackToken()); err != nil {
		return nil, err
	}
	hb, err := heartbeatFromProto(req)
	if err != nil {
		return nil, err // INVALID_ARGUMENT
	}
	res, err := s.engine.Heartbeat(ctx, callbackKey(req), hb)
	if err != nil {
		return nil, s.callbackError(ctx, err, req.GetJobId(), req.GetStepId())
	}
	s.record(ctx, "HEARTBEAT", res.Outcome, req.GetJobId(), req.GetStepId(), req.GetAttemptNo(), string(res.StepStatus), req.GetCorrelationId())
	resp := &luciusv1.HeartbeatResponse{Outcome: res.Outcome, StepStatus: stepStatus(res.StepStatus), CallbackToken: res.CallbackToken}
	if !res.LeaseExpiresAt.IsZero() {
		resp.LeaseExpireTime = timestamppb.New(res.LeaseExpiresAt)
	}
	return resp, nil
}

// RecordCheckpoint records a checkpoint an attempt saved as a
// CHECKPOINT_SAVED event of its job.
func (s *callbackService) RecordCheckpoint(ctx context.Context, req *luciusv1.RecordCheckpointRequest) (*luciusv1.RecordCheckpointResponse, error) {
	if err := s.admit(ctx, "CHECKPOINT", req.GetJobId(), req.GetStepId(), req.GetAttemptNo(), req.GetLeaseId(), req.GetCallbackToken()); err != nil {
		return nil, err
	}
	res, err := s.engine.RecordCheckpoint(ctx, callbackKey(req), checkpointFromProto(req))
	if err != nil {
		return nil, s.callbackError(ctx, err, req.GetJobId(), req.GetStepId())
	}
	s.record(ctx, "CHECKPOINT", res.Outcome, req.GetJobId(), req.GetStepId(), req.GetAttemptNo(), string(res.StepStatus), req.GetCorrelationId())
	return &luciusv1.RecordCheckpointResponse{Outcome: res.Outcome, StepStatus: stepStatus(res.StepStatus)}, nil
}

// GetDirective returns the whole directive of an attempt whose bus message
// was detached, to the worker holding that attempt's callback token.
func (s *callbackService) GetDirective(ctx context.Context, req *luciusv1.GetDirectiveRequest) (*luciusv1.GetDirectiveResponse, error) {
	if err := s.admit(ctx, "GET_DIRECTIVE", req.GetJobId(), req.GetStepId(), req.GetAttemptNo(), req.GetLeaseId(), req.GetCallbackToken()); err != nil {
		return nil, err
	}
	d, err := s.engine.DetachedDirective(ctx, req.GetJobId(), req.GetStepId(), int(req.GetAttemptNo()), req.GetLeaseId())
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, server.Error(codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_DIRECTIVE_NOT_FOUND,
			"no detached directive for this attempt", "job_id", req.GetJobId(), "step_id", req.GetStepId()).Err()
	}
	if err != nil {
		return nil, s.callbackError(ctx, err, req.GetJobId(), req.GetStepId())
	}
	s.log.DebugContext(ctx, "detached directive fetched", telemetry.JobID(req.GetJobId()), telemetry.StepID(req.GetStepId()),
		telemetry.AttemptNo(int(req.GetAttemptNo())))
	return &luciusv1.GetDirectiveResponse{Directive: d}, nil
}

// record counts and logs an answered callback, with the correlation id the
// worker echoed from its directive (also set on the call's span).
func (s *callbackService) record(ctx context.Context, kind string, outcome luciusv1.CallbackOutcome, jobID, stepID string, attempt int32,
	status, correlationID string) {
	name := outcome.String()[len("CALLBACK_OUTCOME_"):]
	s.count(ctx, kind, strings.ToLower(name))
	level := slog.LevelInfo
	if kind == "HEARTBEAT" && outcome == luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		level = slog.LevelDebug // one every lease/3 per running step
	}
	if outcome != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		level = slog.LevelWarn
	}
	if correlationID != "" {
		trace.SpanFromContext(ctx).SetAttributes(attribute.String("lucius.correlation_id", correlationID))
	}
	s.log.Log(ctx, level, "callback "+kind, telemetry.JobID(jobID), telemetry.StepID(stepID),
		telemetry.AttemptNo(int(attempt)), slog.String(telemetry.KeyOutcome, name), "step_status", status,
		"correlation_id", correlationID)
}

// callbackError maps engine errors to API statuses through apistatus, naming
// the job and step the callback spoke for.
func (s *callbackService) callbackError(ctx context.Context, err error, jobID, stepID string) error {
	return apistatus.Error(ctx, s.log, err, apistatus.Call{
		NotFound: &apistatus.NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND, Message: "job " + jobID + " not found",
			Metadata: []string{"job_id", jobID}},
		UnknownStep: &apistatus.NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_STEP_NOT_FOUND, Message: "job " + jobID + " has no step " + stepID,
			Metadata: []string{"job_id", jobID, "step_id", stepID}},
		Cancelled:   "callback cancelled or timed out; retry",
		Unavailable: "the callback could not be applied; retry",
		Log:         "apply callback", LogAttrs: []any{telemetry.JobID(jobID), telemetry.StepID(stepID)},
	})
}

func stepStatus(s ledger.StepStatus) luciusv1.StepStatus {
	return luciusv1.StepStatus(luciusv1.StepStatus_value["STEP_STATUS_"+string(s)])
}
