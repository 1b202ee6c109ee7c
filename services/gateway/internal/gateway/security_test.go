package gateway

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/auth/authtest"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// TestTenantIsolationOverREST: another tenant's job is NOT_FOUND, listings
// show only the caller's tenants, and a partner cannot act for a tenant it
// does not hold nor reach operator routes.
func TestTenantIsolationOverREST(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	acme, evil := f.issuer.Token(t, authtest.Partner("acme")), f.issuer.Token(t, authtest.Partner("evil"))
	code, _, sub := f.restAs(t, acme, "POST", "/v1/commands", validBody("iso-1"))
	if code != http.StatusAccepted {
		t.Fatalf("acme submit: %d %v", code, sub)
	}
	jobID := sub["job_id"].(string)

	for _, tc := range []struct {
		name, token, method, path string
		body                      any
		want                      int
		reason                    string
	}{
		{"no token", "", "GET", "/v1/jobs/" + jobID, nil, http.StatusUnauthorized, server.Reason(luciusv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)},
		{"a bad token", "not-a-token", "GET", "/v1/jobs", nil, http.StatusUnauthorized, server.Reason(luciusv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)},
		{"evil reads acme's job", evil, "GET", "/v1/jobs/" + jobID, nil, http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND)},
		{"evil reads its steps", evil, "GET", "/v1/jobs/" + jobID + "/steps", nil, http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND)},
		{"evil reads its events", evil, "GET", "/v1/jobs/" + jobID + "/events", nil, http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND)},
		{"evil cancels it", evil, "POST", "/v1/jobs/" + jobID + ":cancel", map[string]any{}, http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND)},
		{"evil replays it", evil, "POST", "/v1/jobs/" + jobID + ":replay", map[string]any{}, http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND)},
		{"evil submits as acme", evil, "POST", "/v1/commands", validBody("iso-2"), http.StatusForbidden, server.Reason(luciusv1.ErrorReason_ERROR_REASON_TENANT_NOT_HELD)},
		{"a partner changes the globals", acme, "PUT", "/v1/config/global", map[string]any{}, http.StatusForbidden, server.Reason(luciusv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED)},
		{"a partner reads tenant config", acme, "GET", "/v1/config/tenants/acme", nil, http.StatusForbidden, server.Reason(luciusv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED)},
		{"a partner registers a workflow", acme, "POST", "/v1/workflows", map[string]any{"source": "x"}, http.StatusForbidden, server.Reason(luciusv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED)},
		{"a partner applies a runbook", acme, "POST", "/v1/runbooks", map[string]any{"source": "x"}, http.StatusForbidden, server.Reason(luciusv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED)},
		{"acme reads its job", acme, "GET", "/v1/jobs/" + jobID, nil, http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, header, body := f.restAs(t, tc.token, tc.method, tc.path, tc.body)
			if code != tc.want || (tc.reason != "" && reasonOf(body) != tc.reason) {
				t.Fatalf("%s %s: %d %v, want %d %s", tc.method, tc.path, code, body, tc.want, tc.reason)
			}
			if code == http.StatusUnauthorized && !strings.HasPrefix(header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("401 without a Bearer challenge: %v", header)
			}
		})
	}
	code, _, list := f.restAs(t, evil, "GET", "/v1/jobs", nil)
	if jobs, _ := list["jobs"].([]any); code != http.StatusOK || len(jobs) != 0 {
		t.Fatalf("evil's listing: %d %v", code, list)
	}
	code, _, list = f.restAs(t, evil, "GET", "/v1/jobs?tenant_id=acme", nil)
	if jobs, _ := list["jobs"].([]any); code != http.StatusOK || len(jobs) != 0 {
		t.Fatalf("evil's listing of acme: %d %v", code, list)
	}
	code, _, list = f.restAs(t, acme, "GET", "/v1/jobs", nil)
	if jobs, _ := list["jobs"].([]any); code != http.StatusOK || len(jobs) != 1 {
		t.Fatalf("acme's listing: %d %v", code, list)
	}
	if code, _, _ := f.restAs(t, "", "GET", "/healthz", nil); code != http.StatusOK {
		t.Fatalf("/healthz without a token: %d", code)
	}
}

func TestTenantIsolationOverGRPC(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	dial := func(g auth.Grant) (luciusv1.CommandServiceClient, luciusv1.JobServiceClient, luciusv1.ConfigServiceClient) {
		conn, err := server.Dial(f.grpcAddr, f.issuer.Creds(t, g))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return luciusv1.NewCommandServiceClient(conn), luciusv1.NewJobServiceClient(conn), luciusv1.NewConfigServiceClient(conn)
	}
	acmeCmds, acmeJobs, acmeConfig := dial(authtest.Partner("acme"))
	evilCmds, evilJobs, _ := dial(authtest.Partner("evil"))
	cmd := &luciusv1.Command{TenantId: "acme", RequestType: "OCR_EMBEDDING_SIS", SchemaVersion: "1",
		InputRef: "file:///data/in.txt", OutputRef: "file:///data/out.json", Payload: mustStruct(t, map[string]any{"prompt_set": []any{"x"}})}
	resp, err := acmeCmds.Submit(f.ctx, &luciusv1.SubmitRequest{Command: cmd})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetJobId()
	if _, err := evilCmds.Submit(f.ctx, &luciusv1.SubmitRequest{Command: cmd}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("evil submitting as acme: %v", err)
	}
	if _, err := evilJobs.GetJob(f.ctx, &luciusv1.GetJobRequest{JobId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("evil reading acme's job: %v", err)
	}
	if _, err := evilJobs.CancelJob(f.ctx, &luciusv1.CancelJobRequest{JobId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("evil cancelling acme's job: %v", err)
	}
	if _, err := acmeConfig.UpdateGlobalConfig(f.ctx, &luciusv1.UpdateGlobalConfigRequest{Config: &luciusv1.GlobalConfig{}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a partner updating the globals: %v", err)
	}
	if _, err := acmeJobs.GetJob(f.ctx, &luciusv1.GetJobRequest{JobId: id}); err != nil {
		t.Fatalf("acme reading its job: %v", err)
	}
	anon, err := server.Dial(f.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := luciusv1.NewJobServiceClient(anon).GetJob(f.ctx, &luciusv1.GetJobRequest{JobId: id}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
