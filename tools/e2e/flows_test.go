package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

const sampleText = `Lucius orchestrates multi-step work for partner teams.
Invoices are due within thirty days of receipt.
The warehouse in Rotterdam ships pallets every Tuesday.
`

func TestOCREmbeddingSISReachesSucceededOverRESTAndGRPC(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	prompts := []any{"when are invoices due?", "where is the warehouse?"}

	outREST, outRESTPath := s.output("rest.json")
	code, body := s.rest("POST", "/v1/commands", map[string]any{
		"tenant_id": "acme", "request_type": "OCR_EMBEDDING_SIS", "schema_version": "1",
		"input_ref": s.input("rest.txt", sampleText), "output_ref": outREST,
		"payload": map[string]any{"prompt_set": prompts, "chunk_size": 60}, "correlation_id": "e2e-rest"})
	if code != http.StatusAccepted {
		t.Fatalf("REST submit answered %d: %v", code, body)
	}
	restID := body["job_id"].(string)

	outGRPC, outGRPCPath := s.output("grpc.json")
	payload, _ := structpb.NewStruct(map[string]any{"prompt_set": prompts})
	resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "globex",
		RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1", InputRef: s.input("grpc.txt", sampleText),
		OutputRef: outGRPC, Payload: payload, CorrelationId: "e2e-grpc"}})
	if err != nil {
		t.Fatalf("gRPC submit: %v", err)
	}

	for _, c := range []struct{ id, outPath, correlation string }{{restID, outRESTPath, "e2e-rest"}, {resp.GetJobId(), outGRPCPath, "e2e-grpc"}} {
		job := s.waitJob(c.id, 60*time.Second)
		if job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
			t.Fatalf("job %s ended %s: %s", c.id, job.GetStatus(), job.GetReason())
		}
		if job.GetResultRef() == "" || !strings.HasPrefix(job.GetRouting().GetTopic(), "global-default-p") {
			t.Fatalf("job %s: result_ref %q routing %+v", c.id, job.GetResultRef(), job.GetRouting())
		}
		steps, err := s.jobs.ListJobSteps(s.ctx, &luciusv1.ListJobStepsRequest{JobId: c.id})
		if err != nil {
			t.Fatal(err)
		}
		if len(steps.GetSteps()) != 3 {
			t.Fatalf("job %s has %d steps", c.id, len(steps.GetSteps()))
		}
		for i, want := range []string{"OCR", "EMBEDDING", "SIS"} {
			st := steps.GetSteps()[i]
			if st.GetStepType() != want || st.GetStatus() != luciusv1.StepStatus_STEP_STATUS_SUCCEEDED || len(st.GetArtifacts()) == 0 {
				t.Fatalf("step %d: %s %s with %d artifacts", i, st.GetStepType(), st.GetStatus(), len(st.GetArtifacts()))
			}
			for _, a := range st.GetArtifacts() {
				p := filePath(t, a.GetUri())
				if a.GetUri() == job.GetOutputRef() {
					continue // the final result, written to output_ref by the last step
				}
				if !strings.Contains(p, "/lucius/") || !strings.Contains(p, "/"+strings.ToLower(want)+"/1/") {
					t.Fatalf("artifact %s is outside the workspace layout", p)
				}
				if _, err := os.Stat(p); err != nil {
					t.Fatalf("artifact %s: %v", p, err)
				}
			}
		}
		ocr, err := os.ReadFile(filePath(t, steps.GetSteps()[0].GetArtifacts()[0].GetUri()))
		if err != nil || string(ocr) != sampleText {
			t.Fatalf("OCR output %q (%v) is not the input text", ocr, err)
		}
		final, err := os.ReadFile(c.outPath)
		if err != nil {
			t.Fatalf("final result at output_ref: %v", err)
		}
		var result any
		if err := json.Unmarshal(final, &result); err != nil || !strings.Contains(string(final), "invoices") {
			t.Fatalf("final result is not the SIS answer: %s", final)
		}
		events, err := s.jobs.ListJobEvents(s.ctx, &luciusv1.ListJobEventsRequest{JobId: c.id})
		if err != nil {
			t.Fatal(err)
		}
		assertTrail(t, events.GetEvents())
		assertOneTrace(t, s, c.id)
		// The correlation id went out with each directive and came back with
		// the worker's callbacks onto the transitions they caused.
		if n := s.count(`SELECT count(DISTINCT step_id) FROM job_events WHERE job_id = $1 AND to_status = 'SUCCEEDED'
			AND step_id IN ('ocr', 'embedding', 'sis') AND data->>'correlation_id' = $2`, c.id, c.correlation); n != 3 {
			t.Fatalf("%d of 3 steps' RESULT transitions carry correlation id %s", n, c.correlation)
		}
	}
	assertMetrics(t, s)
}

