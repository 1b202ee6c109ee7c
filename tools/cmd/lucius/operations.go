package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

func dlqCommand(s *session) *cobra.Command {
	dlq := &cobra.Command{Use: "dlq", Short: "Inspect dead letters"}
	var kind, jobID, pageToken string
	var pageSize int32
	list := &cobra.Command{
		Use: "list", Short: "List dead letters, newest first", Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &luciusv1.ListDeadLettersRequest{JobId: jobID, PageSize: pageSize, PageToken: pageToken}
			if kind != "" {
				v, ok := luciusv1.DeadLetterKind_value["DEAD_LETTER_KIND_"+strings.ToUpper(kind)]
				if !ok {
					return usageErrorf("--kind %q: want step or bus", kind)
				}
				req.Kind = luciusv1.DeadLetterKind(v)
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewDeadLetterServiceClient(conn).ListDeadLetters(ctx, req)
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					row(t, "ID", "KIND", "JOB", "STEP", "ATTEMPT", "REASON", "CREATED", "REPLAYED AS")
					for _, d := range resp.GetDeadLetters() {
						row(t, d.GetDeadLetterId(), short(d.GetKind(), "DEAD_LETTER_KIND_"), orDash(d.GetJobId()), orDash(d.GetStepId()),
							d.GetAttemptNo(), d.GetReason(), when(d.GetCreateTime()), orDash(d.GetReplayJobId()))
					}
					if tok := resp.GetNextPageToken(); tok != "" {
						fmt.Fprintf(t, "\nmore: --page-token %s\n", tok)
					}
				})
			})
		},
	}
	list.Flags().StringVar(&kind, "kind", "", "step or bus")
	list.Flags().StringVar(&jobID, "job", "", "only this job's")
	list.Flags().Int32Var(&pageSize, "page-size", 0, "dead letters per page (default 50)")
	list.Flags().StringVar(&pageToken, "page-token", "", "the next page, as a previous answer gave it")
	show := &cobra.Command{
		Use: "show ID", Short: "Show a dead letter with its message", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usageErrorf("dead letter id %q: want a positive number", args[0])
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewDeadLetterServiceClient(conn).GetDeadLetter(ctx, &luciusv1.GetDeadLetterRequest{DeadLetterId: id})
				if err != nil {
					return err
				}
				d := resp.GetDeadLetter()
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					row(t, "id", d.GetDeadLetterId())
					row(t, "kind", short(d.GetKind(), "DEAD_LETTER_KIND_"))
					row(t, "job", orDash(d.GetJobId()))
					row(t, "step", fmt.Sprintf("%s attempt %d", orDash(d.GetStepId()), d.GetAttemptNo()))
					row(t, "reason", d.GetReason())
					row(t, "description", orDash(d.GetDescription()))
					row(t, "entity", orDash(d.GetEntity()))
					row(t, "replayed as", orDash(d.GetReplayJobId()))
					row(t, "body", orDash(clip(d.GetBody(), 200)))
				})
			})
		},
	}
	var reason string
	replay := &cobra.Command{
		Use: "replay ID", Short: "Replay the FAILED_FINAL job a step dead letter belongs to", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usageErrorf("dead letter id %q: want a positive number", args[0])
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				d, err := luciusv1.NewDeadLetterServiceClient(conn).GetDeadLetter(ctx, &luciusv1.GetDeadLetterRequest{DeadLetterId: id})
				if err != nil {
					return err
				}
				jobID := d.GetDeadLetter().GetJobId()
				if jobID == "" {
					return &codedError{code: exitError, err: fmt.Errorf("dead letter %d belongs to no job (a bus message): nothing to replay", id)}
				}
				resp, err := luciusv1.NewJobServiceClient(conn).ReplayJob(ctx, &luciusv1.ReplayJobRequest{JobId: jobID, Reason: reason})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) { jobTable(t, resp.GetJob()) })
			})
		},
	}
	replay.Flags().StringVar(&reason, "reason", "", "why (recorded on the replay)")
	dlq.AddCommand(list, show, replay)
	return dlq
}

