package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// gatewayAs is a gRPC connection to the gateway with token (none when empty).
func (s *suite) gatewayAs(token string) *grpc.ClientConn {
	s.t.Helper()
	var opts []grpc.DialOption
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.BearerToken(token)))
	}
	conn, err := server.Dial(s.Endpoints.GatewayGRPC, opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return conn
}

// reasonOf is a gRPC error's ErrorInfo reason and its field violations' reasons.
func reasonOf(err error) (string, []string) {
	var reason string
	var fields []string
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				fields = append(fields, v.GetField()+":"+v.GetReason())
			}
		}
	}
	return reason, fields
}

// restReason is the ErrorInfo reason and field violations of a REST error body.
func restReason(body map[string]any) (string, []string) {
	var reason string
	var fields []string
	details, _ := body["details"].([]any)
	for _, d := range details {
		m, _ := d.(map[string]any)
		if r, ok := m["reason"].(string); ok {
			reason = r
		}
		vs, _ := m["field_violations"].([]any)
		for _, v := range vs {
			vm, _ := v.(map[string]any)
			fields = append(fields, fmt.Sprint(vm["field"])+":"+fmt.Sprint(vm["reason"]))
		}
	}
	return reason, fields
}

// Every rule of the security model, over REST and gRPC, against real
// processes: authentication, roles, tenant isolation, hidden lease ids,
// refs confined to file roots, callback URLs at internal addresses, request
// rates, body limits and bounded workflow definitions; and every refusal
// changes nothing and is logged without the token.
func TestSecurityRulesHoldOverRESTAndGRPC(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	acme, evil := s.partner("acme"), s.partner("evil")
	worker := s.token(auth.Grant{Subject: "e2e-worker", Roles: []auth.Role{auth.RoleWorker}, Services: []string{"manual"}})
	jobsAs := func(token string) luciusv1.JobServiceClient { return luciusv1.NewJobServiceClient(s.gatewayAs(token)) }
	cmdsAs := func(token string) luciusv1.CommandServiceClient {
		return luciusv1.NewCommandServiceClient(s.gatewayAs(token))
	}
	command := func(tenant string) map[string]any {
		return map[string]any{"tenant_id": tenant, "request_type": "E2E_MANUAL", "schema_version": "1",
			"input_ref": s.input("secure.txt", "x"), "output_ref": "file://" + s.inputs + "/out/secure", "payload": map[string]any{}}
	}

	// acme's partner submits a job and sees it; its attempt shows no lease id.
	code, _, body := s.restAs(acme, "POST", "/v1/commands", command("acme"))
	if code != http.StatusAccepted {
		t.Fatalf("acme's submit: %d %v", code, body)
	}
	id := body["job_id"].(string)
	s.waitStep(id, luciusv1.StepStatus_STEP_STATUS_AWAITING_ACK)
	steps, err := jobsAs(acme).ListJobSteps(s.ctx, &luciusv1.ListJobStepsRequest{JobId: id})
	if err != nil || len(steps.GetSteps()) == 0 || len(steps.GetSteps()[0].GetAttempts()) == 0 {
		t.Fatalf("acme reads its steps: %v %v", steps, err)
	}
	if lease := steps.GetSteps()[0].GetAttempts()[0].GetLeaseId(); lease != "" {
		t.Fatalf("a partner sees lease id %q", lease)
	}
	code, _, body = s.restAs(acme, "GET", "/v1/jobs/"+id+"/steps", nil)
	if code != http.StatusOK {
		t.Fatalf("acme's REST steps: %d %v", code, body)
	}
	if raw := fmt.Sprint(body); strings.Contains(raw, s.callbackLease(id)) {
		t.Fatalf("acme's REST steps show the lease id: %s", raw)
	}

	t.Run("no token or a bad one is 401", func(t *testing.T) {
		other, err := auth.GenerateCallbackKeys() // any secret Lucius's issuer did not sign with
		if err != nil {
			t.Fatal(err)
		}
		forged, err := other.Sign(auth.Attempt{JobID: id}, time.Now(), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		for _, token := range []string{"", "not-a-jwt", forged, acme[:len(acme)-4] + "AAAA"} {
			for _, path := range []string{"/v1/jobs/" + id, "/v1/jobs", "/v1/config/global"} {
				code, h, _ := s.restAs(token, "GET", path, nil)
				if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("GET %s with token %.12q: %d (WWW-Authenticate %q), want 401 with a Bearer challenge", path, token, code,
						h.Get("WWW-Authenticate"))
				}
			}
			if _, err := jobsAs(token).GetJob(s.ctx, &luciusv1.GetJobRequest{JobId: id}); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("gRPC GetJob with token %.12q: %v, want UNAUTHENTICATED", token, err)
			}
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, _, _ := s.restAs("", "GET", path, nil); code != http.StatusOK {
				t.Fatalf("%s without a token: %d, want 200 (open)", path, code)
			}
		}
	})

	t.Run("another tenant's job is not found and not listed", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{"GET", "/v1/jobs/" + id}, {"GET", "/v1/jobs/" + id + "/steps"}, {"GET", "/v1/jobs/" + id + "/events"},
			{"POST", "/v1/jobs/" + id + ":cancel"}, {"POST", "/v1/jobs/" + id + ":replay"},
		} {
			var body any
			if c.method == "POST" {
				body = map[string]any{"reason": "evil"}
			}
			if code, _, out := s.restAs(evil, c.method, c.path, body); code != http.StatusNotFound {
				t.Fatalf("evil %s %s: %d %v, want 404", c.method, c.path, code, out)
			}
		}
		jobs := jobsAs(evil)
		for name, call := range map[string]func() error{
			"GetJob":       func() error { _, err := jobs.GetJob(s.ctx, &luciusv1.GetJobRequest{JobId: id}); return err },
			"ListJobSteps": func() error { _, err := jobs.ListJobSteps(s.ctx, &luciusv1.ListJobStepsRequest{JobId: id}); return err },
			"ListJobEvents": func() error {
				_, err := jobs.ListJobEvents(s.ctx, &luciusv1.ListJobEventsRequest{JobId: id})
				return err
			},
			"CancelJob": func() error {
				_, err := jobs.CancelJob(s.ctx, &luciusv1.CancelJobRequest{JobId: id, Reason: "evil"})
				return err
			},
			"ReplayJob": func() error {
				_, err := jobs.ReplayJob(s.ctx, &luciusv1.ReplayJobRequest{JobId: id, Reason: "evil"})
				return err
			},
		} {
			if err := call(); status.Code(err) != codes.NotFound {
				t.Fatalf("evil's %s of acme's job: %v, want NOT_FOUND", name, err)
			}
		}
		for _, q := range []string{"", "?tenant_id=acme"} {
			code, _, out := s.restAs(evil, "GET", "/v1/jobs"+q, nil)
			if code != http.StatusOK || strings.Contains(fmt.Sprint(out), id) {
				t.Fatalf("evil lists /v1/jobs%s: %d %v", q, code, out)
			}
			if code, _, out := s.restAs(evil, "GET", "/v1/deadletters"+q, nil); code != http.StatusOK || strings.Contains(fmt.Sprint(out), id) {
				t.Fatalf("evil lists /v1/deadletters%s: %d %v", q, code, out)
			}
		}
		list, err := jobs.ListJobs(s.ctx, &luciusv1.ListJobsRequest{})
		if err != nil || len(list.GetJobs()) != 0 {
			t.Fatalf("evil's gRPC ListJobs: %v %v", list, err)
		}
		if code, _, out := s.restAs(acme, "GET", "/v1/jobs", nil); code != http.StatusOK || !strings.Contains(fmt.Sprint(out), id) {
			t.Fatalf("acme's own listing lacks its job: %d %v", code, out)
		}
		if job, err := jobsAs(acme).GetJob(s.ctx, &luciusv1.GetJobRequest{JobId: id}); err != nil ||
			job.GetJob().GetStatus() == luciusv1.JobStatus_JOB_STATUS_CANCELLED || job.GetJob().GetStatus() == luciusv1.JobStatus_JOB_STATUS_CANCELLING {
			t.Fatalf("acme's job after evil's attempts: %v %v", job, err)
		}
	})

	t.Run("submitting for a tenant not held is 403", func(t *testing.T) {
		if code, _, out := s.restAs(evil, "POST", "/v1/commands", command("acme")); code != http.StatusForbidden {
			t.Fatalf("evil submits as acme over REST: %d %v, want 403", code, out)
		} else if reason, _ := restReason(out); reason != server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_NOT_HELD) {
			t.Fatalf("reason %q, want %s", reason, server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_NOT_HELD))
		}
		cmd := &luciusv1.Command{TenantId: "acme", RequestType: "E2E_MANUAL", SchemaVersion: "1", InputRef: s.input("secure.txt", "x"),
			OutputRef: "file://" + s.inputs + "/out/evil", Payload: &structpb.Struct{}}
		if _, err := cmdsAs(evil).Submit(s.ctx, &luciusv1.SubmitRequest{Command: cmd}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("evil submits as acme over gRPC: %v, want PERMISSION_DENIED", err)
		}
		if n := s.count(`SELECT count(*) FROM requests WHERE tenant_id = 'acme'`); n != 1 {
			t.Fatalf("%d acme requests stored, want only acme's own", n)
		}
	})

	t.Run("roles: partners cannot administer, workers only call back", func(t *testing.T) {
		if code, _, out := s.restAs(acme, "PUT", "/v1/config/global", map[string]any{"default_mode": "MODE_BURST"}); code != http.StatusForbidden {
			t.Fatalf("a partner's PUT /v1/config/global: %d %v, want 403", code, out)
		}
		cfg := luciusv1.NewConfigServiceClient(s.gatewayAs(acme))
		if _, err := cfg.UpdateGlobalConfig(s.ctx, &luciusv1.UpdateGlobalConfigRequest{Config: &luciusv1.GlobalConfig{}}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a partner's UpdateGlobalConfig: %v, want PERMISSION_DENIED", err)
		}
		wf := luciusv1.NewWorkflowServiceClient(s.gatewayAs(acme))
		if _, err := wf.RegisterWorkflow(s.ctx, &luciusv1.RegisterWorkflowRequest{Source: manualWorkflow}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a partner's RegisterWorkflow: %v, want PERMISSION_DENIED", err)
		}
		// A partner calling a worker RPC, and a worker calling a partner's.
		conn, err := server.Dial(s.Endpoints.Orchestrator[0], grpc.WithPerRPCCredentials(auth.BearerToken(acme)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := luciusv1.NewCallbackServiceClient(conn).Heartbeat(s.ctx, &luciusv1.HeartbeatRequest{JobId: id, StepId: "manual",
			AttemptNo: 1, LeaseId: s.callbackLease(id), WorkerId: "evil"}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a partner's Heartbeat: %v, want PERMISSION_DENIED", err)
		}
		if code, _, out := s.restAs(worker, "GET", "/v1/jobs/"+id, nil); code != http.StatusForbidden {
			t.Fatalf("a worker's GET /v1/jobs/{id}: %d %v, want 403", code, out)
		}
		if code, _, _ := s.restAs(acme, "GET", "/v1/config/global", nil); code != http.StatusForbidden {
			t.Fatalf("a partner's GET /v1/config/global: %d, want 403", code)
		}
		if code, _, _ := s.restAs(s.operator, "GET", "/v1/config/global", nil); code != http.StatusOK {
			t.Fatalf("an operator's GET /v1/config/global: %d, want 200", code)
		}
	})

	t.Run("refs and callback URLs the operator did not allow are 400", func(t *testing.T) {
		outside := t.TempDir()
		secret := filepath.Join(outside, "secret.txt")
		if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(s.inputs, "escape")
		if err := os.Symlink(outside, link); err != nil {
			t.Fatal(err)
		}
		for _, ref := range []string{"file:///etc/passwd", "file://" + s.inputs + "/../../etc/passwd", "file://" + link + "/secret.txt"} {
			c := command("acme")
			c["input_ref"] = ref
			code, _, out := s.restAs(acme, "POST", "/v1/commands", c)
			if _, fields := restReason(out); code != http.StatusBadRequest || !strings.Contains(strings.Join(fields, " "), "command.input_ref:") {
				t.Fatalf("input_ref %s: %d %v, want 400 with a command.input_ref violation", ref, code, out)
			}
		}
		// The suite allowlists 127.0.0.1/32 for its own webhook receivers;
		// every other internal address stays refused.
		for _, url := range []string{"http://[::1]:8080/cb", "http://169.254.169.254/latest/meta-data", "http://127.0.0.2/cb",
			"http://localhost/cb", "http://10.1.2.3/cb", "http://[fe80::1]/cb"} {
			c := command("acme")
			c["callback_url"] = url
			code, _, out := s.restAs(acme, "POST", "/v1/commands", c)
			if _, fields := restReason(out); code != http.StatusBadRequest ||
				!strings.Contains(strings.Join(fields, " "), "command.callback_url:CALLBACK_URL_FORBIDDEN") {
				t.Fatalf("callback_url %s: %d %v, want 400 CALLBACK_URL_FORBIDDEN", url, code, out)
			}
		}
		cmd := &luciusv1.Command{TenantId: "acme", RequestType: "E2E_MANUAL", SchemaVersion: "1", InputRef: "file:///etc/passwd",
			OutputRef: "file://" + s.inputs + "/out/x", Payload: &structpb.Struct{}}
		if _, err := cmdsAs(acme).Submit(s.ctx, &luciusv1.SubmitRequest{Command: cmd}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("gRPC submit of file:///etc/passwd: %v, want INVALID_ARGUMENT", err)
		}
		for _, tenant := range []string{".", "..", "a/b"} {
			if code, _, out := s.restAs(s.operator, "POST", "/v1/commands", command(tenant)); code != http.StatusBadRequest {
				t.Fatalf("tenant %q: %d %v, want 400", tenant, code, out)
			}
		}
		if n := s.count(`SELECT count(*) FROM requests`); n != 1 {
			t.Fatalf("%d requests stored, want only the first (refusals write nothing)", n)
		}
	})

	t.Run("bodies over the limit are 413 before they are read", func(t *testing.T) {
		big := bytes.Repeat([]byte("a"), 10<<20)
		req, _ := http.NewRequest("POST", "http://"+s.Endpoints.GatewayHTTP+"/v1/commands", bytes.NewReader(big))
		req.Header.Set("Authorization", "Bearer "+acme)
		req.Header.Set("Content-Type", "application/json")
		resp, err := s.httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("a 10 MB body: %d, want 413", resp.StatusCode)
		}
		payload, _ := structpb.NewStruct(map[string]any{"blob": strings.Repeat("a", 2<<20)})
		cmd := &luciusv1.Command{TenantId: "acme", RequestType: "E2E_MANUAL", SchemaVersion: "1", InputRef: s.input("secure.txt", "x"),
			OutputRef: "file://" + s.inputs + "/out/big", Payload: payload}
		if _, err := cmdsAs(acme).Submit(s.ctx, &luciusv1.SubmitRequest{Command: cmd}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a 2 MB gRPC message: %v, want RESOURCE_EXHAUSTED", err)
		}
	})

	t.Run("workflow definitions are bounded", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("workflow_id: E2E_HUGE\nversion: 1\nnodes:\n  START: {type: start, next: n0}\n")
		for i := range 1500 {
			fmt.Fprintf(&b, "  n%d: {type: task, handler: MANUAL, next: n%d}\n", i, i+1)
		}
		b.WriteString("  n1500: {type: end}\n")
		wf := luciusv1.NewWorkflowServiceClient(s.gatewayAs(s.operator))
		_, err := wf.RegisterWorkflow(s.ctx, &luciusv1.RegisterWorkflowRequest{Source: b.String()})
		if reason, _ := reasonOf(err); status.Code(err) != codes.InvalidArgument || reason != "WORKFLOW_TOO_LARGE" {
			t.Fatalf("a 1,500-node workflow: %v (reason %s), want INVALID_ARGUMENT WORKFLOW_TOO_LARGE", err, reason)
		}
	})

	t.Run("a tenant's request rate answers 429 with Retry-After", func(t *testing.T) {
		code, out := s.rest("PUT", "/v1/config/tenants/evil", map[string]any{"request_rate": map[string]any{"requests_per_second": 0.2, "burst": 2}})
		if code != http.StatusOK {
			t.Fatalf("set evil's rate: %d %v", code, out)
		}
		// The change names the operator who made it, in the answer and the audit trail.
		if by := out["config"].(map[string]any)["updated_by"]; by != "lucius-local#stack-operator" {
			t.Fatalf("the tenant configuration was updated by %v", by)
		}
		if n := s.count(`SELECT count(*) FROM config_changes WHERE scope = 'evil' AND action = 'PUT' AND changed_by = 'lucius-local#stack-operator'`); n != 1 {
			t.Fatalf("%d audit rows for the change", n)
		}
		// The gateway follows the live configuration within a second or so;
		// from then on evil's third call within five seconds is refused.
		deadline := time.Now().Add(15 * time.Second)
		for {
			code, h, out := s.restAs(evil, "GET", "/v1/jobs", nil)
			if code == http.StatusTooManyRequests {
				if reason, _ := restReason(out); reason != "TENANT_RATE_LIMITED" || h.Get("Retry-After") == "" {
					t.Fatalf("429 with reason %q and Retry-After %q", reason, h.Get("Retry-After"))
				}
				break
			}
			if code != http.StatusOK || time.Now().After(deadline) {
				t.Fatalf("evil's calls: %d %v, never 429", code, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := jobsAs(evil).ListJobs(s.ctx, &luciusv1.ListJobsRequest{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("evil's gRPC call over its rate: %v, want RESOURCE_EXHAUSTED", err)
		}
		// Another tenant is not affected.
		if code, _, out := s.restAs(acme, "GET", "/v1/jobs", nil); code != http.StatusOK {
			t.Fatalf("acme while evil is limited: %d %v", code, out)
		}
	})

	// Denied calls are logged with principal, method and reason, never the token.
	deadline := time.Now().Add(5 * time.Second)
	for !s.logs.Contains(`principal=lucius-local#e2e-partner method=/lucius.v1.ConfigService/UpdateGlobalConfig reason=`) ||
		!s.logs.Contains(`principal=lucius-local#e2e-partner method=/lucius.v1.CommandService/Submit reason=TENANT_NOT_HELD`) {
		if time.Now().After(deadline) {
			t.Fatal("no denied call logged with its principal")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, token := range []string{acme, evil, worker} {
		if s.logs.Contains(token) {
			t.Fatal("a bearer token reached the logs")
		}
	}
	if _, err := jobsAs(acme).CancelJob(context.Background(), &luciusv1.CancelJobRequest{JobId: id, Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"JOB_ACCEPTED", "CANCEL_REQUESTED"} {
		if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = $2 AND data->>'principal' = 'lucius-local#e2e-partner'`,
			id, typ); n != 1 {
			t.Fatalf("%d %s events name the principal, want 1", n, typ)
		}
	}
}

// callbackLease is the lease id of a job's first attempt, read from the
// ledger as only Lucius and the worker know it.
func (s *suite) callbackLease(jobID string) string {
	s.t.Helper()
	var lease string
	if err := s.pool.QueryRow(s.ctx, `SELECT lease_id::text FROM attempts WHERE job_id = $1 ORDER BY attempt_no LIMIT 1`, jobID).Scan(&lease); err != nil {
		s.t.Fatal(err)
	}
	return lease
}