// assertOneTrace checks the job's trace context travelled with it: the
// gateway's accept, the orchestrator's job creation and every worker step log
// the same trace id (across REST/gRPC, the outbox and the bus).
func assertOneTrace(t *testing.T, s *suite, jobID string) {
	t.Helper()
	traces := map[string]map[string]bool{} // process → trace ids on lines about the job
	for _, line := range strings.Split(s.logs.Tail(100000), "\n") {
		if !strings.Contains(line, "job_id="+jobID) {
			continue
		}
		process, _, _ := strings.Cut(line, " |")
		for _, field := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(field, "trace_id="); ok {
				process = strings.TrimSpace(process)
				if traces[process] == nil {
					traces[process] = map[string]bool{}
				}
				traces[process][id] = true
			}
		}
	}
	all := map[string]bool{}
	for _, ids := range traces {
		for id := range ids {
			all[id] = true
		}
	}
	for _, p := range []string{"gateway", "worker-ocr", "worker-embedding", "worker-sis"} {
		if len(traces[p]) == 0 {
			t.Fatalf("no traced log line about job %s from %s (traces: %v)", jobID, p, traces)
		}
	}
	if len(all) != 1 {
		t.Fatalf("job %s spans %d traces, want one: %v", jobID, len(all), traces)
	}
}

// assertMetrics checks the services export their counters.
func assertMetrics(t *testing.T, s *suite) {
	t.Helper()
	for addr, metric := range map[string]string{
		s.Endpoints.GatewayHTTP: "lucius_gateway_submits_total",
		s.Endpoints.OrchHTTP[0]: "lucius_callbacks_total",
		s.Endpoints.Reconciler:  "lucius_outbox_published_total",
	} {
		resp, err := s.metrics(addr)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), metric) {
			t.Fatalf("%s/metrics lacks %s", addr, metric)
		}
	}
}

// assertTrail checks the audit trail tells the whole story and no terminal state changed.
func assertTrail(t *testing.T, events []*luciusv1.JobEvent) {
	t.Helper()
	seen := map[string]bool{}
	for _, e := range events {
		seen[e.GetType()+":"+e.GetToStatus()] = true
		if e.GetType() == "JOB_STATUS_CHANGED" && terminalName(e.GetFromStatus()) {
			t.Fatalf("job left terminal state: %+v", e)
		}
		if e.GetType() == "STEP_STATUS_CHANGED" && stepTerminalName(e.GetFromStatus()) {
			t.Fatalf("step left terminal state: %+v", e)
		}
	}
	for _, want := range []string{"JOB_ACCEPTED:RECEIVED", "JOB_CREATED:QUEUED", "STEP_STATUS_CHANGED:DISPATCHING",
		"STEP_STATUS_CHANGED:IN_PROGRESS", "STEP_STATUS_CHANGED:SUCCEEDED", "JOB_STATUS_CHANGED:SUCCEEDED"} {
		if !seen[want] {
			t.Fatalf("event trail lacks %s: %v", want, seen)
		}
	}
}

func terminalName(s string) bool { return s == "SUCCEEDED" || s == "FAILED_FINAL" || s == "CANCELLED" }

func stepTerminalName(s string) bool {
	return terminalName(s) || s == "SKIPPED" || s == "ROLLED_BACK"
}

func filePath(t *testing.T, uri string) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" {
		t.Fatalf("artifact uri %q is not a file URL", uri)
	}
	return u.Path
}

func TestSameIdempotencyKeyGivesOneJobAndOneExecution(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	out, _ := s.output("idem.json")
	cmd := map[string]any{"tenant_id": "acme", "request_type": "OCR_EMBEDDING_SIS", "schema_version": "1",
		"input_ref": s.input("idem.txt", sampleText), "output_ref": out,
		"payload": map[string]any{"prompt_set": []any{"invoices"}}, "idempotency_key": "order-4711"}
	_, first := s.rest("POST", "/v1/commands", cmd)
	_, second := s.rest("POST", "/v1/commands", cmd)
	id := first["job_id"].(string)
	if second["job_id"] != id || second["duplicate"] != true {
		t.Fatalf("second submit answered %v, want job %s as a duplicate", second, id)
	}
	if job := s.waitJob(id, 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("job ended %s", job.GetStatus())
	}
	_, third := s.rest("POST", "/v1/commands", cmd) // after completion too
	if third["job_id"] != id || third["status"] != "JOB_STATUS_SUCCEEDED" {
		t.Fatalf("submit after completion answered %v", third)
	}
	if n := s.count(`SELECT count(*) FROM requests`); n != 1 {
		t.Fatalf("%d requests stored, want 1", n)
	}
	if n := s.count(`SELECT count(*) FROM worker_executions WHERE job_id = $1`, id); n != 3 {
		t.Fatalf("%d worker executions for the job, want 3 (one per step)", n)
	}
}