func workflowCommand(s *session) *cobra.Command {
	wf := &cobra.Command{Use: "workflow", Short: "Validate, register, list and show workflow definitions"}
	var version int32
	list := &cobra.Command{
		Use: "list", Short: "List registered workflows (latest versions)", Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewWorkflowServiceClient(conn).ListWorkflows(ctx, &luciusv1.ListWorkflowsRequest{PageSize: 500})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					row(t, "WORKFLOW", "VERSION", "NODES", "REGISTERED", "BY")
					for _, w := range resp.GetWorkflows() {
						row(t, w.GetWorkflowId(), w.GetVersion(), len(w.GetNodes()), when(w.GetRegisterTime()), orDash(w.GetRegisteredBy()))
					}
				})
			})
		},
	}
	show := &cobra.Command{
		Use: "show WORKFLOW_ID", Short: "Show a workflow's DAG as a tree", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewWorkflowServiceClient(conn).GetWorkflow(ctx, &luciusv1.GetWorkflowRequest{WorkflowId: args[0], Version: version})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					w := resp.GetWorkflow()
					fmt.Fprintf(t, "%s version %d: %s\n", w.GetWorkflowId(), w.GetVersion(), orDash(w.GetDescription()))
					for _, line := range dagTree(w.GetNodes()) {
						fmt.Fprintln(t, line)
					}
				})
			})
		},
	}
	show.Flags().Int32Var(&version, "version", 0, "the version (default: the latest)")
	validate := &cobra.Command{
		Use: "validate FILE", Short: "Validate a definition; problems are printed as file:line:column", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[0])
			if err != nil {
				return &codedError{code: exitUsage, err: err}
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewWorkflowServiceClient(conn).ValidateWorkflow(ctx, &luciusv1.ValidateWorkflowRequest{Source: string(src)})
				if err != nil {
					return err
				}
				if err := s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					if resp.GetValid() {
						fmt.Fprintf(t, "%s: valid (%s version %d, %d nodes)\n", args[0], resp.GetWorkflow().GetWorkflowId(),
							resp.GetWorkflow().GetVersion(), len(resp.GetWorkflow().GetNodes()))
					}
					for _, e := range resp.GetErrors() {
						fmt.Fprintf(t, "%s:%s\n", args[0], e)
					}
				}); err != nil {
					return err
				}
				if !resp.GetValid() {
					return &codedError{code: exitError, err: fmt.Errorf("%s: %d problems", args[0], len(resp.GetErrors()))}
				}
				return nil
			})
		},
	}
	register := &cobra.Command{
		Use: "register FILE", Short: "Register a definition (operators)", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[0])
			if err != nil {
				return &codedError{code: exitUsage, err: err}
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewWorkflowServiceClient(conn).RegisterWorkflow(ctx, &luciusv1.RegisterWorkflowRequest{Source: string(src)})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					w := resp.GetWorkflow()
					what := "registered"
					if !resp.GetCreated() {
						what = "already registered with this content"
					}
					fmt.Fprintf(t, "%s version %d %s\n", w.GetWorkflowId(), w.GetVersion(), what)
				})
			})
		},
	}
	wf.AddCommand(list, show, validate, register)
	return wf
}

// dagTree draws a workflow's nodes as a tree from its start, each node
// under the one before it; a node reached again is shown once, then named.
func dagTree(nodes []*luciusv1.WorkflowNode) []string {
	byID := map[string]*luciusv1.WorkflowNode{}
	start := ""
	for _, n := range nodes {
		byID[n.GetNodeId()] = n
		if n.GetType() == "start" && start == "" {
			start = n.GetNodeId()
		}
	}
	var lines []string
	drawn := map[string]bool{}
	var draw func(id, prefix string, last bool, root bool)
	draw = func(id, prefix string, last, root bool) {
		n := byID[id]
		label := id
		if n != nil {
			label = fmt.Sprintf("%s (%s", id, n.GetType())
			if n.GetHandler() != "" {
				label += fmt.Sprintf(": %s → %s", n.GetHandler(), n.GetService())
			}
			label += ")"
		}
		branch, next := "", prefix
		if !root {
			branch, next = prefix+"├── ", prefix+"│   "
			if last {
				branch, next = prefix+"└── ", prefix+"    "
			}
		}
		if drawn[id] {
			lines = append(lines, branch+id+" (see above)")
			return
		}
		drawn[id] = true
		lines = append(lines, branch+label)
		if n == nil {
			return
		}
		for i, c := range n.GetNext() {
			draw(c, next, i == len(n.GetNext())-1, false)
		}
	}
	if start != "" {
		draw(start, "", true, true)
	}
	for _, n := range nodes { // anything not reachable from start
		if !drawn[n.GetNodeId()] {
			draw(n.GetNodeId(), "", true, true)
		}
	}
	return lines
}

