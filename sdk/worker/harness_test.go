package worker_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/auth/authtest"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/pgbus"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgbus.Migrations, worker.Migrations) }

// eventually bounds waits for something that must happen.
const eventually = 20 * time.Second

// testLockDuration is short so a message left unsettled shows up again fast.
const testLockDuration = 2 * time.Second

// Warnings go to stderr: the runner and the bus log from goroutines that may
// outlive a test's logger.
var logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// fakeOrchestrator is an in-process CallbackService that records every call
// and answers as scripted. It is served by base/server.NewGRPC, so each
// request is also validated against the contract's protovalidate rules, as
// the real orchestrator does.
type fakeOrchestrator struct {
	luciusv1.UnimplementedCallbackServiceServer
	addr string

	mu sync.Mutex
	// ackOutcome answers ACKs (default APPLIED); ackErr, when set, fails them.
	ackOutcome luciusv1.CallbackOutcome
	ackErr     error
	// resultErrs fail the next RESULT calls, one error each, in order.
	resultErrs []error
	// resultErr fails every RESULT call after resultErrs (e.g. a rejection).
	resultErr error
	acks      []*luciusv1.AckRequest
	results   []*luciusv1.ResultRequest // every call, failed ones included
	// heartbeatOutcome answers heartbeats (default APPLIED); heartbeatErr,
	// when set, fails them; heartbeatErrs fail the next ones first, in order.
	heartbeatOutcome luciusv1.CallbackOutcome
	heartbeatErr     error
	heartbeatErrs    []error
	heartbeats       []heartbeatCall // every call, failed ones included
	// detached answers GetDirective by job id (NOT_FOUND for others).
	detached     map[string]*luciusv1.Directive
	getDirective []*luciusv1.GetDirectiveRequest
	// checkpointOutcome answers RecordCheckpoint (default APPLIED).
	checkpointOutcome luciusv1.CallbackOutcome
	checkpoints       []*luciusv1.RecordCheckpointRequest
}

func (f *fakeOrchestrator) RecordCheckpoint(_ context.Context, req *luciusv1.RecordCheckpointRequest) (*luciusv1.RecordCheckpointResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checkpoints = append(f.checkpoints, req)
	return &luciusv1.RecordCheckpointResponse{Outcome: f.checkpointOutcome, StepStatus: luciusv1.StepStatus_STEP_STATUS_IN_PROGRESS}, nil
}

// checkpointCalls returns every RecordCheckpoint received so far.
func (f *fakeOrchestrator) checkpointCalls() []*luciusv1.RecordCheckpointRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*luciusv1.RecordCheckpointRequest(nil), f.checkpoints...)
}

func (f *fakeOrchestrator) GetDirective(_ context.Context, req *luciusv1.GetDirectiveRequest) (*luciusv1.GetDirectiveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.getDirective = append(f.getDirective, req)
	d, ok := f.detached[req.GetJobId()]
	if !ok {
		return nil, status.Error(codes.NotFound, "no detached directive")
	}
	return &luciusv1.GetDirectiveResponse{Directive: d}, nil
}

// getDirectiveCalls returns every GetDirective received so far.
func (f *fakeOrchestrator) getDirectiveCalls() []*luciusv1.GetDirectiveRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*luciusv1.GetDirectiveRequest(nil), f.getDirective...)
}

// heartbeatCall is one Heartbeat the fake received, and what was already
// answered when it arrived.
type heartbeatCall struct {
	req           *luciusv1.HeartbeatRequest
	resultsBefore int
}

func newFakeOrchestrator(t *testing.T, issuer *authtest.Issuer) *fakeOrchestrator {
	t.Helper()
	f := &fakeOrchestrator{ackOutcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED,
		heartbeatOutcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED, checkpointOutcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED}
	// The real guard: the worker's callbacks must carry its worker token.
	srv, _, err := server.NewGRPC(logger, issuer.Guard())
	if err != nil {
		t.Fatal(err)
	}
	luciusv1.RegisterCallbackServiceServer(srv, f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return f
}

func (f *fakeOrchestrator) Ack(_ context.Context, req *luciusv1.AckRequest) (*luciusv1.AckResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks = append(f.acks, req)
	if f.ackErr != nil {
		return nil, f.ackErr
	}
	return &luciusv1.AckResponse{Outcome: f.ackOutcome, StepStatus: luciusv1.StepStatus_STEP_STATUS_IN_PROGRESS}, nil
}

func (f *fakeOrchestrator) Result(_ context.Context, req *luciusv1.ResultRequest) (*luciusv1.ResultResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results = append(f.results, req)
	if len(f.resultErrs) > 0 {
		err := f.resultErrs[0]
		f.resultErrs = f.resultErrs[1:]
		return nil, err
	}
	if f.resultErr != nil {
		return nil, f.resultErr
	}
	outcome := luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED
	for _, earlier := range f.results[:len(f.results)-1] {
		if earlier.GetJobId() == req.GetJobId() && earlier.GetStepId() == req.GetStepId() && earlier.GetAttemptNo() == req.GetAttemptNo() {
			outcome = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE
		}
	}
	return &luciusv1.ResultResponse{Outcome: outcome}, nil
}

func (f *fakeOrchestrator) Heartbeat(_ context.Context, req *luciusv1.HeartbeatRequest) (*luciusv1.HeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeats = append(f.heartbeats, heartbeatCall{req: req, resultsBefore: len(f.results)})
	if len(f.heartbeatErrs) > 0 {
		err := f.heartbeatErrs[0]
		f.heartbeatErrs = f.heartbeatErrs[1:]
		return nil, err
	}
	if f.heartbeatErr != nil {
		return nil, f.heartbeatErr
	}
	return &luciusv1.HeartbeatResponse{Outcome: f.heartbeatOutcome, StepStatus: luciusv1.StepStatus_STEP_STATUS_IN_PROGRESS,
		LeaseExpireTime: timestamppb.New(time.Now().Add(3 * time.Second))}, nil
}

// heartbeatCalls returns every Heartbeat received so far.
func (f *fakeOrchestrator) heartbeatCalls() []heartbeatCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]heartbeatCall(nil), f.heartbeats...)
}

