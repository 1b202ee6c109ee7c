package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/auth/authtest"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/pgbus"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// The binary migrates its database itself: test databases start empty.
func TestMain(m *testing.M) { pgtest.Main(m) }

// resultRecorder is a minimal orchestrator: it applies every callback.
type resultRecorder struct {
	luciusv1.UnimplementedCallbackServiceServer
	mu      sync.Mutex
	results []*luciusv1.ResultRequest
}

func (r *resultRecorder) Ack(context.Context, *luciusv1.AckRequest) (*luciusv1.AckResponse, error) {
	return &luciusv1.AckResponse{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED}, nil
}

func (r *resultRecorder) Result(_ context.Context, req *luciusv1.ResultRequest) (*luciusv1.ResultResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results = append(r.results, req)
	return &luciusv1.ResultResponse{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED}, nil
}

func (r *resultRecorder) get() []*luciusv1.ResultRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*luciusv1.ResultRequest(nil), r.results...)
}

// syncBuffer collects the process's output for failure messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// workerProcess is the real binary running against a fresh database, with a
// minimal orchestrator answering its callbacks.
type workerProcess struct {
	dir      string // temporary directory for inputs and workspaces
	dbURL    string
	httpAddr string
	target   string // the orchestrator's gRPC target
	issuer   *authtest.Issuer
	orch     *resultRecorder
	output   *syncBuffer
	cmd      *exec.Cmd
	exited   chan error
	bus      *pgbus.Bus
	pool     *pgxpool.Pool
}

