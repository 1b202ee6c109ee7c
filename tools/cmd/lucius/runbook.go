package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

func runbookCommand(s *session) *cobra.Command {
	rb := &cobra.Command{Use: "runbook", Short: "Apply, list and show runbooks (operators)"}
	var version int32
	apply := &cobra.Command{
		Use: "apply FILE", Short: "Apply a runbook definition (a new version, or the same content again)", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[0])
			if err != nil {
				return &codedError{code: exitUsage, err: err}
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewRunbookServiceClient(conn).ApplyRunbook(ctx, &luciusv1.ApplyRunbookRequest{Source: string(src)})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					r := resp.GetRunbook()
					what := "applied"
					if !resp.GetCreated() {
						what = "already applied with this content"
					}
					fmt.Fprintf(t, "%s version %d %s (data table %s)\n", r.GetName(), r.GetVersion(), what, r.GetDataTable())
				})
			})
		},
	}
	list := &cobra.Command{
		Use: "list", Short: "List runbooks", Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewRunbookServiceClient(conn).ListRunbooks(ctx, &luciusv1.ListRunbooksRequest{PageSize: 500})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					row(t, "RUNBOOK", "VERSION", "ACTIVE", "COLUMNS", "DATA TABLE")
					for _, r := range resp.GetRunbooks() {
						row(t, r.GetName(), r.GetVersion(), r.GetActive(), len(r.GetColumns()), r.GetDataTable())
					}
				})
			})
		},
	}
	show := &cobra.Command{
		Use: "show NAME", Short: "Show a runbook (its source)", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewRunbookServiceClient(conn).GetRunbook(ctx, &luciusv1.GetRunbookRequest{Name: args[0], Version: version})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					r := resp.GetRunbook()
					fmt.Fprintf(t, "# %s version %d (active %v, sha256 %s)\n%s", r.GetName(), r.GetVersion(), r.GetActive(), r.GetSha256(), r.GetSource())
				})
			})
		},
	}
	show.Flags().Int32Var(&version, "version", 0, "the version (default: the active one)")
	rb.AddCommand(apply, list, show)
	return rb
}

func batchCommand(s *session) *cobra.Command {
	batch := &cobra.Command{Use: "batch", Short: "List and show runbook batches (operators)"}
	var runbook, pageToken string
	var pageSize int32
	list := &cobra.Command{
		Use: "list --runbook NAME", Short: "List a runbook's batches, newest first", Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewRunbookServiceClient(conn).ListBatches(ctx, &luciusv1.ListBatchesRequest{RunbookName: runbook,
					PageSize: pageSize, PageToken: pageToken})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					row(t, "BATCH", "RUNBOOK", "START", "STATUS", "MEMBERS", "PHASES")
					for _, b := range resp.GetBatches() {
						row(t, b.GetBatchId(), fmt.Sprintf("%s@%d", b.GetRunbookName(), b.GetRunbookVersion()), when(b.GetBatchStartTime()),
							short(b.GetStatus(), "BATCH_STATUS_"), b.GetActiveMemberCount(), len(b.GetPhaseExecutions()))
					}
					if tok := resp.GetNextPageToken(); tok != "" {
						fmt.Fprintf(t, "\nmore: --page-token %s\n", tok)
					}
				})
			})
		},
	}
	list.Flags().StringVar(&runbook, "runbook", "", "the runbook's name")
	list.Flags().Int32Var(&pageSize, "page-size", 0, "batches per page")
	list.Flags().StringVar(&pageToken, "page-token", "", "the next page, as a previous answer gave it")
	show := &cobra.Command{
		Use: "show BATCH_ID", Short: "Show a batch: its init steps and phases with their step counts", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usageErrorf("batch id %q: want a positive number", args[0])
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewRunbookServiceClient(conn).GetBatch(ctx, &luciusv1.GetBatchRequest{BatchId: id})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					b := resp.GetBatch()
					fmt.Fprintf(t, "batch %d of %s@%d, starts %s: %s, %d members\n\n", b.GetBatchId(), b.GetRunbookName(), b.GetRunbookVersion(),
						when(b.GetBatchStartTime()), short(b.GetStatus(), "BATCH_STATUS_"), b.GetActiveMemberCount())
					row(t, "INIT STEP", "FUNCTION", "STATUS", "JOB")
					for _, in := range b.GetInitExecutions() {
						row(t, in.GetStepName(), in.GetFunction(), short(in.GetStatus(), "STEP_EXECUTION_STATUS_"), orDash(in.GetJobId()))
					}
					fmt.Fprintln(t)
					row(t, "PHASE", "OFFSET", "DUE", "STATUS", "STEPS", "SUCCEEDED", "FAILED")
					for _, p := range b.GetPhaseExecutions() {
						c := p.GetStepCounts()
						row(t, p.GetPhaseName(), fmt.Sprintf("%d min", p.GetOffsetMinutes()), when(p.GetDueTime()),
							short(p.GetStatus(), "PHASE_EXECUTION_STATUS_"), c.GetTotal(), c.GetSucceeded(), c.GetFailed())
					}
				})
			})
		},
	}
	batch.AddCommand(list, show)
	return batch
}