func TestInvalidEnvelopesAreRejectedWithoutWritingAnything(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	valid := func() map[string]any {
		return map[string]any{"tenant_id": "acme", "request_type": "SIS", "schema_version": "1",
			"input_ref": "file://" + s.inputs + "/in.txt", "output_ref": "file://" + s.inputs + "/out.json",
			"payload": map[string]any{"prompt_set": []any{"q"}}}
	}
	tests := []struct {
		name   string
		mutate func(map[string]any)
		field  string
		reason string
	}{
		{"missing tenant_id", func(b map[string]any) { delete(b, "tenant_id") }, "command.tenant_id", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT)},
		{"unknown request_type", func(b map[string]any) { b["request_type"] = "TRANSLATE" }, "command.request_type", server.Reason(luciusv1.ErrorReason_ERROR_REASON_UNKNOWN_REQUEST_TYPE)},
		{"wrong schema_version", func(b map[string]any) { b["schema_version"] = "3" }, "command.schema_version", server.Reason(luciusv1.ErrorReason_ERROR_REASON_UNSUPPORTED_SCHEMA_VERSION)},
		{"malformed input_ref", func(b map[string]any) { b["input_ref"] = "::not-a-url" }, "command.input_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT)},
		{"relative output_ref", func(b map[string]any) { b["output_ref"] = "file:relative/out.json" }, "command.output_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_REF)},
		{"SIS without prompt_set", func(b map[string]any) { b["payload"] = map[string]any{"chunk_size": 10} }, "command.payload.prompt_set", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_PAYLOAD)},
		{"input outside the file roots", func(b map[string]any) { b["input_ref"] = "file:///etc/passwd" }, "command.input_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_REF_OUTSIDE_FILE_ROOTS)},
		{"output escaping the roots", func(b map[string]any) { b["output_ref"] = "file://" + s.inputs + "/%2E%2E/pg/x" }, "command.output_ref", server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_REF)},
		{"callback at IPv6 loopback", func(b map[string]any) { b["callback_url"] = "http://[::1]:8080/hook" }, "command.callback_url", "CALLBACK_URL_FORBIDDEN"},
		{"callback at the metadata address", func(b map[string]any) { b["callback_url"] = "http://169.254.169.254/latest/meta-data/" }, "command.callback_url", "CALLBACK_URL_FORBIDDEN"},
		{"callback at a private address", func(b map[string]any) { b["callback_url"] = "https://10.0.0.1/hook" }, "command.callback_url", "CALLBACK_URL_FORBIDDEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.count(`SELECT (SELECT count(*) FROM requests) + (SELECT count(*) FROM outbox) + (SELECT count(*) FROM job_events)`)
			body := valid()
			tt.mutate(body)
			code, resp := s.rest("POST", "/v1/commands", body)
			if code != http.StatusBadRequest {
				t.Fatalf("answered %d %v, want 400", code, resp)
			}
			if !violates(resp, tt.field, tt.reason) {
				t.Fatalf("answer does not name %s (%s): %v", tt.field, tt.reason, resp)
			}
			after := s.count(`SELECT (SELECT count(*) FROM requests) + (SELECT count(*) FROM outbox) + (SELECT count(*) FROM job_events)`)
			if after != before {
				t.Fatalf("a rejected command wrote %d rows", after-before)
			}
		})
	}
	// The same over gRPC.
	_, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{RequestType: "SIS", SchemaVersion: "1",
		InputRef: "file:///a", OutputRef: "file:///b", Payload: &structpb.Struct{}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "tenant_id") {
		t.Fatalf("gRPC submit without tenant answered %v", err)
	}
}

func violates(body map[string]any, field, reason string) bool {
	details, _ := body["details"].([]any)
	for _, d := range details {
		m, _ := d.(map[string]any)
		vs, _ := m["field_violations"].([]any)
		for _, v := range vs {
			if vm, _ := v.(map[string]any); vm["field"] == field && vm["reason"] == reason {
				return true
			}
		}
	}
	return false
}

