package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/auth/authtest"
	"github.com/lucius-platform/lucius/base/freeport/freeporttest"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
)

func TestMain(m *testing.M) { pgtest.Main(m, ledger.Migrations) }

type gatewayFixture struct {
	base  string // REST base URL
	conn  *grpc.ClientConn
	pool  *pgxpool.Pool
	ctx   context.Context
	jobs  luciusv1.JobServiceClient
	cmds  luciusv1.CommandServiceClient
	httpc *http.Client
	// issuer mints the fixture's tokens; the fixture's own clients (conn and
	// rest) call as an operator.
	issuer   *authtest.Issuer
	operator string
	grpcAddr string
}

// startGateway runs the real gateway (gRPC + REST) against a fresh database.
func startGateway(t *testing.T) *gatewayFixture {
	t.Helper()
	url := pgtest.NewDB(t)
	grpcAddr, httpAddr := freeporttest.Adopted(t), freeporttest.Adopted(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	issuer := authtest.New(t)
	go func() {
		done <- Run(ctx, Config{Service: process.Service{DatabaseURL: url, GRPCAddr: grpcAddr, HTTPAddr: httpAddr, Auth: issuer.Config},
			Policy: testPolicy})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway stopped with %v", err)
		}
	})
	f := &gatewayFixture{base: "http://" + httpAddr, ctx: context.Background(), httpc: &http.Client{Timeout: 10 * time.Second},
		issuer: issuer, operator: issuer.Token(t, authtest.Operator()), grpcAddr: grpcAddr}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := f.httpc.Get(f.base + "/readyz")
		if err == nil && resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var err error
	if f.conn, err = server.Dial(grpcAddr, grpc.WithPerRPCCredentials(auth.BearerToken(f.operator))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close() })
	if f.pool, err = pgxpool.New(f.ctx, url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pool.Close)
	f.jobs, f.cmds = luciusv1.NewJobServiceClient(f.conn), luciusv1.NewCommandServiceClient(f.conn)
	return f
}

func (f *gatewayFixture) rest(t *testing.T, method, path string, body any) (int, map[string]any) {
	t.Helper()
	code, _, out := f.restHeader(t, method, path, body)
	return code, out
}

func (f *gatewayFixture) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func validBody(key string) map[string]any {
	return map[string]any{"tenant_id": "acme", "request_type": "OCR_EMBEDDING_SIS", "schema_version": "1",
		"input_ref": "file:///data/in.txt", "output_ref": "file:///data/out.json",
		"payload": map[string]any{"prompt_set": []any{"summarize"}}, "idempotency_key": key}
}

func TestSubmitOverRESTAnswers202AndIsIdempotent(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	code, body := f.rest(t, "POST", "/v1/commands", validBody("k1"))
	if code != http.StatusAccepted || body["status"] != "JOB_STATUS_RECEIVED" {
		t.Fatalf("submit: %d %v", code, body)
	}
	jobID, _ := body["job_id"].(string)
	if !hex64.MatchString(jobID) {
		t.Fatalf("job_id %q", jobID)
	}
	code, again := f.rest(t, "POST", "/v1/commands", validBody("k1"))
	if code != http.StatusAccepted || again["job_id"] != jobID || again["duplicate"] != true {
		t.Fatalf("repeat: %d %v", code, again)
	}
	if n := f.count(t, "requests"); n != 1 {
		t.Fatalf("%d requests stored, want 1", n)
	}
	if n := f.count(t, "outbox"); n != 1 {
		t.Fatalf("%d outbox rows, want 1", n)
	}
	different := validBody("k1")
	different["input_ref"] = "file:///data/other.txt"
	code, conflict := f.rest(t, "POST", "/v1/commands", different)
	if code != http.StatusConflict || reasonOf(conflict) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_REUSED) {
		t.Fatalf("reused key: %d %v", code, conflict)
	}
	code, job := f.rest(t, "GET", "/v1/jobs/"+jobID, nil)
	if code != http.StatusOK || job["job"].(map[string]any)["status"] != "JOB_STATUS_RECEIVED" {
		t.Fatalf("get: %d %v", code, job)
	}
	code, events := f.rest(t, "GET", "/v1/jobs/"+jobID+"/events", nil)
	if code != http.StatusOK || len(events["events"].([]any)) != 1 {
		t.Fatalf("events: %d %v", code, events)
	}
	code, steps := f.rest(t, "GET", "/v1/jobs/"+jobID+"/steps", nil)
	if code != http.StatusOK || steps["steps"] != nil {
		t.Fatalf("steps of an unclaimed job: %d %v", code, steps)
	}
	code, cancelled := f.rest(t, "POST", "/v1/jobs/"+jobID+":cancel", map[string]any{"reason": "test"})
	if code != http.StatusOK || cancelled["job"].(map[string]any)["status"] != "JOB_STATUS_CANCELLING" {
		t.Fatalf("cancel: %d %v", code, cancelled)
	}
}

