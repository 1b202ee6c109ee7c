package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

func jobCommand(s *session) *cobra.Command {
	job := &cobra.Command{Use: "job", Short: "Read, follow, cancel and replay jobs"}
	var (
		watchTenant string
		watchFor    time.Duration
	)
	var tenant string
	var statuses []string
	var pageSize int32
	var pageToken, reason, workflowID string
	var createdAfter, createdBefore time.Time
	list := &cobra.Command{
		Use: "list", Short: "List jobs, newest first", Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &luciusv1.ListJobsRequest{TenantId: tenant, PageSize: pageSize, PageToken: pageToken, WorkflowId: workflowID}
			if !createdAfter.IsZero() {
				req.CreateTimeAfter = timestamppb.New(createdAfter)
			}
			if !createdBefore.IsZero() {
				req.CreateTimeBefore = timestamppb.New(createdBefore)
			}
			for _, st := range statuses {
				v, ok := luciusv1.JobStatus_value["JOB_STATUS_"+strings.ToUpper(st)]
				if !ok {
					return usageErrorf("--status %q: not a job status", st)
				}
				req.Statuses = append(req.Statuses, luciusv1.JobStatus(v))
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewJobServiceClient(conn).ListJobs(ctx, req)
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					row(t, "JOB", "TENANT", "WORKFLOW", "STATUS", "PRIORITY", "CREATED", "REASON")
					for _, j := range resp.GetJobs() {
						row(t, j.GetJobId(), j.GetTenantId(), fmt.Sprintf("%s@%d", j.GetWorkflowId(), j.GetWorkflowVersion()),
							short(j.GetStatus(), "JOB_STATUS_"), j.GetPriority(), when(j.GetCreateTime()), clip(j.GetReason(), 60))
					}
					if tok := resp.GetNextPageToken(); tok != "" {
						fmt.Fprintf(t, "\nmore: --page-token %s\n", tok)
					}
				})
			})
		},
	}
	list.Flags().StringVar(&tenant, "tenant", "", "only this tenant's jobs")
	list.Flags().StringSliceVar(&statuses, "status", nil, "only jobs in these statuses (e.g. FAILED_FINAL,CANCELLED)")
	list.Flags().StringVar(&workflowID, "workflow", "", "only jobs of this workflow")
	list.Flags().TimeVar(&createdAfter, "since", time.Time{}, []string{time.RFC3339}, "only jobs accepted at or after this time (RFC 3339)")
	list.Flags().TimeVar(&createdBefore, "until", time.Time{}, []string{time.RFC3339}, "only jobs accepted before this time (RFC 3339)")
	list.Flags().Int32Var(&pageSize, "page-size", 0, "jobs per page (default 50)")
	list.Flags().StringVar(&pageToken, "page-token", "", "the next page, as a previous answer gave it")

	get := &cobra.Command{
		Use: "get JOB_ID", Short: "Show a job", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewJobServiceClient(conn).GetJob(ctx, &luciusv1.GetJobRequest{JobId: args[0]})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) { jobTable(t, resp.GetJob()) })
			})
		},
	}
	var allNodes bool
	steps := &cobra.Command{
		Use: "steps JOB_ID", Short: "List a job's steps that run work (tasks, fan-out children) with their attempts; --all adds every workflow node",
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			view := luciusv1.StepView_STEP_VIEW_UNSPECIFIED
			if allNodes {
				view = luciusv1.StepView_STEP_VIEW_FULL
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewJobServiceClient(conn).ListJobSteps(ctx, &luciusv1.ListJobStepsRequest{JobId: args[0],
					View: view, PageSize: 500})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					row(t, "STEP", "KIND", "HANDLER", "SERVICE", "STATUS", "ATTEMPT", "REASON")
					for _, st := range resp.GetSteps() {
						row(t, st.GetStepId(), st.GetKind(), orDash(st.GetStepType()), orDash(st.GetService()),
							short(st.GetStatus(), "STEP_STATUS_"), fmt.Sprintf("%d/%d", st.GetAttemptNo(), st.GetMaxAttempts()), clip(st.GetReason(), 60))
					}
				})
			})
		},
	}
	steps.Flags().BoolVar(&allNodes, "all", false, "every workflow node too: start, end, conditionals (with the branch taken), fan_out, fan_in")
	events := &cobra.Command{
		Use: "events JOB_ID", Short: "List a job's audit trail, oldest first", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewJobServiceClient(conn).ListJobEvents(ctx, &luciusv1.ListJobEventsRequest{JobId: args[0],
					PageSize: pageSize, PageToken: pageToken})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					row(t, "ID", "TIME", "TYPE", "STEP", "ATTEMPT", "FROM", "TO", "REASON")
					for _, e := range resp.GetEvents() {
						row(t, e.GetEventId(), when(e.GetCreateTime()), e.GetType(), orDash(e.GetStepId()), e.GetAttemptNo(),
							orDash(e.GetFromStatus()), orDash(e.GetToStatus()), orDash(e.GetReason()))
					}
					if tok := resp.GetNextPageToken(); tok != "" {
						fmt.Fprintf(t, "\nmore: --page-token %s\n", tok)
					}
				})
			})
		},
	}
	events.Flags().Int32Var(&pageSize, "page-size", 0, "events per page (default 100)")
	events.Flags().StringVar(&pageToken, "page-token", "", "the next page, as a previous answer gave it")
	cancel := &cobra.Command{
		Use: "cancel JOB_ID", Short: "Cancel a job (it finishes what runs, starts nothing new)", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewJobServiceClient(conn).CancelJob(ctx, &luciusv1.CancelJobRequest{JobId: args[0], Reason: reason})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) { jobTable(t, resp.GetJob()) })
			})
		},
	}
	cancel.Flags().StringVar(&reason, "reason", "", "why (recorded on the job)")
	replay := &cobra.Command{
		Use: "replay JOB_ID", Short: "Run a FAILED_FINAL job again as a new job", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewJobServiceClient(conn).ReplayJob(ctx, &luciusv1.ReplayJobRequest{JobId: args[0], Reason: reason})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) { jobTable(t, resp.GetJob()) })
			})
		},
	}
	replay.Flags().StringVar(&reason, "reason", "", "why (recorded on the replay)")
	watch := &cobra.Command{
		Use:   "watch [JOB_ID]",
		Short: "Follow a job until it ends (the exit code says how), or without JOB_ID every job of --tenant as it changes",
		Long: `With JOB_ID: follow the job until it ends; the exit code says how it ended.

Without: follow every job of --tenant (every tenant you may see when it is
empty) as it is accepted, starts, ends or is cancelled, one line per change,
until Ctrl-C or --for runs out (JobService.WatchJobs; a dropped stream is
resumed where it stopped).`,
		Example: `  lucius job watch 3f1c…                # one job, to its end
  lucius job watch --tenant acme -o json  # a tenant's jobs, as NDJSON`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return s.follow(cmd, args[0])
			}
			return s.followTenant(cmd, watchTenant, watchFor)
		},
	}
	watch.Flags().StringVar(&watchTenant, "tenant", "", "without JOB_ID: only this tenant's jobs")
	watch.Flags().DurationVar(&watchFor, "for", 0, "without JOB_ID: stop after this long (0: until interrupted)")
	job.AddCommand(list, get, steps, events, cancel, replay, watch)
	return job
}