func (f *fakeOrchestrator) calls() (acks []*luciusv1.AckRequest, results []*luciusv1.ResultRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(acks, f.acks...), append(results, f.results...)
}

func (f *fakeOrchestrator) script(do func(f *fakeOrchestrator)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	do(f)
}

func unavailable() error { return status.Error(codes.Unavailable, "orchestrator restarting") }

// env is one test's world: a fresh database with the bus, a fake
// orchestrator, a workspace directory and a runner configuration.
type env struct {
	issuer    *authtest.Issuer
	t         *testing.T
	pool      *pgxpool.Pool
	bus       *pgbus.Bus
	store     *worker.PGStore
	orch      *fakeOrchestrator
	workspace string // local directory; directives use its file:// URL
	cfg       worker.Config
	// target is the callback target put in directives (default orch.addr).
	target string

	stopRunner func()
}

func setup(t *testing.T) *env {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 24 // 32 receivers claim through it
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err := pgbus.New(context.Background(), pool, pgbus.Config{Logger: logger, PollInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) }) //nolint:errcheck
	issuer := authtest.New(t)
	workspace := t.TempDir()
	e := &env{
		issuer: issuer, t: t, pool: pool, bus: b, store: worker.NewPGStore(pool), orch: newFakeOrchestrator(t, issuer),
		workspace: workspace,
		cfg: worker.Config{
			FileRoots:    []string{workspace}, // inputs and outputs live there too
			Service:      "ocr",
			WorkerID:     "worker-test-1",
			Concurrency:  4,
			LockDuration: testLockDuration,
			CallTimeout:  2 * time.Second,
			Backoff:      worker.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
			Logger:       logger,
			DialOptions:  []grpc.DialOption{issuer.Creds(t, authtest.Worker("ocr", "embedding", "sis", "raster", "tiles", "demo"))},
		},
	}
	e.target = e.orch.addr
	return e
}

// start runs a runner with exec until the test ends (or stop is called),
// returning once it receives.
func (e *env) start(exec worker.Executor) *worker.Runner {
	e.t.Helper()
	r, err := worker.NewRunner(e.bus, e.store, exec, e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	e.stopRunner = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("runner: %v", err)
				}
			case <-time.After(eventually):
				e.t.Errorf("runner did not stop")
			}
		})
	}
	e.t.Cleanup(e.stopRunner)
	e.waitFor("runner ready", func() bool {
		select {
		case err := <-done:
			e.t.Fatalf("runner ended early: %v", err)
		default:
		}
		return r.Ready(ctx) == nil
	})
	return r
}

// stop stops the runner and waits for Run to return.
func (e *env) stop() { e.stopRunner() }

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(eventually)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// publishUntilStarted publishes d and waits until its executor signals on
// started (a send or a close).
func (e *env) publishUntilStarted(d *luciusv1.Directive, started <-chan struct{}) {
	e.t.Helper()
	e.publish(d, msgID(d, ""), nil)
	select {
	case <-started:
	case <-time.After(eventually):
		e.t.Fatal("executor never started")
	}
}

