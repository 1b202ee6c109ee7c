package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// pauseTarget is what pause and resume name: one of --all, --tenant,
// --lane, --workflow.
type pauseTarget struct {
	all                    bool
	tenant, lane, workflow string
}

func (p *pauseTarget) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&p.all, "all", false, "all work")
	cmd.Flags().StringVar(&p.tenant, "tenant", "", "a tenant's work")
	cmd.Flags().StringVar(&p.lane, "lane", "", "a lane's work (default or burst)")
	cmd.Flags().StringVar(&p.workflow, "workflow", "", "a workflow's jobs")
}

// check wants exactly one target.
func (p *pauseTarget) check() error {
	n := 0
	for _, set := range []bool{p.all, p.tenant != "", p.lane != "", p.workflow != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return usageErrorf("name exactly one of --all, --tenant, --lane, --workflow")
	}
	return nil
}

func (p *pauseTarget) scope() (luciusv1.PauseScope, string) {
	switch {
	case p.tenant != "":
		return luciusv1.PauseScope_PAUSE_SCOPE_TENANT, p.tenant
	case p.lane != "":
		return luciusv1.PauseScope_PAUSE_SCOPE_LANE, p.lane
	case p.workflow != "":
		return luciusv1.PauseScope_PAUSE_SCOPE_WORKFLOW, p.workflow
	}
	return luciusv1.PauseScope_PAUSE_SCOPE_GLOBAL, ""
}

func pauseCommands(s *session) []*cobra.Command {
	var target pauseTarget
	var reason string
	var refuse bool
	pause := &cobra.Command{
		Use:   "pause --all|--tenant T|--lane L|--workflow W [--reason R] [--refuse-submits]",
		Short: "Pause work: no new step is dispatched (steps in flight finish) until resume (operators)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := target.check(); err != nil {
				return err
			}
			scope, key := target.scope()
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewConfigServiceClient(conn).PauseWork(ctx, &luciusv1.PauseWorkRequest{Scope: scope, Key: key,
					Reason: reason, RefuseSubmits: refuse})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) { pausesTable(t, resp.GetPause()) })
			})
		},
	}
	target.flags(pause)
	pause.Flags().StringVar(&reason, "reason", "", "why (shown on the steps that wait)")
	pause.Flags().BoolVar(&refuse, "refuse-submits", false, "also refuse new commands (503 WORK_PAUSED)")
	var resumeTarget pauseTarget
	resume := &cobra.Command{
		Use:   "resume --all|--tenant T|--lane L|--workflow W",
		Short: "Lift a pause: what it held is dispatched within a second (operators)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := resumeTarget.check(); err != nil {
				return err
			}
			scope, key := resumeTarget.scope()
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewConfigServiceClient(conn).ResumeWork(ctx, &luciusv1.ResumeWorkRequest{Scope: scope, Key: key})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					fmt.Fprintf(t, "resumed %s %s\n", short(scope, "PAUSE_SCOPE_"), key)
				})
			})
		},
	}
	resumeTarget.flags(resume)
	pauses := &cobra.Command{
		Use: "pauses", Short: "List the pauses in force (operators)", Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewConfigServiceClient(conn).ListPauses(ctx, &luciusv1.ListPausesRequest{PageSize: 500})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) { pausesTable(t, resp.GetPauses()...) })
			})
		},
	}
	return []*cobra.Command{pause, resume, pauses}
}

func pausesTable(t *tabwriter.Writer, ps ...*luciusv1.Pause) {
	row(t, "SCOPE", "KEY", "REFUSE SUBMITS", "BY", "SINCE", "REASON")
	for _, p := range ps {
		row(t, short(p.GetScope(), "PAUSE_SCOPE_"), orDash(p.GetKey()), p.GetRefuseSubmits(), p.GetPausedBy(), when(p.GetPauseTime()), orDash(p.GetReason()))
	}
}
