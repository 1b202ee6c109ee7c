// Command lucius-bench measures the suite end to end: it starts a fresh suite
// (durable PostgreSQL, two orchestrators, workers in no-op mode unless -real),
// submits N three-step OCR_EMBEDDING_SIS jobs over gRPC from C concurrent
// clients (as fast as they can, or at a fixed arrival rate), waits for every job to finish and prints jobs/s and the
// submit→SUCCEEDED latency percentiles (from the ledger's own timestamps).
// With -flood it measures admission fairness; with -defsize, what a workflow
// definition's size costs (defsize.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/tools/stack"
)

// benchEnv is added to every process's environment (-env).
var benchEnv = map[string]string{}

// keepData (-keep) keeps the run's cluster in -data after the run.
var keepData bool

// profiling, when set (-profile), profiles every process during the run.
var profiling *profiler

func main() {
	bin := flag.String("bin", ".build/bin", "directory holding the service binaries")
	data := flag.String("data", ".build/bench", "directory for the benchmark's cluster (recreated)")
	n := flag.Int("n", 1000, "jobs to submit (with -flood: the calm tenant's samples per condition)")
	c := flag.Int("c", 32, "concurrent submitting clients")
	real := flag.Bool("real", false, "workers do their real placeholder work instead of no-op")
	rate := flag.Float64("rate", 0, "submit at this many jobs/s (open loop); 0 submits as fast as the clients can")
	closed := flag.Bool("closed", false, "closed loop: each of -c clients submits, waits for its job to end, and submits again, until -n jobs")
	history := flag.Int("history", 0, "first fill the ledger with this many finished jobs (copies of real ones: requests, jobs, steps, attempts, events, worker executions), then measure")
	profileDir := flag.String("profile", "", "write a CPU profile of every process, taken over the first -profile-seconds of the run, to this directory")
	profileSecs := flag.Int("profile-seconds", 10, "with -profile: how long each profile runs")
	logs := flag.String("logs", "", "file to write the suite's logs to (default: discarded)")
	extraEnv := flag.String("env", "", "extra environment for every process, K=V pairs separated by commas (e.g. LUCIUS_PPROF=true)")
	flood := flag.Bool("flood", false, "measure admission fairness: a calm tenant's submit latency alone, while another tenant works at its limit and while it floods at 10x its limit")
	floodLimit := flag.Int("flood-limit", 5, "with -flood: the flooding tenant's concurrent job limit")
	floodFactor := flag.Int("flood-factor", 10, "with -flood: the flooding tenant keeps this many times its limit in flight")
	floodTarget := flag.String("flood-client", "", "internal: run as the -flood scenario's flooding client against this gateway")
	floodSamples := flag.String("flood-samples", "", "with -flood: write every calm submit (condition, time, latency) to this CSV file")
	floodInput := flag.String("flood-input", "", "internal: the flooding client's input_ref")
	floodWorkspace := flag.String("flood-workspace", "", "internal: the flooding client's workspace")
	defSize := flag.Bool("defsize", false, "measure what a workflow definition's size costs: 15,000 nodes refused with the default limits, then 1k, 5k and 15k nodes with the limits raised (validate, register, submit → first dispatch, peak RSS per process)")
	flag.BoolVar(&keepData, "keep", false, "keep the benchmark's cluster in -data after the run (a -history 1000000 run leaves 18 GB); by default it is removed")
	flag.BoolVar(&walBreakdown, "wal", false, "break the run's WAL per job down by relation, with its full-page images (pg_waldump)")
	flag.Parse()
	if *floodTarget != "" {
		if err := floodClient(*floodTarget, *floodLimit**floodFactor, *floodInput, *floodWorkspace); err != nil {
			fmt.Fprintln(os.Stderr, "lucius-bench flood client:", err)
			os.Exit(1)
		}
		return
	}
	for _, kv := range strings.Split(*extraEnv, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			benchEnv[k] = v
		}
	}
	if *profileDir != "" {
		if err := os.MkdirAll(*profileDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "lucius-bench:", err)
			os.Exit(1)
		}
		benchEnv["LUCIUS_PPROF"] = "true"
		profiling = &profiler{dir: *profileDir, seconds: *profileSecs}
	}
	if *defSize {
		if err := runDefSize(*bin, *data, *logs); err != nil {
			fmt.Fprintln(os.Stderr, "lucius-bench:", err)
			os.Exit(1)
		}
		return
	}
	if *flood {
		floodCfg = &floodConfig{limit: *floodLimit, factor: *floodFactor, calmRate: *rate, calm: *n, samples: *floodSamples}
		if floodCfg.calmRate <= 0 {
			floodCfg.calmRate = 20
		}
	}
	if *closed && *rate > 0 {
		fmt.Fprintln(os.Stderr, "lucius-bench: -closed and -rate exclude each other")
		os.Exit(2)
	}
	if err := run(*bin, *data, *n, *c, *rate, *real, *closed, *history, *logs); err != nil {
		fmt.Fprintln(os.Stderr, "lucius-bench:", err)
		os.Exit(1)
	}
}