// startWorker builds and starts the binary with LUCIUS_WORKER_SERVICE=services
// and waits until it is ready.
func startWorker(t *testing.T, services, instance string) *workerProcess {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "worker")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The worker serves on a socket the test binds and hands down: no other
	// process can take its port meanwhile.
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer httpLn.Close()
	w := &workerProcess{dir: dir, dbURL: pgtest.NewDB(t), httpAddr: httpLn.Addr().String(), orch: &resultRecorder{}, output: &syncBuffer{}}

	issuer := authtest.New(t)
	w.issuer = issuer
	grpcSrv, _, err := server.NewGRPC(slog.New(slog.DiscardHandler), issuer.Guard())
	if err != nil {
		t.Fatal(err)
	}
	luciusv1.RegisterCallbackServiceServer(grpcSrv, w.orch)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go grpcSrv.Serve(ln) //nolint:errcheck
	t.Cleanup(grpcSrv.Stop)
	w.target = "ipv4:" + ln.Addr().String()

	w.cmd = exec.Command(bin)
	w.cmd.Env = append(os.Environ(), "DATABASE_URL="+w.dbURL, "LUCIUS_WORKER_SERVICE="+services, "LUCIUS_WORKER_HTTP_ADDR="+w.httpAddr,
		"LUCIUS_INSTANCE="+instance, "LUCIUS_LOG_FORMAT=text", "LUCIUS_BUS_POLL_INTERVAL=200ms", "LUCIUS_FILE_ROOTS="+dir,
		"LUCIUS_AUTH_JWKS_FILE="+issuer.JWKSPath(), "LUCIUS_AUTH_TOKEN_FILE="+issuer.TokenFile(t, authtest.Worker(strings.Split(services, ",")...)))
	w.cmd.Stdout, w.cmd.Stderr = w.output, w.output
	release, err := server.HandDown(w.cmd, []net.Listener{httpLn})
	if err != nil {
		t.Fatal(err)
	}
	err = w.cmd.Start()
	release()
	if err != nil {
		t.Fatal(err)
	}
	w.exited = make(chan error, 1)
	go func() { w.exited <- w.cmd.Wait() }()
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			w.cmd.Process.Kill() //nolint:errcheck
			<-w.exited
		}
	})
	waitFor(t, w.output, "readiness", func() bool {
		resp, err := http.Get("http://" + w.httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	ctx := context.Background()
	if w.pool, err = pgxpool.New(ctx, w.dbURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.pool.Close)
	if w.bus, err = pgbus.New(ctx, w.pool, pgbus.Config{Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.bus.Close(context.Background()) }) //nolint:errcheck
	return w
}

// newJobID returns a random job id.
func newJobID() string {
	id := make([]byte, 32)
	rand.Read(id)
	return hex.EncodeToString(id)
}

// directive returns a first-attempt directive of a step of job for service,
// with the worker's callback target and a workspace in its directory.
func (w *workerProcess) directive(jobID, service, stepID, stepType, inputRef string) *luciusv1.Directive {
	return &luciusv1.Directive{JobId: jobID, TenantId: "acme", StepId: stepID, StepType: stepType, Service: service, AttemptNo: 1,
		LeaseId: uuid.NewString(), InputRef: inputRef, JobInputRef: inputRef, WorkspaceRef: "file://" + w.dir + "/lucius/acme/" + jobID + "/",
		CallbackUrls: &luciusv1.CallbackEndpoints{GrpcTarget: w.target}}
}

// publish sends a directive as the orchestrator's outbox would.
func (w *workerProcess) publish(t *testing.T, d *luciusv1.Directive) {
	t.Helper()
	ctx := context.Background()
	body, err := protojson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	topic := routing.Topic(routing.TopologyTwoTopicSets, routing.ModeDefault, routing.Partition(d.GetTenantId()))
	sender, err := w.bus.NewSender(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.Send(ctx, bus.Message{ID: "directive/" + d.GetJobId() + "/" + d.GetStepId() + "/1", Body: body, ContentType: "application/json",
		Properties: map[string]string{topology.PropertyService: d.GetService(), "lane": "default"}}); err != nil {
		t.Fatal(err)
	}
}

// result waits for the RESULT of a step.
func (w *workerProcess) result(t *testing.T, jobID, stepID string) *luciusv1.ResultRequest {
	t.Helper()
	var res *luciusv1.ResultRequest
	waitFor(t, w.output, "RESULT of "+stepID, func() bool {
		for _, r := range w.orch.get() {
			if r.GetJobId() == jobID && r.GetStepId() == stepID {
				res = r
				return true
			}
		}
		return false
	})
	return res
}

// metrics returns the lucius_worker lines of /metrics.
// metrics returns the worker's lucius_worker series once they hold every
// wanted line (or after 10 s, for the caller to report): a directive is
// counted just after its RESULT is delivered, so a test that has seen the
// RESULT may scrape before the count.
func (w *workerProcess) metrics(t *testing.T, wants ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, "http://"+w.httpAddr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+w.issuer.Token(t, authtest.Operator()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := grep(string(body), "lucius_worker")
		missing := slices.ContainsFunc(wants, func(want string) bool { return !strings.Contains(m, want) })
		if !missing || time.Now().After(deadline) {
			return m
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (w *workerProcess) stop(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, w.output.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit within 20s of SIGTERM\n%s", w.output.String())
	}
}

// TestBinaryRunsOCRDirectiveAndStopsOnSIGTERM starts the real binary on a
// fresh database and drives one OCR directive through it.
func TestBinaryRunsOCRDirectiveAndStopsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binary")
	}
	t.Parallel()
	w := startWorker(t, "ocr", "worker-ocr-e2e")
	ctx := context.Background()

	input := filepath.Join(w.dir, "scan.txt")
	os.WriteFile(input, []byte("scanned page one\nscanned page two\n"), 0o644)
	jobID := newJobID()
	d := w.directive(jobID, "ocr", "ocr", "OCR", "file://"+input)
	d.OutputRef, d.FinalStep = "file://"+w.dir+"/final/", true
	w.publish(t, d)
	res := w.result(t, jobID, "ocr")
	if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || res.GetWorkerId() != "worker-ocr-e2e" ||
		res.GetOutput().GetFields()["lines"].GetNumberValue() != 2 {
		t.Errorf("RESULT = %v", res)
	}
	for _, p := range []string{filepath.Join(w.dir, "lucius", "acme", jobID, "ocr", "1", "output.txt"), filepath.Join(w.dir, "final", "output.txt")} {
		if got, err := os.ReadFile(p); err != nil || string(got) != "scanned page one\nscanned page two\n" {
			t.Errorf("%s = %q, %v", p, got, err)
		}
	}
	var rows int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM worker_executions WHERE job_id = $1 AND finished_at IS NOT NULL`, jobID).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("finished worker_executions rows = %d (%v), want 1", rows, err)
	}
	var effectAttempt int
	if err := w.pool.QueryRow(ctx, `SELECT attempt_no FROM worker_effects WHERE job_id = $1 AND step_id = 'ocr' AND worker_id = 'worker-ocr-e2e'`,
		jobID).Scan(&effectAttempt); err != nil || effectAttempt != 1 {
		t.Errorf("worker_effects row: attempt %d (%v), want the migrated table to hold attempt 1's effect", effectAttempt, err)
	}
	handled := `lucius_worker_directives_total{outcome="succeeded",service="ocr"} 1`
	if m := w.metrics(t, handled); !strings.Contains(m, handled) {
		t.Errorf("/metrics lacks the handled directive:\n%s", m)
	}
	w.stop(t)
}

// TestBinaryRunsSeveralServices runs raster and tiles in one process: each
// service's directives reach its own runner and its handlers, and SIGTERM
// stops both.
func TestBinaryRunsSeveralServices(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binary")
	}
	t.Parallel()
	w := startWorker(t, "raster,tiles", "worker-multi-e2e")
	ctx := context.Background()

	input := filepath.Join(w.dir, "scene.tif")
	content := []byte("II*\x00 a small raster, tiled into pieces")
	os.WriteFile(input, content, 0o644)
	rasterJob, tilesJob := newJobID(), newJobID()

	validate := w.directive(rasterJob, "raster", "validate", "raster_validate", "file://"+input)
	validate.Payload, _ = structpb.NewStruct(map[string]any{"container_name": "rasters", "blob_name": "scene.tif"})
	w.publish(t, validate)
	cog := w.directive(rasterJob, "raster", "process_fa", "raster_cog_fa", "file://"+input)
	cog.Payload, _ = structpb.NewStruct(map[string]any{"source_url": "file://" + input, "target_crs": "EPSG:3857"})
	cog.OutputRef, cog.FinalStep = "file://"+w.dir+"/final/", true
	w.publish(t, cog)
	plan := w.directive(tilesJob, "tiles", "plan", "tiles_plan", "file://"+input)
	plan.Payload, _ = structpb.NewStruct(map[string]any{"tiles": 4})
	w.publish(t, plan)
	// A handler of another service, addressed to tiles: the dispatch refuses it for good.
	stray := w.directive(tilesJob, "tiles", "stray", "raster_validate", "file://"+input)
	w.publish(t, stray)

	res := w.result(t, rasterJob, "validate")
	if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || res.GetWorkerId() != "worker-multi-e2e" ||
		res.GetOutput().GetFields()["bytes"].GetNumberValue() != float64(len(content)) ||
		res.GetOutput().GetFields()["blob_url"].GetStringValue() != "file://"+input {
		t.Errorf("raster_validate RESULT = %v", res)
	}
	res = w.result(t, rasterJob, "process_fa")
	if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || res.GetOutput().GetFields()["pipeline"].GetStringValue() != "fa" ||
		len(res.GetArtifacts()) != 3 || res.GetArtifacts()[0].GetName() != "manifest" || res.GetArtifacts()[2].GetName() != "output" {
		t.Errorf("raster_cog_fa RESULT = %v", res)
	}
	if manifest, err := os.ReadFile(filepath.Join(w.dir, "final", "cog.json")); err != nil || !strings.Contains(string(manifest), `"pipeline": "fa"`) {
		t.Errorf("final output cog.json = %s, %v", manifest, err)
	}
	res = w.result(t, tilesJob, "plan")
	if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || len(res.GetOutput().GetFields()["tiles"].GetListValue().GetValues()) != 4 {
		t.Errorf("tiles_plan RESULT = %v", res)
	}
	res = w.result(t, tilesJob, "stray")
	if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_FAILED || res.GetFailureClass() != luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE ||
		!strings.HasPrefix(res.GetReason(), `UNKNOWN_HANDLER: handler "raster_validate" is not served by service "tiles"`) {
		t.Errorf("stray RESULT = %v", res)
	}

	var rows int
	if err := w.pool.QueryRow(ctx, `SELECT count(DISTINCT service) FROM worker_executions WHERE finished_at IS NOT NULL`).Scan(&rows); err != nil || rows != 2 {
		t.Errorf("services in worker_executions = %d (%v), want 2", rows, err)
	}
	wants := []string{
		`lucius_worker_directives_total{outcome="succeeded",service="raster"} 2`,
		`lucius_worker_directives_total{outcome="succeeded",service="tiles"} 1`,
		`lucius_worker_directives_total{outcome="failed",service="tiles"} 1`,
	}
	m := w.metrics(t, wants...)
	for _, want := range wants {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, m)
		}
	}
	w.stop(t)
	if out := w.output.String(); !strings.Contains(out, "runner=raster") || !strings.Contains(out, "runner=tiles") {
		t.Errorf("the runners' logs do not name their service:\n%s", out)
	}
}

func waitFor(t *testing.T, output *syncBuffer, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; worker output:\n%s", what, output.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func grep(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