func TestForgedResultsAreRefusedRecordedAndChangeNothing(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: "acme",
		RequestType: "E2E_MANUAL", SchemaVersion: "1", InputRef: s.input("stale.txt", "x"), OutputRef: "file://" + s.inputs + "/out",
		Payload: &structpb.Struct{}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetJobId()
	step := s.waitStep(id, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK)
	lease := step.GetAttempts()[0].GetLeaseId()
	token := s.callbackToken(id, "manual", 1)
	otherKeys, err := auth.GenerateCallbackKeys()
	if err != nil {
		t.Fatal(err)
	}
	forged, err := otherKeys.Sign(auth.Attempt{JobID: id, StepID: "manual", AttemptNo: 1, LeaseID: lease, Service: "manual"},
		time.Now(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	manual, ocr := s.callbacks(1, "manual"), s.callbacks(0, "ocr")
	result := func(cb luciusv1.CallbackServiceClient, attempt int32, lease, token string) (luciusv1.CallbackOutcome, error) {
		r, err := cb.Result(s.ctx, &luciusv1.ResultRequest{JobId: id, StepId: "manual", AttemptNo: attempt, LeaseId: lease,
			Status: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, FinishTime: timestamppb.Now(), CallbackToken: token})
		return r.GetOutcome(), err
	}
	for _, tc := range []struct {
		name    string
		cb      luciusv1.CallbackServiceClient
		attempt int32
		lease   string
		token   string
		refusal string
	}{
		{"no token", manual, 1, lease, "", auth.RefusedMissing},
		{"a token Lucius did not sign", manual, 1, lease, forged, auth.RefusedSignature},
		{"another lease", manual, 1, uuid.NewString(), token, auth.RefusedOtherAttempt},
		{"another attempt", manual, 2, lease, token, auth.RefusedOtherAttempt},
		{"a worker of another service", ocr, 1, lease, token, auth.RefusedService},
	} {
		_, err := result(tc.cb, tc.attempt, tc.lease, tc.token)
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%s: %v, want PERMISSION_DENIED", tc.name, err)
		}
		want := fmt.Sprintf(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'CALLBACK_REFUSED' AND reason = '%s'`, tc.refusal)
		if n := s.count(want, id); n == 0 {
			t.Fatalf("%s: no CALLBACK_REFUSED event with reason %s", tc.name, tc.refusal)
		}
	}
	// /metrics wants an operator.
	for token, want := range map[string]int{"": http.StatusUnauthorized, s.partner("acme"): http.StatusForbidden, s.operator: http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Endpoints.GatewayHTTP+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := s.httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("/metrics: %d, want %d", resp.StatusCode, want)
		}
	}
	// A partner cannot call back at all: the guard refuses its role.
	conn, err := server.Dial(s.Endpoints.Orchestrator[0], grpc.WithPerRPCCredentials(auth.BearerToken(s.partner("acme"))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := result(luciusv1.NewCallbackServiceClient(conn), 1, lease, token); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("partner's RESULT: %v, want PERMISSION_DENIED", err)
	}
	if now := s.waitStep(id, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK); now.GetAttemptNo() != 1 {
		t.Fatalf("refused results changed the step: %+v", now)
	}
	// The genuine result applies; sent again (an honest late duplicate) it is
	// answered, not refused.
	if got, err := result(manual, 1, lease, token); err != nil || got != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		t.Fatalf("genuine result: %s %v", got, err)
	}
	if job := s.waitJob(id, 10*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("job ended %s", job.GetStatus())
	}
	if got, err := result(manual, 1, lease, token); err != nil || got == luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		t.Fatalf("late duplicate: %s %v", got, err)
	}
}

// waitStep waits until the job's single step has the status and returns it.
func (s *suite) waitStep(jobID string, want luciusv1.StepStatus) *luciusv1.Step {
	s.t.Helper()
	return s.waitStepAttempt(jobID, want, 0)
}

// waitStepAttempt waits for the job's first step to be in want on attempt
// minAttempt or a later one.
func (s *suite) waitStepAttempt(jobID string, want luciusv1.StepStatus, minAttempt int32) *luciusv1.Step {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		steps, err := s.jobs.ListJobSteps(s.ctx, &luciusv1.ListJobStepsRequest{JobId: jobID})
		if err == nil && len(steps.GetSteps()) > 0 && steps.GetSteps()[0].GetStatus() == want &&
			steps.GetSteps()[0].GetAttemptNo() >= minAttempt {
			return steps.GetSteps()[0]
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("step of %s never reached %s on attempt %d or later (%v, %v)", jobID, want, minAttempt, steps, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