// dropData removes the run's cluster from data unless -keep keeps it. Every
// mode defers it first, so it runs last: after the suite and its cluster
// stopped.
func dropData(data string) {
	if !keepData {
		_ = os.RemoveAll(data)
	}
}

func run(bin, data string, n, c int, rate float64, real, closed bool, history int, logPath string) error {
	ctx := context.Background()
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	defer dropData(data)
	out, closeLog, err := logOutput(logPath)
	if err != nil {
		return err
	}
	defer closeLog()
	env := map[string]string{"LUCIUS_LOG_LEVEL": "warn"}
	for k, v := range benchEnv {
		env[k] = v
	}
	if !real {
		env["LUCIUS_WORKER_NOOP"] = "true"
	}
	if floodCfg != nil {
		// Steps take time, as real work does: a tenant's concurrency limit
		// then bounds its throughput, not only its backlog. Workers run
		// enough steps at once to keep up with both tenants (with the default
		// 4 a worker finishes 8 steps/s, and the calm tenant's backlog, not
		// the flood, would grow through the run).
		env["LUCIUS_WORKER_DELAY"] = floodStepDelay.String()
		need := floodCfg.calmRate*floodStepDelay.Seconds() + float64(floodCfg.limit)
		env["LUCIUS_WORKER_CONCURRENCY"] = strconv.Itoa(int(2 * need))
	}
	// LUCIUS_BUS=servicebus measures on Service Bus: the local test broker
	// unless LUCIUS_SERVICEBUS_* name a namespace.
	fmt.Printf("starting suite (durable PostgreSQL, 2 orchestrators, %s workers)…\n", map[bool]string{true: "real", false: "no-op"}[real])
	s, err := stack.Start(ctx, stack.Config{BinDir: bin, DataDir: data, Durable: true, FreePorts: true, Env: env, Output: out,
		Bus: os.Getenv("LUCIUS_BUS"), PGSettings: pgSettings})
	if err != nil {
		return err
	}
	defer s.Stop(context.Background())
	fmt.Printf("bus: %s\n", s.BusDescription())
	fmt.Printf("gateway gRPC %s, HTTP %s (metrics, pprof with -env LUCIUS_PPROF=true)\n", s.Endpoints.GatewayGRPC, s.Endpoints.GatewayHTTP)

	input := filepath.Join(s.Files, "bench-input.txt") // inside the file roots
	if err := os.WriteFile(input, []byte("Lucius benchmark input. The quick brown fox jumps over the lazy dog.\n"), 0o644); err != nil {
		return err
	}
	token, err := s.OperatorToken()
	if err != nil {
		return err
	}
	if floodCfg != nil {
		floodCfg.token = token
	}
	conn, err := server.Dial(s.Endpoints.GatewayGRPC, grpc.WithPerRPCCredentials(auth.BearerToken(token)))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := luciusv1.NewCommandServiceClient(conn)
	payload, _ := structpb.NewStruct(map[string]any{"prompt_set": []any{"what is this about?"}})
	if floodCfg != nil {
		db, err := pgxpool.New(ctx, s.URL)
		if err != nil {
			return err
		}
		defer db.Close()
		return runFlood(ctx, *floodCfg, conn, db, "file://"+input, s.Files, payload)
	}
	poolCfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		return err
	}
	poolCfg.ConnConfig.RuntimeParams["application_name"] = benchApp
	own := &ownQueries{}
	poolCfg.ConnConfig.Tracer = own
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	var ended *completions
	mode := fmt.Sprintf("open loop, %d clients", c)
	switch {
	case closed:
		ended = newCompletions(pool)
		go ended.run(ctx)
		mode = fmt.Sprintf("closed loop, %d clients", c)
	case rate > 0:
		mode = fmt.Sprintf("open loop at %.0f jobs/s", rate)
	}
	sub := &submitter{client: client, input: "file://" + input, files: s.Files, payload: payload, clients: c, rate: rate, ended: ended}
	if history > 0 {
		if err := seedHistory(ctx, pool, sub, history); err != nil {
			return fmt.Errorf("history: %w", err)
		}
		mode += fmt.Sprintf(", %d finished jobs of history", history)
	}
	fmt.Printf("submitting %d three-step jobs (%s)…\n", n, mode)
	cost := startCosts(ctx, pool, own, s)
	if profiling != nil {
		profiling.start(ctx, s, token)
	}
	start := time.Now()
	ids, submitLat, failed := sub.submit(ctx, n, "bench")
	submitted := time.Since(start)
	fmt.Printf("submitted %d jobs in %s (%.0f submits/s, %d failed)\n", len(ids), submitted.Round(time.Millisecond),
		float64(len(ids))/submitted.Seconds(), failed)
	if err := waitFinished(ctx, pool, ids, time.Duration(n)*100*time.Millisecond+2*time.Minute); err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT j.status, extract(epoch FROM j.completed_at - r.received_at),
		extract(epoch FROM r.received_at), extract(epoch FROM j.completed_at)
		FROM jobs j JOIN requests r USING (job_id) WHERE j.job_id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	var lat []time.Duration
	statuses := map[string]int{}
	first, last := 1e18, 0.0
	for rows.Next() {
		var status string
		var l, recv, done float64
		if err := rows.Scan(&status, &l, &recv, &done); err != nil {
			return err
		}
		statuses[status]++
		lat = append(lat, time.Duration(l*float64(time.Second)))
		first, last = min(first, recv), max(last, done)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	cost.report(ctx, len(lat))
	if profiling != nil {
		profiling.wait()
	}
	span := time.Duration((last - first) * float64(time.Second))
	fmt.Printf("\nRESULT jobs=%d statuses=%v (%s)\n", len(lat), statuses, mode)
	fmt.Printf("  throughput      %.1f jobs/s (first accept → last SUCCEEDED: %s)\n", float64(len(lat))/span.Seconds(), span.Round(time.Millisecond))
	fmt.Printf("  submit→SUCCEEDED p50 %s  p95 %s  p99 %s  max %s\n", pct(lat, 50), pct(lat, 95), pct(lat, 99), pct(lat, 100))
	fmt.Printf("  Submit RPC       p50 %s  p95 %s  p99 %s\n", pct(submitLat, 50), pct(submitLat, 95), pct(submitLat, 99))
	return stages(ctx, pool, ids)
}

