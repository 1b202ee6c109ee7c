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
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/freeport"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/pgbus"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// The binary migrates its database itself: test databases start empty.
func TestMain(m *testing.M) { pgtest.Main(m) }

func TestReadSettings(t *testing.T) {
	t.Parallel()
	tokenFile := authtest.New(t).TokenFile(t, authtest.Worker("ocr"))
	base := map[string]string{"DATABASE_URL": "postgres://localhost/lucius", "LUCIUS_WORKER_SERVICE": "ocr",
		"LUCIUS_AUTH_TOKEN_FILE": tokenFile}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		wantErr  string
		services string // on success, the services to run, comma-joined; default the variable itself
	}{
		{"minimal", base, "", ""},
		{"every setting", with("LUCIUS_TOPOLOGY", "one-topic-set", "LUCIUS_WORKER_CONCURRENCY", "16", "LUCIUS_WORKER_NOOP", "true",
			"LUCIUS_INSTANCE", "worker-ocr-1", "LUCIUS_WORKER_HTTP_ADDR", "127.0.0.1:0", "LUCIUS_LOG_LEVEL", "debug",
			"LUCIUS_WORKER_DELAY", "1200ms", "LUCIUS_WORKER_FAULTS", "true"), "", ""},
		{"bad faults", with("LUCIUS_WORKER_FAULTS", "sometimes"), "want true or false", ""},
		{"negative delay", with("LUCIUS_WORKER_DELAY", "-1s"), "execution delay -1s is negative", ""},
		{"noop runs any service", with("LUCIUS_WORKER_SERVICE", "geo", "LUCIUS_WORKER_NOOP", "1"), "", ""},
		{"unknown service", with("LUCIUS_WORKER_SERVICE", "geo"), `names "geo": want one of demo, embedding, ocr, phased, raster, sis, tiles`, ""},
		{"raster", with("LUCIUS_WORKER_SERVICE", "raster"), "", ""},
		{"tiles", with("LUCIUS_WORKER_SERVICE", "tiles"), "", ""},
		{"several services", with("LUCIUS_WORKER_SERVICE", "raster,tiles"), "", "raster,tiles"},
		{"a list with spaces and empty items", with("LUCIUS_WORKER_SERVICE", " raster , ,tiles,ocr, "), "", "raster,tiles,ocr"},
		{"a service listed twice", with("LUCIUS_WORKER_SERVICE", "raster,tiles,raster"), `"raster" is listed twice`, ""},
		{"an unknown service in a list", with("LUCIUS_WORKER_SERVICE", "raster,geo"), `names "geo": want one of`, ""},
		{"only commas", with("LUCIUS_WORKER_SERVICE", ", ,"), "LUCIUS_WORKER_SERVICE names no service", ""},
		{"noop runs any list", with("LUCIUS_WORKER_SERVICE", "geo,hydro", "LUCIUS_WORKER_NOOP", "true"), "", "geo,hydro"},
		{"a bad name in a noop list", with("LUCIUS_WORKER_SERVICE", "geo,Hydro!", "LUCIUS_WORKER_NOOP", "true"), `service "Hydro!": want lowercase letters`, ""},
		{"missing database", map[string]string{"LUCIUS_WORKER_SERVICE": "ocr", "LUCIUS_AUTH_TOKEN_FILE": tokenFile}, "DATABASE_URL is required", ""},
		{"missing service", map[string]string{"DATABASE_URL": "x", "LUCIUS_AUTH_TOKEN_FILE": tokenFile}, "LUCIUS_WORKER_SERVICE is required", ""},
		{"no callback credentials", map[string]string{"DATABASE_URL": "x", "LUCIUS_WORKER_SERVICE": "ocr"}, "LUCIUS_AUTH_TOKEN_FILE or LUCIUS_CALLBACK_TLS_CERT_FILE is required", ""},
		{"missing token file", with("LUCIUS_AUTH_TOKEN_FILE", "/nonexistent/token"), "token file", ""},
		{"bad concurrency", with("LUCIUS_WORKER_CONCURRENCY", "many"), "want an integer", ""},
		{"file roots", with("LUCIUS_FILE_ROOTS", "/srv/in: /srv/out :"), "", ""},
		{"a relative file root", with("LUCIUS_FILE_ROOTS", "/srv/in:data"), `file root "data" is not an absolute path`, ""},
		{"the whole filesystem as a file root", with("LUCIUS_FILE_ROOTS", "/"), `file root "/" would allow every file`, ""},
		{"negative concurrency", with("LUCIUS_WORKER_CONCURRENCY", "-2"), "concurrency -2 is negative", ""},
		{"prefetch", with("LUCIUS_WORKER_PREFETCH", "16"), "", ""},
		{"prefetch over the limit", with("LUCIUS_WORKER_PREFETCH", "1000"), "prefetch 1000: want 1-256", ""},
		{"negative prefetch", with("LUCIUS_WORKER_PREFETCH", "-1"), "prefetch -1: want 1-256", ""},
		{"negative concurrency, several services", with("LUCIUS_WORKER_SERVICE", "raster,tiles", "LUCIUS_WORKER_CONCURRENCY", "-2"),
			"concurrency -2 is negative", ""},
		{"bad topology", with("LUCIUS_TOPOLOGY", "mesh"), "unknown topology", ""},
		{"bad noop", with("LUCIUS_WORKER_NOOP", "maybe"), "want true or false", ""},
		{"postgres bus", with("LUCIUS_BUS", "postgres", "LUCIUS_BUS_POLL_INTERVAL", "200ms"), "", ""},
		{"bad bus poll interval", with("LUCIUS_BUS_POLL_INTERVAL", "often"), "want a duration", ""},
		{"unknown bus", with("LUCIUS_BUS", "kafka"), "want postgres or servicebus", ""},
		{"service bus", with("LUCIUS_BUS", "servicebus", "LUCIUS_SERVICEBUS_NAMESPACE", "lucius.servicebus.windows.net"), "", ""},
		{"service bus without a namespace", with("LUCIUS_BUS", "servicebus"), "set LUCIUS_SERVICEBUS_CONNECTION_STRING or LUCIUS_SERVICEBUS_NAMESPACE", ""},
		{"azurite", with("LUCIUS_BLOB_ENDPOINTS", "devstoreaccount1=http://127.0.0.1:10000/devstoreaccount1", "LUCIUS_BLOB_CREDENTIAL", "shared-key",
			"LUCIUS_BLOB_ACCOUNT_KEYS", "devstoreaccount1=a2V5", "LUCIUS_BLOB_BLOCK_SIZE", "8388608", "LUCIUS_EGRESS_ALLOW", "10.20.0.0/16",
			"LUCIUS_WORKER_INLINE_OUTPUT_BYTES", "65536"), "", ""},
		{"workload identity", with("LUCIUS_BLOB_CREDENTIAL", "workload-identity"), "", ""},
		{"unknown blob credential", with("LUCIUS_BLOB_CREDENTIAL", "password"), `credential mode "password"`, ""},
		{"account keys without shared-key", with("LUCIUS_BLOB_ACCOUNT_KEYS", "acct01=a2V5"), "account keys are set", ""},
		{"a malformed endpoint list", with("LUCIUS_BLOB_ENDPOINTS", "acct01"), "LUCIUS_BLOB_ENDPOINTS: item 1: want account=value", ""},
		{"an endpoint that is not a URL", with("LUCIUS_BLOB_ENDPOINTS", "acct01=ftp://x"), "endpoint of acct01", ""},
		{"a small block size", with("LUCIUS_BLOB_BLOCK_SIZE", "1024"), "block size 1024", ""},
		{"a bad egress allowlist", with("LUCIUS_EGRESS_ALLOW", "intranet"), "LUCIUS_EGRESS_ALLOW", ""},
		{"a negative inline output limit", with("LUCIUS_WORKER_INLINE_OUTPUT_BYTES", "-1"), "inline output limit -1 is negative", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := readSettings(env.FromMap(tc.env))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				want := tc.services
				if want == "" {
					want = tc.env["LUCIUS_WORKER_SERVICE"]
				}
				if strings.Join(s.services, ",") != want || s.runner.Service != "" || s.httpAddr == "" {
					t.Errorf("settings = %+v, want services %s", s, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if n := strings.Count(err.Error(), tc.wantErr); n != 1 {
				t.Errorf("err reports %q %d times:\n%v", tc.wantErr, n, err)
			}
		})
	}
	s, _ := readSettings(env.FromMap(base))
	if s.httpAddr != "127.0.0.1:8090" || s.runner.Concurrency != 4 || s.runner.NoOp || s.runner.Faults || s.runner.Topology != routing.TopologyTwoTopicSets ||
		len(s.services) != 1 || s.services[0] != "ocr" || s.telemetry.Service != "worker-ocr" {
		t.Errorf("defaults = %+v", s)
	}
	if s.runner.Azure.Credential != blob.CredentialDefault || len(s.runner.Azure.Endpoints) != 0 || s.runner.InlineOutputLimit != worker.DefaultInlineOutputLimit ||
		len(s.runner.Egress.Allow) != 0 {
		t.Errorf("blob defaults = %+v, inline limit %d, egress %v", s.runner.Azure, s.runner.InlineOutputLimit, s.runner.Egress)
	}
	s, _ = readSettings(env.FromMap(with("LUCIUS_BLOB_ENDPOINTS", "devstoreaccount1=http://127.0.0.1:10000/devstoreaccount1",
		"LUCIUS_BLOB_CREDENTIAL", "shared-key", "LUCIUS_BLOB_ACCOUNT_KEYS", "devstoreaccount1=a2V5", "LUCIUS_EGRESS_ALLOW", "10.20.0.0/16")))
	if s.runner.Azure.Endpoints["devstoreaccount1"] != "http://127.0.0.1:10000/devstoreaccount1" || s.runner.Azure.AccountKeys["devstoreaccount1"] != "a2V5" ||
		s.runner.Azure.Credential != blob.CredentialSharedKey || len(s.runner.Egress.Allow) != 1 {
		t.Errorf("blob settings = %+v, egress %v", s.runner.Azure, s.runner.Egress)
	}
	if s, _ = readSettings(env.FromMap(with("LUCIUS_WORKER_FAULTS", "true"))); !s.runner.Faults {
		t.Error("LUCIUS_WORKER_FAULTS=true did not enable fault injection")
	}
	s, _ = readSettings(env.FromMap(with("LUCIUS_WORKER_SERVICE", "raster,tiles")))
	if s.telemetry.Service != "worker-raster-tiles" {
		t.Errorf("telemetry service = %q, want worker-raster-tiles", s.telemetry.Service)
	}
}

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

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr() // below the ephemeral range: no client connection takes it meanwhile
	if err != nil {
		t.Fatal(err)
	}
	return addr
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
	w := &workerProcess{dir: dir, dbURL: pgtest.NewDB(t), httpAddr: freeAddr(t), orch: &resultRecorder{}, output: &syncBuffer{}}

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
	if err := w.cmd.Start(); err != nil {
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

// The worker's database holds its idempotency store in any case, and the
// bus's tables only with the PostgreSQL bus: with Service Bus (here a stand-in
// opened through the adapter's hook) the bus needs nothing of the database.
func TestOpenBackendsPutsTheBusInTheDatabaseOnlyForPostgres(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		bus       busconfig.Config
		busTables bool
	}{
		{"postgres", busconfig.Config{Transport: busconfig.Postgres}, true},
		{"service bus", busconfig.Config{Transport: busconfig.ServiceBus,
			ServiceBus: busconfig.ServiceBusConfig{Namespace: "lucius.servicebus.windows.net"},
			OpenServiceBus: func(context.Context, busconfig.ServiceBusConfig) (bus.Bus, error) {
				return serviceBusStandIn{}, nil
			}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := settings{databaseURL: pgtest.NewDB(t), maxConns: 4, bus: tt.bus}
			pool, b, err := openBackends(ctx, s, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			defer b.Close(context.Background()) //nolint:errcheck
			if _, standIn := b.(serviceBusStandIn); standIn == tt.busTables {
				t.Fatalf("opened %T", b)
			}
			var busTables, workerTables bool
			err = pool.QueryRow(ctx, `SELECT to_regclass('bus_messages') IS NOT NULL,
				EXISTS (SELECT FROM pg_tables WHERE tablename LIKE 'worker%')`).Scan(&busTables, &workerTables)
			if err != nil {
				t.Fatal(err)
			}
			if busTables != tt.busTables || !workerTables {
				t.Errorf("bus tables %v, worker tables %v; want %v, true", busTables, workerTables, tt.busTables)
			}
		})
	}
}

// serviceBusStandIn is a bus that is not in the database.
type serviceBusStandIn struct{ bus.Bus }

func (serviceBusStandIn) Close(context.Context) error { return nil }

func (serviceBusStandIn) TxPublisher() bus.TxPublisher { return nil }