func TestInvalidCommandsAreRejectedAndWriteNothing(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	tests := []struct {
		name   string
		mutate func(b map[string]any)
		field  string
	}{
		{"missing tenant_id", func(b map[string]any) { delete(b, "tenant_id") }, "command.tenant_id"},
		{"unknown request_type", func(b map[string]any) { b["request_type"] = "TRANSLATE" }, "command.request_type"},
		{"lowercase request_type", func(b map[string]any) { b["request_type"] = "ocr" }, "command.request_type"},
		{"wrong schema_version", func(b map[string]any) { b["schema_version"] = "2.0" }, "command.schema_version"},
		{"missing schema_version", func(b map[string]any) { delete(b, "schema_version") }, "command.schema_version"},
		{"malformed input_ref", func(b map[string]any) { b["input_ref"] = "not a url" }, "command.input_ref"},
		{"output_ref scheme not allowed", func(b map[string]any) { b["output_ref"] = "ftp://h/x" }, "command.output_ref"},
		{"SIS without prompt_set", func(b map[string]any) { b["payload"] = map[string]any{} }, "command.payload.prompt_set"},
		{"missing payload", func(b map[string]any) { delete(b, "payload") }, "command.payload"},
		{"BURST without doc_id", func(b map[string]any) { b["mode"] = "MODE_BURST" }, "command.doc_id"},
		{"priority above 10", func(b map[string]any) { b["priority"] = 11 }, "command.priority"},
		{"negative priority", func(b map[string]any) { b["priority"] = -1 }, "command.priority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := validBody("")
			tt.mutate(body)
			before := f.count(t, "requests") + f.count(t, "outbox") + f.count(t, "job_events")
			code, resp := f.rest(t, "POST", "/v1/commands", body)
			if code != http.StatusBadRequest {
				t.Fatalf("REST answered %d %v, want 400", code, resp)
			}
			if !hasFieldViolation(resp, tt.field) {
				t.Fatalf("REST error does not name %s: %v", tt.field, resp)
			}
			raw, _ := json.Marshal(body)
			cmd := &luciusv1.Command{}
			if err := (&jsonUnmarshaler{}).unmarshal(raw, cmd); err == nil {
				_, err := f.cmds.Submit(f.ctx, &luciusv1.SubmitRequest{Command: cmd})
				st := status.Convert(err)
				if st.Code() != codes.InvalidArgument || !grpcHasFieldViolation(st, tt.field) {
					t.Fatalf("gRPC answered %v, want InvalidArgument naming %s", err, tt.field)
				}
			}
			if after := f.count(t, "requests") + f.count(t, "outbox") + f.count(t, "job_events"); after != before {
				t.Fatalf("a rejected command wrote %d rows", after-before)
			}
		})
	}
}