// submitter submits three-step jobs from concurrent clients: as fast as
// they can, at a fixed rate, or (with ended) each waiting for its job to end
// before submitting the next.
type submitter struct {
	client       luciusv1.CommandServiceClient
	input, files string
	payload      *structpb.Struct
	clients      int
	rate         float64
	ended        *completions
}

// submit submits n jobs whose idempotency keys start with label and returns
// the accepted job ids, each accepted Submit's latency and how many failed.
func (sb *submitter) submit(ctx context.Context, n int, label string) (ids []string, lat []time.Duration, failed int64) {
	start := time.Now()
	// With a rate, job i may not be submitted before start + i/rate.
	pace := func(i int64) {
		if sb.rate > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(float64(i-1) / sb.rate * float64(time.Second)))))
		}
	}
	var next, nfailed atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range sb.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				pace(i)
				t0 := time.Now()
				resp, err := sb.client.Submit(ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{
					TenantId: fmt.Sprintf("tenant-%d", i%8), RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1",
					InputRef: sb.input, OutputRef: fmt.Sprintf("file://%s/out/%s-%d.json", sb.files, label, i),
					Payload: sb.payload, IdempotencyKey: fmt.Sprintf("%s-%d-%d", label, start.UnixNano(), i)}})
				d := time.Since(t0)
				if err != nil {
					nfailed.Add(1)
					continue
				}
				mu.Lock()
				lat = append(lat, d)
				ids = append(ids, resp.GetJobId())
				mu.Unlock()
				if sb.ended != nil {
					<-sb.ended.wait(resp.GetJobId())
				}
			}
		}()
	}
	wg.Wait()
	return ids, lat, nfailed.Load()
}