// jobTable shows one job as name/value lines.
func jobTable(t *tabwriter.Writer, j *luciusv1.Job) {
	row(t, "job_id", j.GetJobId())
	row(t, "tenant", j.GetTenantId())
	row(t, "workflow", fmt.Sprintf("%s@%d", j.GetWorkflowId(), j.GetWorkflowVersion()))
	row(t, "status", short(j.GetStatus(), "JOB_STATUS_"))
	row(t, "priority", j.GetPriority())
	row(t, "current step", orDash(j.GetCurrentStepId()))
	row(t, "reason", orDash(j.GetReason()))
	row(t, "input", j.GetInputRef())
	row(t, "output", j.GetOutputRef())
	row(t, "result", orDash(j.GetResultRef()))
	row(t, "submitted by", orDash(j.GetSubmittedBy()))
	row(t, "created", when(j.GetCreateTime()))
	row(t, "completed", when(j.GetCompleteTime()))
	if j.GetAssetId() != "" {
		row(t, "asset", fmt.Sprintf("%s revision %d", j.GetAssetId(), j.GetAssetRevision()))
	}
	if j.GetReplayOf() != "" {
		row(t, "replay of", j.GetReplayOf())
	}
}

// follow streams a job (JobService.WatchJob) and prints its events as they
// commit, then the job; the exit code says how it ended. A dropped stream is
// resumed from the last event received.
func (s *session) follow(cmd *cobra.Command, jobID string) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), s.timeout)
	defer cancel()
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	jobs := luciusv1.NewJobServiceClient(conn)
	out := cmd.OutOrStdout()
	var job *luciusv1.Job
	var last int64
	for job == nil || !terminal(job.GetStatus()) {
		stream, err := jobs.WatchJob(ctx, &luciusv1.WatchJobRequest{JobId: jobID, AfterEventId: last})
		if err != nil {
			return err
		}
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				if ctx.Err() != nil {
					return &codedError{code: exitUnreachable, err: fmt.Errorf("job %s still %s after --timeout %s", jobID,
						short(job.GetStatus(), "JOB_STATUS_"), s.timeout)}
				}
				if c := status.Code(err); c == codes.Aborted || c == codes.Unavailable && last > 0 {
					break // resume from the last event
				}
				return err
			}
			if resp.GetJob() != nil {
				job = resp.GetJob()
			}
			if e := resp.GetEvent(); e != nil {
				last = e.GetEventId()
				if s.format == formatTable {
					eventLine(out, e)
				}
			}
		}
	}
	if err := s.printer(cmd).print(&luciusv1.GetJobResponse{Job: job}, func(t *tabwriter.Writer) { jobTable(t, job) }); err != nil {
		return err
	}
	switch job.GetStatus() {
	case luciusv1.JobStatus_JOB_STATUS_SUCCEEDED:
		return nil
	case luciusv1.JobStatus_JOB_STATUS_CANCELLED:
		return &codedError{code: exitCancelled, err: fmt.Errorf("job %s was cancelled: %s", jobID, job.GetReason())}
	default:
		return &codedError{code: exitFailed, err: fmt.Errorf("job %s failed: %s", jobID, job.GetReason())}
	}
}