func TestJobLookupsAndPaging(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	unknown := fmt.Sprintf("%064d", 0)
	if code, body := f.rest(t, "GET", "/v1/jobs/"+unknown, nil); code != http.StatusNotFound || reasonOf(body) != server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND) {
		t.Fatalf("unknown job: %d %v", code, body)
	}
	if code, _ := f.rest(t, "GET", "/v1/jobs/not-a-job-id", nil); code != http.StatusBadRequest {
		t.Fatalf("malformed job id answered %d, want 400", code)
	}
	for i := range 5 {
		f.rest(t, "POST", "/v1/commands", validBody(fmt.Sprintf("page-%d", i)))
	}
	seen := map[string]bool{}
	token := ""
	for page := 0; ; page++ {
		resp, err := f.jobs.ListJobs(f.ctx, &luciusv1.ListJobsRequest{TenantId: " ACME ", PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range resp.GetJobs() {
			if seen[j.GetJobId()] {
				t.Fatalf("job %s listed twice", j.GetJobId())
			}
			seen[j.GetJobId()] = true
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		if page > 5 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != 5 {
		t.Fatalf("listed %d jobs, want 5", len(seen))
	}
	filtered, err := f.jobs.ListJobs(f.ctx, &luciusv1.ListJobsRequest{Statuses: []luciusv1.JobStatus{luciusv1.JobStatus_JOB_STATUS_SUCCEEDED}})
	if err != nil || len(filtered.GetJobs()) != 0 {
		t.Fatalf("status filter: %v %d", err, len(filtered.GetJobs()))
	}
	// Workflow and acceptance-time filters, over gRPC and REST.
	now := time.Now()
	for _, tt := range []struct {
		name string
		req  *luciusv1.ListJobsRequest
		want int
	}{
		{"its workflow", &luciusv1.ListJobsRequest{WorkflowId: "OCR_EMBEDDING_SIS"}, 5},
		{"another workflow", &luciusv1.ListJobsRequest{WorkflowId: "E2E_NONE"}, 0},
		{"accepted since an hour ago", &luciusv1.ListJobsRequest{CreateTimeAfter: timestamppb.New(now.Add(-time.Hour))}, 5},
		{"accepted since a minute from now", &luciusv1.ListJobsRequest{CreateTimeAfter: timestamppb.New(now.Add(time.Minute))}, 0},
		{"accepted before an hour ago", &luciusv1.ListJobsRequest{CreateTimeBefore: timestamppb.New(now.Add(-time.Hour))}, 0},
		{"accepted in the last hour", &luciusv1.ListJobsRequest{CreateTimeAfter: timestamppb.New(now.Add(-time.Hour)),
			CreateTimeBefore: timestamppb.New(now.Add(time.Minute)), WorkflowId: "OCR_EMBEDDING_SIS"}, 5},
	} {
		resp, err := f.jobs.ListJobs(f.ctx, tt.req)
		if err != nil || len(resp.GetJobs()) != tt.want {
			t.Fatalf("%s: %d jobs (%v), want %d", tt.name, len(resp.GetJobs()), err, tt.want)
		}
	}
	since := url.QueryEscape(now.Add(-time.Hour).UTC().Format(time.RFC3339))
	if code, body := f.rest(t, "GET", "/v1/jobs?workflow_id=OCR_EMBEDDING_SIS&create_time_after="+since, nil); code != http.StatusOK ||
		len(body["jobs"].([]any)) != 5 {
		t.Fatalf("filtered over REST: %d %v", code, body)
	}
	if _, err := f.jobs.ListJobs(f.ctx, &luciusv1.ListJobsRequest{PageToken: "garbage"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad page token: %v", err)
	}
}

func reasonOf(body map[string]any) string {
	details, _ := body["details"].([]any)
	for _, d := range details {
		m, _ := d.(map[string]any)
		if r, ok := m["reason"].(string); ok && m["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" {
			return r
		}
	}
	return ""
}

func hasFieldViolation(body map[string]any, field string) bool {
	details, _ := body["details"].([]any)
	for _, d := range details {
		m, _ := d.(map[string]any)
		vs, _ := m["field_violations"].([]any)
		for _, v := range vs {
			if vm, _ := v.(map[string]any); vm["field"] == field {
				return true
			}
		}
	}
	return false
}

func grpcHasFieldViolation(st *status.Status, field string) bool {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field {
					return true
				}
			}
		}
	}
	return false
}

// jsonUnmarshaler reads a REST body into a Command the way grpc-gateway does.
type jsonUnmarshaler struct{}

func (jsonUnmarshaler) unmarshal(raw []byte, cmd *luciusv1.Command) error {
	return protojsonUnmarshal(raw, cmd)
}

func protojsonUnmarshal(raw []byte, cmd *luciusv1.Command) error {
	return protojson.Unmarshal(raw, cmd)
}

// submitted_by is the caller's authenticated principal, whatever the command
// claims: on the job and in the stored command.
func TestSubmittedByIsTheCallersPrincipal(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	partner := f.issuer.Token(t, authtest.Partner("acme"))
	body := validBody("by-1")
	body["submitted_by"] = "someone-else#forged"
	code, _, sub := f.restAs(t, partner, "POST", "/v1/commands", body)
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, sub)
	}
	jobID := sub["job_id"].(string)
	code, _, got := f.restAs(t, partner, "GET", "/v1/jobs/"+jobID, nil)
	by, _ := got["job"].(map[string]any)["submitted_by"].(string)
	if code != http.StatusOK || !strings.HasSuffix(by, "#test-partner") {
		t.Fatalf("job submitted_by %q (%d), want the partner's principal", by, code)
	}
	var stored string
	if err := f.pool.QueryRow(f.ctx, `SELECT command ->> 'submitted_by' FROM requests WHERE job_id = $1`, jobID).Scan(&stored); err != nil || stored != by {
		t.Fatalf("stored command's submitted_by %q (%v), want %q", stored, err, by)
	}
}
