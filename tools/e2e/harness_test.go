// Package e2e runs user-visible flows against the real binaries: a PostgreSQL
// server (DATABASE_URL or a private cluster), the gateway, reconciler,
// scheduler, two orchestrators and the OCR/EMBEDDING/SIS workers, talking gRPC,
// REST and the PostgreSQL bus.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/tools/stack"
)

var binDir string

// e2eBus is the transport the suites run on: LUCIUS_E2E_BUS, "postgres"
// (default) or "servicebus" (each stack then starts its own Service Bus test
// broker). `make test` runs the package once on each.
var e2eBus = os.Getenv("LUCIUS_E2E_BUS")

func TestMain(m *testing.M) {
	binDir = os.Getenv("LUCIUS_BIN_DIR")
	if binDir == "" {
		dir, err := os.MkdirTemp("", "lucius-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
		root, err := filepath.Abs("../..")
		if err == nil {
			err = stack.Build(context.Background(), root, dir)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: build:", err)
			os.Exit(1)
		}
		binDir = dir
	}
	pgtest.Main(m)
}

// manualWorkflow is a one-step workflow whose handler no worker serves, so a
// test can play the worker itself and hold a step in flight.
const manualWorkflow = `workflow_id: E2E_MANUAL
version: 1
description: One step that the test answers itself.
nodes:
  START: {type: start, next: manual}
  manual: {type: task, handler: MANUAL, ack_timeout_seconds: 300, next: END}
  END: {type: end}
`

const manualHandlers = "handlers:\n  - {name: MANUAL, service: manual}\n  - {name: E2E_WATCH, service: demo}\n  - {name: PHASED, service: phased}\n"

// polledWorkflow is one task of the demo pool (its payload's outcome says
// how it answers: poll:N, poll) polled every second for up to 4 s.
const polledWorkflow = `workflow_id: E2E_POLLED
version: 1
description: A task polled on a schedule.
inputs:
  outcome: {type: string, required: true}
nodes:
  START: {type: start, next: watch}
  watch:
    type: task
    handler: E2E_WATCH
    params: {outcome: "{{ inputs.outcome }}"}
    poll_interval: 1
    poll_timeout: 4
    retry: {max_attempts: 1}
    next: END
  END: {type: end}
`

// flakyWorkflow is a manual step with short timeouts and two attempts, so
// the sweepers' retries and dead letters show within seconds.
const flakyWorkflow = `workflow_id: E2E_FLAKY
version: 1
description: One manual step with 1s ACK and 2s execution timeouts.
nodes:
  START: {type: start, next: manual}
  manual:
    type: task
    handler: MANUAL
    ack_timeout_seconds: 1
    timeout_seconds: 2
    retry: {max_attempts: 2, backoff: fixed, initial_delay_seconds: 1}
    next: END
  END: {type: end}
`

// slowOCRWorkflow runs the OCR worker with a 2s execution lease and passes
// a fault (a sleep) through to it: only heartbeats keep the attempt alive.
const slowOCRWorkflow = `workflow_id: E2E_SLOW_OCR
version: 1
description: OCR with a 2s lease and an injected fault.
inputs:
  fault: {type: object}
nodes:
  START: {type: start, next: ocr}
  ocr: {type: task, handler: OCR, timeout_seconds: 2, params: {fault: "{{ inputs.fault }}"}, next: END}
  END: {type: end}
`

// suite is a running stack plus clients.
type suite struct {
	*stack.Stack
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	conn   *grpc.ClientConn
	cmds   luciusv1.CommandServiceClient
	jobs   luciusv1.JobServiceClient
	httpc  *http.Client
	logs   *stack.LogBuffer
	inputs string
	// operator is the token of the suite's own clients (conn, rest).
	operator string
}

type suiteOptions struct {
	env        map[string]string
	processEnv map[string]map[string]string
	// azurite starts the Azure Storage emulator for az:// refs (Stack.Azurite).
	azurite bool
	// workers replaces the stack's default worker processes (stack.Config.Workers).
	workers []string
}

func startSuite(t *testing.T, opts suiteOptions) *suite {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "lucius-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	workflows := filepath.Join(dir, "workflows")
	if err := os.MkdirAll(workflows, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"E2E_MANUAL.yaml": manualWorkflow, "E2E_FLAKY.yaml": flakyWorkflow,
		"E2E_SLOW_OCR.yaml": slowOCRWorkflow, "E2E_POLLED.yaml": polledWorkflow, "E2E_PHASED.yaml": phasedWorkflow,
		"E2E_PHASED_SHORT_LEASE.yaml": phasedShortLeaseWorkflow, "handlers.yaml": manualHandlers} {
		if err := os.WriteFile(filepath.Join(workflows, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Webhook receivers are httptest servers on 127.0.0.1: allowlisted, and
	// nothing else internal.
	env := map[string]string{"LUCIUS_WORKFLOWS_DIR": workflows, "LUCIUS_LOG_LEVEL": "debug", "LUCIUS_EGRESS_ALLOW": "127.0.0.1/32"}
	for k, v := range opts.env {
		env[k] = v
	}
	logs := &stack.LogBuffer{}
	s, err := stack.Start(ctx, stack.Config{BinDir: binDir, DataDir: dir, DatabaseURL: pgtest.NewDB(t), FreePorts: true,
		FileRoots: []string{filepath.Join(dir, "inputs")}, Env: env, ProcessEnv: opts.processEnv, Output: logs, Bus: e2eBus,
		Azurite: opts.azurite, Workers: opts.workers})
	if err != nil {
		t.Logf("suite logs:\n%s", logs.Tail(200))
		t.Fatal(err)
	}
	su := &suite{Stack: s, t: t, ctx: ctx, logs: logs, httpc: &http.Client{Timeout: 10 * time.Second}, inputs: filepath.Join(dir, "inputs")}
	t.Cleanup(func() {
		s.Stop(context.Background())
		if t.Failed() {
			t.Logf("suite logs (last 300 lines):\n%s", logs.Tail(300))
		}
		os.RemoveAll(dir)
	})
	if err := os.MkdirAll(su.inputs, 0o755); err != nil {
		t.Fatal(err)
	}
	if su.pool, err = pgxpool.New(ctx, s.URL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(su.pool.Close)
	if su.operator, err = s.OperatorToken(); err != nil {
		t.Fatal(err)
	}
	if su.conn, err = server.Dial(s.Endpoints.GatewayGRPC, grpc.WithPerRPCCredentials(auth.BearerToken(su.operator))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { su.conn.Close() })
	su.cmds, su.jobs = luciusv1.NewCommandServiceClient(su.conn), luciusv1.NewJobServiceClient(su.conn)
	return su
}

// input writes a text file for a job to read and returns its file:// URL.
func (s *suite) input(name, text string) string {
	s.t.Helper()
	p := filepath.Join(s.inputs, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		s.t.Fatal(err)
	}
	return "file://" + p
}

// output returns a file:// URL for a job's final result, and its path.
func (s *suite) output(name string) (string, string) {
	p := filepath.Join(s.inputs, "out", name)
	return "file://" + p, p
}

// waitJob polls until the job is terminal.
func (s *suite) waitJob(jobID string, timeout time.Duration) *luciusv1.Job {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := s.jobs.GetJob(s.ctx, &luciusv1.GetJobRequest{JobId: jobID})
		if err == nil && terminal(resp.GetJob().GetStatus()) {
			return resp.GetJob()
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s not terminal after %s (last: %v, %v)", jobID, timeout, resp.GetJob().GetStatus(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func terminal(s luciusv1.JobStatus) bool {
	return s == luciusv1.JobStatus_JOB_STATUS_SUCCEEDED || s == luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL ||
		s == luciusv1.JobStatus_JOB_STATUS_CANCELLED
}

// rest calls the gateway's REST API as an operator and decodes the JSON answer.
func (s *suite) rest(method, path string, body any) (int, map[string]any) {
	s.t.Helper()
	code, _, out := s.restAs(s.operator, method, path, body)
	return code, out
}

// restAs calls the gateway's REST API with token (none when empty).
func (s *suite) restAs(token, method, path string, body any) (int, http.Header, map[string]any) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+s.Endpoints.GatewayHTTP+path, r)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.httpc.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header, out
}

// token mints a token from the suite's issuer.
func (s *suite) token(g auth.Grant) string {
	s.t.Helper()
	tok, err := s.Token(g)
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// partner is a partner token of tenants.
func (s *suite) partner(tenants ...string) string {
	return s.token(auth.Grant{Subject: "e2e-partner", Roles: []auth.Role{auth.RolePartner}, Tenants: tenants})
}

// callbacks is a CallbackService client of orchestrator i calling as a
// worker of services.
func (s *suite) callbacks(i int, services ...string) luciusv1.CallbackServiceClient {
	s.t.Helper()
	tok := s.token(auth.Grant{Subject: "e2e-worker", Roles: []auth.Role{auth.RoleWorker}, Services: services})
	conn, err := server.Dial(s.Endpoints.Orchestrator[i], grpc.WithPerRPCCredentials(auth.BearerToken(tok)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return luciusv1.NewCallbackServiceClient(conn)
}

// callbackToken reads the callback token of an attempt's directive from the
// outbox, as the worker receiving it would.
func (s *suite) callbackToken(jobID, stepID string, attempt int32) string {
	s.t.Helper()
	var body []byte
	if err := s.pool.QueryRow(s.ctx, `SELECT body FROM outbox WHERE message_id = $1`,
		fmt.Sprintf("directive/%s/%s/%d", jobID, stepID, attempt)).Scan(&body); err != nil {
		s.t.Fatalf("directive of %s/%s#%d: %v", jobID, stepID, attempt, err)
	}
	d := &luciusv1.Directive{}
	if err := protojson.Unmarshal(body, d); err != nil || d.GetCallbackToken() == "" {
		s.t.Fatalf("directive of %s/%s#%d has no callback token (%v)", jobID, stepID, attempt, err)
	}
	return d.GetCallbackToken()
}

// metrics scrapes a process's /metrics as an operator.
func (s *suite) metrics(addr string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.operator)
	return s.httpc.Do(req)
}

func (s *suite) count(query string, args ...any) int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(s.ctx, query, args...).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}