// waitFinished waits until every job of ids has ended, at most timeout.
func waitFinished(ctx context.Context, pool *pgxpool.Pool, ids []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE job_id = ANY($1) AND completed_at IS NOT NULL`, ids).Scan(&done); err != nil {
			return err
		}
		if done == len(ids) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d jobs finished before the deadline", done, len(ids))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stages prints where the time goes, from the audit trail: each row is the
// time between two consecutive events of a job, by what the later event says.
func stages(ctx context.Context, pool *pgxpool.Pool, ids []string) error {
	rows, err := pool.Query(ctx, `SELECT stage, extract(epoch FROM d) FROM (
		SELECT CASE
			WHEN type = 'JOB_QUEUED' THEN 'accepted → queued (outbox publish)'
			WHEN type = 'JOB_CREATED' THEN 'queued → job created (orchestrator claim)'
			WHEN type = 'STEP_STATUS_CHANGED' AND to_status = 'AWAITING_ACK' THEN 'step dispatched → directive published'
			WHEN type = 'STEP_STATUS_CHANGED' AND to_status = 'IN_PROGRESS' THEN 'directive published → ACK'
			WHEN type = 'STEP_STATUS_CHANGED' AND to_status = 'SUCCEEDED' AND reason = 'RESULT_SUCCEEDED' THEN 'ACK → RESULT applied'
			WHEN type = 'STEP_STATUS_CHANGED' AND to_status = 'DISPATCHING' AND prev_reason = 'RESULT_SUCCEEDED'
			THEN 'RESULT applied → next step dispatched'
			END AS stage, d
		FROM (SELECT type, to_status, reason, created_at - lag(created_at) OVER w AS d, lag(reason) OVER w AS prev_reason
			FROM job_events WHERE job_id = ANY($1) WINDOW w AS (PARTITION BY job_id ORDER BY event_id)) e) s
		WHERE stage IS NOT NULL AND d IS NOT NULL`, ids)
	if err != nil {
		return err
	}
	byStage := map[string][]time.Duration{}
	var order []string
	for rows.Next() {
		var stage string
		var secs float64
		if err := rows.Scan(&stage, &secs); err != nil {
			return err
		}
		if _, ok := byStage[stage]; !ok {
			order = append(order, stage)
		}
		byStage[stage] = append(byStage[stage], time.Duration(secs*float64(time.Second)))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	sort.Strings(order)
	fmt.Println("\n  where the time goes (p50 / p95 / p99 per occurrence):")
	for _, st := range order {
		d := byStage[st]
		fmt.Printf("    %-44s %9s %9s %9s  (n=%d)\n", st, pct(d, 50), pct(d, 95), pct(d, 99), len(d))
	}
	return nil
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i, len(sorted))-1)].Round(100 * time.Microsecond)
}

// logOutput is where the suite's process logs go: the file at path, or
// nowhere when path is empty. Call closeLog when the run ends.
func logOutput(path string) (out io.Writer, closeLog func(), err error) {
	if path == "" {
		return io.Discard, func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { _ = f.Close() }, nil // closing the suite's log: the run's result is the report
}
