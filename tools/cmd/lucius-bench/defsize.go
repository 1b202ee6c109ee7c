package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/tools/stack"
)

// The -defsize benchmark: what a workflow definition's size costs. It starts
// a suite with the default workflow limits and shows a 15,000-node workflow
// refused, then a suite with the limits raised and, for each shape and size,
// times ValidateWorkflow, RegisterWorkflow, Submit, accepted → first step
// dispatched → its directive published (ledger timestamps) and CancelJob, and
// reads each process's peak RSS (VmHWM, reset before each size). No worker
// runs: jobs stay at their first steps, so what is measured is the
// definition's cost, not the job's work.

var defSizes = []int{1000, 5000, 15000}

// defShapes are the generated workflows: a chain of tasks (one runs at a
// time) and a wide DAG (every task starts at once, then a fan_in).
var defShapes = []string{"chain", "wide"}

// raisedLimits lets the largest generated workflow in.
var raisedLimits = map[string]string{
	"LUCIUS_WORKFLOW_MAX_NODES": "20000",
	"LUCIUS_WORKFLOW_MAX_EDGES": "40000",
}

func runDefSize(bin, data, logPath string) error {
	defer dropData(data)
	ctx := context.Background()
	out, closeLog, err := logOutput(logPath)
	if err != nil {
		return err
	}
	defer closeLog()
	// Only the gateway, orchestrators, scheduler and reconciler: no worker
	// takes the directives, so a job stays at its first steps until cancelled.
	start := func(limits map[string]string) (*stack.Stack, error) {
		if err := os.RemoveAll(data); err != nil {
			return nil, err
		}
		env := map[string]string{"LUCIUS_LOG_LEVEL": "warn"}
		for k, v := range benchEnv {
			env[k] = v
		}
		for k, v := range limits {
			env[k] = v
		}
		return stack.Start(ctx, stack.Config{BinDir: bin, DataDir: data, Durable: true, FreePorts: true, Env: env,
			Output: out, Workers: []string{}})
	}

	fmt.Println("starting suite with the default workflow limits…")
	s, err := start(nil)
	if err != nil {
		return err
	}
	err = refusedByDefault(ctx, s)
	s.Stop(context.Background())
	if err != nil {
		return err
	}

	fmt.Printf("starting suite with the limits raised (%s)…\n", envList(raisedLimits))
	s, err = start(raisedLimits)
	if err != nil {
		return err
	}
	defer s.Stop(context.Background())
	conn, err := dialGateway(s)
	if err != nil {
		return err
	}
	defer conn.Close()
	pool, err := pgxpool.New(ctx, s.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	input := filepath.Join(s.Files, "defsize-input.txt") // inside the file roots
	if err := os.WriteFile(input, []byte("definition size benchmark\n"), 0o644); err != nil {
		return err
	}
	b := &defBench{s: s, pool: pool, input: "file://" + input,
		workflows: luciusv1.NewWorkflowServiceClient(conn), commands: luciusv1.NewCommandServiceClient(conn),
		jobs: luciusv1.NewJobServiceClient(conn)}
	var rows []defRow
	for _, shape := range defShapes {
		for _, n := range defSizes {
			row, err := b.measure(ctx, shape, n)
			if err != nil {
				return fmt.Errorf("%s of %d nodes: %w", shape, n, err)
			}
			rows = append(rows, row)
		}
	}
	printDefRows(s, rows)
	return nil
}

// dialGateway is the one place the benchmark connects to the gateway, as an
// operator of the suite's local issuer.
func dialGateway(s *stack.Stack) (*grpc.ClientConn, error) {
	token, err := s.OperatorToken()
	if err != nil {
		return nil, err
	}
	return server.Dial(s.Endpoints.GatewayGRPC, grpc.WithPerRPCCredentials(auth.BearerToken(token)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
}

// refusedByDefault registers a 15,000-node chain against the default limits
// and checks it is refused with WORKFLOW_TOO_LARGE.
func refusedByDefault(ctx context.Context, s *stack.Stack) error {
	conn, err := dialGateway(s)
	if err != nil {
		return err
	}
	defer conn.Close()
	src := generateWorkflow("chain", 15000)
	resetPeaks(s)
	t0 := time.Now()
	_, err = luciusv1.NewWorkflowServiceClient(conn).RegisterWorkflow(ctx, &luciusv1.RegisterWorkflowRequest{Source: src})
	took := time.Since(t0)
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || server.ReasonOf(err) != luciusv1.ErrorReason_ERROR_REASON_WORKFLOW_TOO_LARGE {
		return fmt.Errorf("with the default limits a 15,000-node workflow was not refused as too large: %v", err)
	}
	gw := peakRSS(s.Process("gateway").Pid())
	fmt.Printf("\nRESULT defaults: a 15,000-node chain (%d KB) is refused in %s: %s %s\n  gateway peak RSS %s\n",
		len(src)/1024, took.Round(100*time.Microsecond), st.Code(), st.Message(), mib(gw))
	return nil
}

type defBench struct {
	s         *stack.Stack
	pool      *pgxpool.Pool
	input     string
	workflows luciusv1.WorkflowServiceClient
	commands  luciusv1.CommandServiceClient
	jobs      luciusv1.JobServiceClient
}

type defRow struct {
	shape                         string
	nodes, bytes                  int
	validate, register, submit    time.Duration
	dispatched, published, cancel time.Duration
	peak                          map[string]int64 // process → VmHWM bytes
}

func (b *defBench) measure(ctx context.Context, shape string, n int) (defRow, error) {
	src := generateWorkflow(shape, n)
	id := fmt.Sprintf("gen_%s_%d", shape, n)
	row := defRow{shape: shape, nodes: n, bytes: len(src)}
	resetPeaks(b.s)
	t0 := time.Now()
	v, err := b.workflows.ValidateWorkflow(ctx, &luciusv1.ValidateWorkflowRequest{Source: src})
	if err != nil {
		return row, err
	}
	if !v.GetValid() {
		return row, fmt.Errorf("invalid: %v", v.GetErrors())
	}
	row.validate = time.Since(t0)
	t0 = time.Now()
	if _, err := b.workflows.RegisterWorkflow(ctx, &luciusv1.RegisterWorkflowRequest{Source: src}); err != nil {
		return row, err
	}
	row.register = time.Since(t0)
	t0 = time.Now()
	resp, err := b.commands.Submit(ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{
		TenantId: "defsize", RequestType: id, SchemaVersion: "1", InputRef: b.input, Payload: &structpb.Struct{},
		OutputRef: fmt.Sprintf("file://%s/out/%s.json", b.s.Files, id), IdempotencyKey: fmt.Sprintf("defsize-%d-%s", t0.UnixNano(), id)}})
	if err != nil {
		return row, err
	}
	row.submit = time.Since(t0)
	jobID := resp.GetJobId()
	// Submit → the first step dispatched (the job created and started in one
	// transaction) → its directive published, from the ledger's timestamps.
	if row.dispatched, err = b.sinceAccepted(ctx, jobID, "DISPATCHING", 5*time.Minute); err != nil {
		return row, err
	}
	if row.published, err = b.sinceAccepted(ctx, jobID, "AWAITING_ACK", 5*time.Minute); err != nil {
		return row, err
	}
	// Cancel: pending steps are cancelled at once; the job ends when its
	// dispatched ones do (here, at their ACK timeout: no worker runs them).
	t0 = time.Now()
	if _, err := b.jobs.CancelJob(ctx, &luciusv1.CancelJobRequest{JobId: jobID, Reason: "defsize benchmark"}); err != nil {
		return row, err
	}
	row.cancel = time.Since(t0)
	row.peak = map[string]int64{}
	for _, name := range b.s.Names() {
		row.peak[name] = peakRSS(b.s.Process(name).Pid())
	}
	fmt.Printf("  %-5s %6d nodes: validate %s, register %s, submit %s, → first dispatch %s, → published %s, cancel %s\n",
		shape, n, ms(row.validate), ms(row.register), ms(row.submit), ms(row.dispatched), ms(row.published), ms(row.cancel))
	return row, nil
}

// sinceAccepted waits for the job's first step event to status and returns
// its time after the request was accepted.
func (b *defBench) sinceAccepted(ctx context.Context, jobID, status string, wait time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(wait)
	for {
		var secs *float64
		err := b.pool.QueryRow(ctx, `SELECT extract(epoch FROM min(e.created_at) - r.received_at)
			FROM requests r LEFT JOIN job_events e ON e.job_id = r.job_id AND e.type = 'STEP_STATUS_CHANGED' AND e.to_status = $2
			WHERE r.job_id = $1 GROUP BY r.received_at`, jobID, status).Scan(&secs)
		if err != nil {
			return 0, err
		}
		if secs != nil {
			return time.Duration(*secs * float64(time.Second)), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("job %s: no step reached %s within %s", jobID, status, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func printDefRows(s *stack.Stack, rows []defRow) {
	names := s.Names()
	fmt.Println("\nRESULT definition size (limits raised); times per operation, peak RSS per process over that size's run:")
	fmt.Printf("  %-5s %6s %7s %9s %9s %9s %9s %9s %9s", "shape", "nodes", "KB", "validate", "register", "submit", "→dispatch", "→publish", "cancel")
	for _, n := range names {
		fmt.Printf(" %14s", n)
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Printf("  %-5s %6d %7d %9s %9s %9s %9s %9s %9s", r.shape, r.nodes, r.bytes/1024, ms(r.validate), ms(r.register),
			ms(r.submit), ms(r.dispatched), ms(r.published), ms(r.cancel))
		for _, n := range names {
			fmt.Printf(" %14s", mib(r.peak[n]))
		}
		fmt.Println()
	}
}

// generateWorkflow writes an n-node workflow of OCR tasks: "chain" (START,
// n-2 tasks in a row, END; about 46 bytes a node, as the 743 KB, 15,000-node
// definition of issue 15) or "wide" (START leading to n-3 tasks at once, a
// fan_in, END).
func generateWorkflow(shape string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "workflow_id: gen_%s_%d\nversion: 1\nnodes:\n", shape, n)
	switch shape {
	case "chain":
		b.WriteString("  START: {type: start, next: t0}\n")
		for i := range n - 2 {
			next := "t" + strconv.Itoa(i+1)
			if i == n-3 {
				next = "END"
			}
			fmt.Fprintf(&b, "  t%d: {type: task, handler: OCR, next: %s}\n", i, next)
		}
	case "wide":
		b.WriteString("  START:\n    type: start\n    next:\n")
		for i := range n - 3 {
			fmt.Fprintf(&b, "      - t%d\n", i)
		}
		for i := range n - 3 {
			fmt.Fprintf(&b, "  t%d: {type: task, handler: OCR, next: join}\n", i)
		}
		b.WriteString("  join: {type: fan_in, next: END}\n")
	}
	b.WriteString("  END: {type: end}\n")
	return b.String()
}

// resetPeaks resets every process's peak RSS (Linux: clear_refs 5) to its
// current RSS: memory a Go process kept from an earlier size still counts.
func resetPeaks(s *stack.Stack) {
	for _, name := range s.Names() {
		pid := s.Process(name).Pid()
		if pid <= 0 {
			continue
		}
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	}
}

// peakRSS is a process's VmHWM in bytes, or -1 where /proc cannot tell.
func peakRSS(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kb * 1024
		}
	}
	return -1
}

func mib(b int64) string {
	if b < 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func envList(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
