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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/bus"
	"github.com/lucius-platform/lucius/core/bus/pgbus"
	"github.com/lucius-platform/lucius/core/env"
	"github.com/lucius-platform/lucius/core/pgtest"
	"github.com/lucius-platform/lucius/core/routing"
	"github.com/lucius-platform/lucius/core/server"
	"github.com/lucius-platform/lucius/core/topology"
)

// The binary migrates its database itself: test databases start empty.
func TestMain(m *testing.M) { pgtest.Main(m) }

func TestReadSettings(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://localhost/lucius", "LUCIUS_WORKER_SERVICE": "ocr"}
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
		name    string
		env     map[string]string
		wantErr string
	}{
		{"minimal", base, ""},
		{"every setting", with("LUCIUS_TOPOLOGY", "one-topic-set", "LUCIUS_WORKER_CONCURRENCY", "16", "LUCIUS_WORKER_NOOP", "true",
			"LUCIUS_INSTANCE", "worker-ocr-1", "LUCIUS_WORKER_HTTP_ADDR", "127.0.0.1:0", "LUCIUS_LOG_LEVEL", "debug",
			"LUCIUS_WORKER_DELAY", "1200ms"), ""},
		{"negative delay", with("LUCIUS_WORKER_DELAY", "-1s"), "execution delay -1s is negative"},
		{"noop runs any service", with("LUCIUS_WORKER_SERVICE", "geo", "LUCIUS_WORKER_NOOP", "1"), ""},
		{"unknown service", with("LUCIUS_WORKER_SERVICE", "geo"), "want one of embedding, ocr, sis"},
		{"missing database", map[string]string{"LUCIUS_WORKER_SERVICE": "ocr"}, "DATABASE_URL is required"},
		{"missing service", map[string]string{"DATABASE_URL": "x"}, "LUCIUS_WORKER_SERVICE is required"},
		{"bad concurrency", with("LUCIUS_WORKER_CONCURRENCY", "many"), "want an integer"},
		{"negative concurrency", with("LUCIUS_WORKER_CONCURRENCY", "-2"), "concurrency -2 is negative"},
		{"bad topology", with("LUCIUS_TOPOLOGY", "mesh"), "unknown topology"},
		{"bad noop", with("LUCIUS_WORKER_NOOP", "maybe"), "want true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := readSettings(env.FromMap(tc.env))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if s.runner.Service != tc.env["LUCIUS_WORKER_SERVICE"] || s.httpAddr == "" {
					t.Errorf("settings = %+v", s)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	s, _ := readSettings(env.FromMap(base))
	if s.httpAddr != "127.0.0.1:8090" || s.runner.Concurrency != 4 || s.runner.NoOp || s.runner.Topology != routing.TopologyTwoTopicSets {
		t.Errorf("defaults = %+v", s)
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestBinaryRunsOCRDirectiveAndStopsOnSIGTERM starts the real binary on a
// fresh database and drives one OCR directive through it.
func TestBinaryRunsOCRDirectiveAndStopsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binary")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "worker")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbURL := pgtest.NewDB(t)

	orch := &resultRecorder{}
	grpcSrv, _, err := server.NewGRPC(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	luciusv1.RegisterCallbackServiceServer(grpcSrv, orch)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go grpcSrv.Serve(ln) //nolint:errcheck
	t.Cleanup(grpcSrv.Stop)

	httpAddr := freeAddr(t)
	var output syncBuffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "LUCIUS_WORKER_SERVICE=ocr", "LUCIUS_WORKER_HTTP_ADDR="+httpAddr,
		"LUCIUS_INSTANCE=worker-ocr-e2e", "LUCIUS_LOG_FORMAT=text", "LUCIUS_BUS_POLL_INTERVAL=200ms")
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill() //nolint:errcheck
			<-exited
		}
	})
	waitFor(t, &output, "readiness", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// Publish a directive as the orchestrator's outbox would.
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b, err := pgbus.New(ctx, pool, pgbus.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx) //nolint:errcheck
	input := filepath.Join(dir, "scan.txt")
	os.WriteFile(input, []byte("scanned page one\nscanned page two\n"), 0o644)
	id := make([]byte, 32)
	rand.Read(id)
	jobID := hex.EncodeToString(id)
	d := &luciusv1.Directive{JobId: jobID, TenantId: "acme", StepId: "ocr", StepType: "OCR", Service: "ocr", AttemptNo: 1,
		LeaseId: uuid.NewString(), InputRef: "file://" + input, WorkspaceRef: "file://" + dir + "/lucius/acme/" + jobID + "/",
		OutputRef: "file://" + dir + "/final/", FinalStep: true,
		CallbackUrls: &luciusv1.CallbackEndpoints{GrpcTarget: "ipv4:" + ln.Addr().String()}}
	body, _ := protojson.Marshal(d)
	topic := routing.Topic(routing.TopologyTwoTopicSets, routing.ModeDefault, routing.Partition("acme"))
	sender, err := b.NewSender(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.Send(ctx, bus.Message{ID: "directive/" + jobID + "/ocr/1", Body: body, ContentType: "application/json",
		Properties: map[string]string{topology.PropertyService: "ocr", "lane": "default"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &output, "RESULT", func() bool { return len(orch.get()) == 1 })
	res := orch.get()[0]
	if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || res.GetWorkerId() != "worker-ocr-e2e" ||
		res.GetOutput().GetFields()["lines"].GetNumberValue() != 2 {
		t.Errorf("RESULT = %v", res)
	}
	for _, p := range []string{filepath.Join(dir, "lucius", "acme", jobID, "ocr", "1", "output.txt"), filepath.Join(dir, "final", "output.txt")} {
		if got, err := os.ReadFile(p); err != nil || string(got) != "scanned page one\nscanned page two\n" {
			t.Errorf("%s = %q, %v", p, got, err)
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM worker_executions WHERE job_id = $1 AND finished_at IS NOT NULL`, jobID).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("finished worker_executions rows = %d (%v), want 1", rows, err)
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `lucius_worker_directives_total{outcome="succeeded",service="ocr"} 1`) {
		t.Errorf("/metrics lacks the handled directive:\n%s", grep(string(metrics), "lucius_worker"))
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, output.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit within 20s of SIGTERM\n%s", output.String())
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
