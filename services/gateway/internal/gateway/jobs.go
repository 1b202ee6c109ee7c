package gateway

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus/routing"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/apistatus"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// jobService implements lucius.v1.JobService from the ledger.
type jobService struct {
	luciusv1.UnimplementedJobServiceServer
	store *ledger.Store
	log   *slog.Logger
	watch *watchHub
}

var _ luciusv1.JobServiceServer = (*jobService)(nil)

// GetJob returns the job, or its early view before an orchestrator claims it.
func (s *jobService) GetJob(ctx context.Context, req *luciusv1.GetJobRequest) (*luciusv1.GetJobResponse, error) {
	job, err := visibleJob(ctx, s.store, req.GetJobId())
	if err != nil {
		return nil, s.storeError(ctx, err, req.GetJobId())
	}
	return &luciusv1.GetJobResponse{Job: jobToProto(job)}, nil
}

// jobCursor is the content of a ListJobs page token.
type jobCursor struct {
	Time  time.Time `json:"t"`
	JobID string    `json:"id"`
}

// ListJobs lists jobs newest first with keyset pagination.
func (s *jobService) ListJobs(ctx context.Context, req *luciusv1.ListJobsRequest) (*luciusv1.ListJobsResponse, error) {
	size := pageSize(req, 50)
	filter := ledger.JobFilter{TenantID: routing.Normalize(req.GetTenantId()), Tenants: tenantScope(ctx), Limit: size + 1,
		WorkflowID: req.GetWorkflowId()}
	if t := req.GetCreateTimeAfter(); t != nil {
		filter.CreatedFrom = t.AsTime()
	}
	if t := req.GetCreateTimeBefore(); t != nil {
		filter.CreatedBefore = t.AsTime()
	}
	for _, st := range req.GetStatuses() {
		filter.Statuses = append(filter.Statuses, jobStatusFromProto(st))
	}
	c, ok, err := decodeCursor(req.GetPageToken(), func(c jobCursor) bool { return c.JobID != "" })
	if err != nil {
		return nil, err
	}
	if ok {
		filter.AfterTime, filter.AfterJobID = c.Time, c.JobID
	}
	jobs, err := s.store.ListJobs(ctx, filter)
	if err != nil {
		return nil, s.storeError(ctx, err, "")
	}
	resp := &luciusv1.ListJobsResponse{}
	jobs, resp.NextPageToken = cutPage(jobs, size, func(last *ledger.Job) string {
		return encodeToken(jobCursor{Time: last.CreatedAt, JobID: last.JobID})
	})
	for _, j := range jobs {
		resp.Jobs = append(resp.Jobs, jobToProto(j))
	}
	return resp, nil
}

// stepCursor is the content of a ListJobSteps page token.
type stepCursor struct {
	Index  int    `json:"i"`
	Child  int    `json:"c"`
	StepID string `json:"id"`
}

// ListJobSteps returns the steps of a job with their attempts: those that run
// work, or every workflow node with STEP_VIEW_FULL.
func (s *jobService) ListJobSteps(ctx context.Context, req *luciusv1.ListJobStepsRequest) (*luciusv1.ListJobStepsResponse, error) {
	if _, err := visibleJob(ctx, s.store, req.GetJobId()); err != nil {
		return nil, s.storeError(ctx, err, req.GetJobId())
	}
	size := pageSize(req, 1000)
	filter := ledger.StepFilter{Limit: size + 1}
	if req.GetView() != luciusv1.StepView_STEP_VIEW_FULL {
		filter.Kinds = []string{ledger.KindTask, ledger.KindChild}
	}
	c, ok, err := decodeCursor(req.GetPageToken(), func(c stepCursor) bool { return c.StepID != "" })
	if err != nil {
		return nil, err
	}
	if ok {
		filter.AfterIndex, filter.AfterChild, filter.AfterStepID = c.Index, c.Child, c.StepID
	}
	steps, err := s.store.ListSteps(ctx, req.GetJobId(), filter)
	if err != nil {
		return nil, s.storeError(ctx, err, req.GetJobId())
	}
	resp := &luciusv1.ListJobStepsResponse{}
	steps, resp.NextPageToken = cutPage(steps, size, func(last ledger.StepWithAttempts) string {
		return encodeToken(stepCursor{Index: last.Index, Child: last.ChildNo, StepID: last.StepID})
	})
	// Lease ids bind callbacks: only operators see them.
	operator := auth.FromContext(ctx).Operator()
	for _, st := range steps {
		step := stepToProto(st)
		if !operator {
			for _, a := range step.GetAttempts() {
				a.LeaseId = ""
			}
		}
		resp.Steps = append(resp.Steps, step)
	}
	return resp, nil
}