func breakerCommand(s *session) *cobra.Command {
	br := &cobra.Command{Use: "breaker", Short: "See and reset circuit breakers (operators)"}
	var reason string
	table := func(t *tabwriter.Writer, bs ...*luciusv1.CircuitBreaker) {
		row(t, "SERVICE", "STATE", "HELD STEPS", "FAILURE RATE", "ATTEMPTS", "SINCE", "RETRY AT", "REASON")
		for _, b := range bs {
			row(t, b.GetService(), short(b.GetState(), "CIRCUIT_STATE_"), b.GetHeldSteps(), fmt.Sprintf("%.0f%%", 100*b.GetFailureRate()),
				b.GetAttempts(), when(b.GetUpdateTime()), when(b.GetRetryTime()), clip(b.GetReason(), 60))
		}
	}
	list := &cobra.Command{
		Use: "list", Short: "List the breakers that ever opened", Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewCircuitBreakerServiceClient(conn).ListCircuitBreakers(ctx, &luciusv1.ListCircuitBreakersRequest{PageSize: 500})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) { table(t, resp.GetCircuitBreakers()...) })
			})
		},
	}
	show := &cobra.Command{
		Use: "show SERVICE", Short: "Show a service's breaker and its transitions", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewCircuitBreakerServiceClient(conn).GetCircuitBreaker(ctx, &luciusv1.GetCircuitBreakerRequest{Service: args[0]})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					table(t, resp.GetCircuitBreaker())
					fmt.Fprintln(t)
					row(t, "TIME", "FROM", "TO", "BY", "REASON")
					for _, tr := range resp.GetTransitions() {
						row(t, when(tr.GetCreateTime()), short(tr.GetFromState(), "CIRCUIT_STATE_"), short(tr.GetToState(), "CIRCUIT_STATE_"),
							tr.GetPrincipal(), clip(tr.GetReason(), 70))
					}
				})
			})
		},
	}
	reset := &cobra.Command{
		Use: "reset SERVICE", Short: "Close a breaker now; what it held goes out", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewCircuitBreakerServiceClient(conn).ResetCircuitBreaker(ctx,
					&luciusv1.ResetCircuitBreakerRequest{Service: args[0], Reason: reason})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) { table(t, resp.GetCircuitBreaker()) })
			})
		},
	}
	reset.Flags().StringVar(&reason, "reason", "", "why (recorded with the transition)")
	br.AddCommand(list, show, reset)
	return br
}

func workerCommand(s *session) *cobra.Command {
	w := &cobra.Command{Use: "worker", Short: "Write a new worker, join it to a local suite, or list the workers that announced their handlers"}
	var service string
	list := &cobra.Command{
		Use: "list", Short: "List services, their handlers and instances", Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := luciusv1.NewWorkerServiceClient(conn).ListWorkers(ctx, &luciusv1.ListWorkersRequest{Service: service, PageSize: 500})
				if err != nil {
					return err
				}
				return s.printer(cmd).print(resp, func(t *tabwriter.Writer) {
					row(t, "SERVICE", "HANDLERS", "LIVE", "INSTANCES", "LAST SEEN")
					for _, wk := range resp.GetWorkers() {
						var names []string
						for _, h := range wk.GetHandlers() {
							names = append(names, h.GetName())
						}
						live := 0
						for _, in := range wk.GetInstances() {
							if in.GetLive() {
								live++
							}
						}
						row(t, wk.GetService(), strings.Join(names, ","), live, len(wk.GetInstances()), when(wk.GetLastSeenTime()))
					}
				})
			})
		},
	}
	list.Flags().StringVar(&service, "service", "", "only this service")
	w.AddCommand(list, workerNewCommand(), workerEnvCommand())
	return w
}