// followTenant streams the job-level changes of a tenant's jobs (every
// tenant's when empty) until ctx ends or for runs out (0: never).
func (s *session) followTenant(cmd *cobra.Command, tenant string, forDuration time.Duration) error {
	ctx := cmd.Context()
	if forDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, forDuration)
		defer cancel()
	}
	dialCtx, cancel := context.WithTimeout(ctx, s.timeout)
	conn, err := s.connect(dialCtx)
	cancel()
	if err != nil {
		return err
	}
	jobs := luciusv1.NewJobServiceClient(conn)
	p := s.printer(cmd)
	var last int64
	for {
		stream, err := jobs.WatchJobs(ctx, &luciusv1.WatchJobsRequest{TenantId: tenant, AfterEventId: last})
		if err != nil {
			return quietEnd(ctx, err)
		}
		for {
			resp, err := stream.Recv()
			if err != nil {
				if err = quietEnd(ctx, err); err == nil {
					return nil
				}
				if errors.Is(err, io.EOF) || status.Code(err) == codes.Aborted || status.Code(err) == codes.Unavailable && last > 0 {
					break // resume from the last event
				}
				return err
			}
			last = max(last, resp.GetEvent().GetEventId())
			if err := p.streamed(resp, func(t *tabwriter.Writer) { tenantLine(t, resp) }); err != nil {
				return err
			}
		}
	}
}

// quietEnd is nil when the watch ended because ctx did (Ctrl-C, --for).
// The server may end the stream at --for's deadline a moment before ctx
// itself reports it: a DeadlineExceeded under that deadline is the end too.
func quietEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	if _, hasDeadline := ctx.Deadline(); hasDeadline && status.Code(err) == codes.DeadlineExceeded {
		return nil
	}
	return err
}

// tenantLine prints one change of a tenant watch.
func tenantLine(t *tabwriter.Writer, resp *luciusv1.WatchJobsResponse) {
	e, j := resp.GetEvent(), resp.GetJob()
	what := e.GetType()
	if e.GetToStatus() != "" {
		what = fmt.Sprintf("%s → %s", orDash(e.GetFromStatus()), e.GetToStatus())
	}
	row(t, e.GetCreateTime().AsTime().Local().Format("15:04:05.000"), j.GetJobId(), j.GetTenantId(),
		fmt.Sprintf("%s@%d", j.GetWorkflowId(), j.GetWorkflowVersion()), what, orDash(clip(e.GetReason(), 60)))
}

// eventLine prints one event of a followed job.
func eventLine(w io.Writer, e *luciusv1.JobEvent) {
	what := e.GetType()
	if e.GetToStatus() != "" {
		what = fmt.Sprintf("%s → %s", orDash(e.GetFromStatus()), e.GetToStatus())
	}
	step := "job"
	if e.GetStepId() != "" {
		step = e.GetStepId()
		if e.GetAttemptNo() > 0 {
			step += fmt.Sprintf("#%d", e.GetAttemptNo())
		}
	}
	reason := ""
	if e.GetReason() != "" {
		reason = "  " + clip(e.GetReason(), 80)
	}
	fmt.Fprintf(w, "%s  %-28s %s%s\n", e.GetCreateTime().AsTime().Local().Format("15:04:05.000"), step, what, reason)
}

func terminal(s luciusv1.JobStatus) bool {
	return s == luciusv1.JobStatus_JOB_STATUS_SUCCEEDED || s == luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL ||
		s == luciusv1.JobStatus_JOB_STATUS_CANCELLED
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