// writeInput writes a job input file and returns its file:// URL.
func (e *env) writeInput(name string, data []byte) string {
	e.t.Helper()
	p := filepath.Join(e.workspace, "inputs", name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return "file://" + p
}

// directive builds a valid first-attempt directive for the env's service.
func (e *env) directive(inputRef string) *luciusv1.Directive {
	e.t.Helper()
	id := make([]byte, 32)
	rand.Read(id)
	jobID := hex.EncodeToString(id)
	payload, _ := structpb.NewStruct(map[string]any{})
	return &luciusv1.Directive{
		JobId: jobID, TenantId: "acme", StepId: "ocr", ProtocolId: "OCR_EMBEDDING_SIS", StepType: "OCR",
		Service: e.cfg.Service, AttemptNo: 1, LeaseId: uuid.NewString(), InputRef: inputRef,
		WorkspaceRef: "file://" + e.workspace + "/lucius/acme/" + jobID + "/",
		OutputRef:    "file://" + e.workspace + "/out/" + jobID + ".txt",
		Payload:      payload, CorrelationId: "corr-1",
		CallbackUrls: &luciusv1.CallbackEndpoints{GrpcTarget: e.target},
		JobInputRef:  inputRef,
	}
}

// source is the subscription a directive of tenant "acme" reaches.
func (e *env) source() bus.Source {
	topic := routing.Topic(routing.TopologyTwoTopicSets, routing.ModeDefault, routing.Partition("acme"))
	return bus.SubscriptionSource(topic, e.cfg.Service)
}

// publish sends a directive the way the orchestrator's outbox does, with
// extra application properties (e.g. traceparent).
func (e *env) publish(d *luciusv1.Directive, msgID string, extra map[string]string) {
	e.t.Helper()
	body, err := protojson.Marshal(d)
	if err != nil {
		e.t.Fatal(err)
	}
	e.publishRaw(body, msgID, d, extra)
}

func (e *env) publishRaw(body []byte, msgID string, d *luciusv1.Directive, extra map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	src := e.source()
	s, err := e.bus.NewSender(ctx, src.Topic)
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close(ctx) //nolint:errcheck
	props := map[string]string{
		"MessageType": "directive", topology.PropertyService: e.cfg.Service, "lane": "default",
		"job_id": d.GetJobId(), "step_id": d.GetStepId(), "attempt_no": strconv.Itoa(int(d.GetAttemptNo())),
	}
	for k, v := range extra {
		props[k] = v
	}
	if err := s.Send(ctx, bus.Message{ID: msgID, Body: body, ContentType: "application/json", Properties: props, Key: "acme"}); err != nil {
		e.t.Fatal(err)
	}
}

// assertSettled proves no message is left on the subscription: a message
// merely locked (not completed) would be delivered again within a lock
// duration.
func (e *env) assertSettled() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testLockDuration+time.Second)
	defer cancel()
	rcv, err := e.bus.NewReceiver(ctx, e.source())
	if err != nil {
		e.t.Fatal(err)
	}
	defer rcv.Close(ctx) //nolint:errcheck
	msgs, err := rcv.Receive(ctx, 10)
	if err == nil {
		e.t.Fatalf("subscription still holds %d message(s), e.g. %s (delivery %d)", len(msgs), msgs[0].ID, msgs[0].DeliveryCount)
	}
}

// receiveOne takes the next message of src within the lock duration and a margin.
func (e *env) receiveOne(src bus.Source) *bus.Received {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testLockDuration+3*time.Second)
	defer cancel()
	rcv, err := e.bus.NewReceiver(ctx, src)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rcv.Close(ctx) //nolint:errcheck
	msgs, err := rcv.Receive(ctx, 1)
	if err != nil {
		e.t.Fatalf("receive %s: %v", src, err)
	}
	return msgs[0]
}

// executions counts a job's rows in worker_executions.
func (e *env) executions(jobID string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_executions WHERE job_id = $1`, jobID).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// finishedExecutions counts a job's worker_executions rows recorded as done.
func (e *env) finishedExecutions(jobID string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM worker_executions WHERE job_id = $1 AND finished_at IS NOT NULL`, jobID).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// effectRow is one worker_effects row.
type effectRow struct {
	stepID    string
	attemptNo int
	leaseID   string
	workerID  string
}

// effects lists a job's worker_effects rows.
func (e *env) effects(jobID string) []effectRow {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(),
		`SELECT step_id, attempt_no, lease_id, worker_id FROM worker_effects WHERE job_id = $1 ORDER BY step_id`, jobID)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []effectRow
	for rows.Next() {
		var r effectRow
		if err := rows.Scan(&r.stepID, &r.attemptNo, &r.leaseID, &r.workerID); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// counter counts executor runs.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) inc() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// upperExecutor is a small real executor: it writes the input upper-cased
// (ASCII) to output.txt.
func upperExecutor(runs *counter) worker.HandlerFunc {
	return func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		runs.inc()
		in, err := t.ReadInput(ctx)
		if err != nil {
			return worker.Result{}, err
		}
		out := make([]byte, len(in))
		for i, c := range in {
			if c >= 'a' && c <= 'z' {
				c -= 'a' - 'A'
			}
			out[i] = c
		}
		if _, err := t.WriteArtifact(ctx, "text", "output.txt", "text/plain; charset=utf-8", out); err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Output: map[string]any{"bytes": len(out)}}, nil
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func msgID(d *luciusv1.Directive, suffix string) string {
	return fmt.Sprintf("directive/%s/%s/%d%s", d.GetJobId(), d.GetStepId(), d.GetAttemptNo(), suffix)
}