// ListJobEvents pages through a job's audit trail, oldest first.
func (s *jobService) ListJobEvents(ctx context.Context, req *luciusv1.ListJobEventsRequest) (*luciusv1.ListJobEventsResponse, error) {
	if _, err := visibleJob(ctx, s.store, req.GetJobId()); err != nil {
		return nil, s.storeError(ctx, err, req.GetJobId())
	}
	size := pageSize(req, 200)
	after, err := decodeIDToken(req.GetPageToken(), 0)
	if err != nil {
		return nil, err
	}
	events, err := s.store.ListEvents(ctx, req.GetJobId(), after, size+1)
	if err != nil {
		return nil, s.storeError(ctx, err, req.GetJobId())
	}
	resp := &luciusv1.ListJobEventsResponse{}
	events, resp.NextPageToken = cutPage(events, size, func(last ledger.Event) string { return encodeIDToken(last.ID) })
	for _, e := range events {
		resp.Events = append(resp.Events, eventToProto(e))
	}
	return resp, nil
}

// CancelJob asks the job to stop (see engine.Cancel).
func (s *jobService) CancelJob(ctx context.Context, req *luciusv1.CancelJobRequest) (*luciusv1.CancelJobResponse, error) {
	if _, err := visibleJob(ctx, s.store, req.GetJobId()); err != nil {
		return nil, s.storeError(ctx, err, req.GetJobId())
	}
	job, err := engine.Cancel(ctx, s.store, req.GetJobId(), req.GetReason(), nil)
	if err != nil {
		return nil, s.storeError(ctx, err, req.GetJobId())
	}
	s.log.InfoContext(ctx, "cancel requested", telemetry.JobID(job.JobID), "status", job.Status, "principal", principalName(ctx))
	return &luciusv1.CancelJobResponse{Job: jobToProto(job)}, nil
}

// ReplayJob re-runs a FAILED_FINAL job as a new job (see engine.Replay).
func (s *jobService) ReplayJob(ctx context.Context, req *luciusv1.ReplayJobRequest) (*luciusv1.ReplayJobResponse, error) {
	if _, err := visibleJob(ctx, s.store, req.GetJobId()); err != nil {
		return nil, s.storeError(ctx, err, req.GetJobId())
	}
	job, err := engine.Replay(ctx, s.store, req.GetJobId(), req.GetReason(), nil)
	if errors.Is(err, engine.ErrNotReplayable) {
		return nil, server.Error(codes.FailedPrecondition, luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_REPLAYABLE,
			"job "+req.GetJobId()+" cannot be replayed: "+err.Error(), "job_id", req.GetJobId()).Err()
	}
	if err != nil {
		return nil, s.storeError(ctx, err, req.GetJobId())
	}
	s.log.InfoContext(ctx, "job replayed", telemetry.JobID(req.GetJobId()), "replay_job_id", job.JobID, "principal", principalName(ctx))
	return &luciusv1.ReplayJobResponse{Job: jobToProto(job)}, nil
}

// storeError maps ledger errors to API statuses through apiError, naming the job.
func (s *jobService) storeError(ctx context.Context, err error, jobID string) error {
	return apiError(ctx, s.log, "ledger", "ledger", err,
		&apistatus.NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND, Message: "job " + jobID + " not found", Metadata: []string{"job_id", jobID}},
		telemetry.JobID(jobID))
}
