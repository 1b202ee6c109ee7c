package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// requestIDCase is one mutating RPC: call sends it with a request_id (other:
// a different request body), state reads what the call changes.
type requestIDCase struct {
	method string
	setup  func(t *testing.T)
	call   func(id string, other bool) (proto.Message, error)
	state  func() string
}

// Every mutating RPC with a request_id (AIP-155), against the real suite:
// the first call changes state; a retry with the same id answers exactly
// the same and changes nothing (the state it reads, audit rows included, is
// the same after it); the same id with another request is refused
// ALREADY_EXISTS REQUEST_ID_REUSED. A request message of the contract with
// a request_id field and no case here fails the test.
func TestEveryMutatingRPCAnswersARetryWithTheSameRequestIDOnce(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	jobs := s.jobs
	cfg := luciusv1.NewConfigServiceClient(s.conn)
	wfs := luciusv1.NewWorkflowServiceClient(s.conn)
	rbs := luciusv1.NewRunbookServiceClient(s.conn)
	assets := luciusv1.NewAssetServiceClient(s.conn)
	breakers := luciusv1.NewCircuitBreakerServiceClient(s.conn)
	in := s.input("reqid.txt", sampleText)

	var manualJob, failedJob, assetID string
	pick := func(other bool, a, b string) string {
		if other {
			return b
		}
		return a
	}
	cases := []requestIDCase{{
		method: luciusv1.JobService_CancelJob_FullMethodName,
		setup: func(t *testing.T) {
			out, _ := s.output("reqid-manual.json")
			manualJob = s.submitAs("acme", "E2E_MANUAL", map[string]any{}, in, out, "")
		},
		call: func(id string, other bool) (proto.Message, error) {
			return jobs.CancelJob(s.ctx, &luciusv1.CancelJobRequest{JobId: manualJob, Reason: pick(other, "done with it", "another"), RequestId: id})
		},
		state: func() string {
			return s.snapshot(`SELECT type, reason FROM job_events WHERE job_id = $1 AND type = 'CANCEL_REQUESTED'`, manualJob)
		},
	}, {
		method: luciusv1.JobService_ReplayJob_FullMethodName,
		setup: func(t *testing.T) {
			out, _ := s.output("reqid-flaky.json")
			failedJob = s.submitAs("acme", "E2E_FLAKY", map[string]any{}, in, out, "")
			if job := s.waitJob(failedJob, 90*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL {
				t.Fatalf("the flaky job ended %s, want FAILED_FINAL", job.GetStatus())
			}
		},
		call: func(id string, other bool) (proto.Message, error) {
			return jobs.ReplayJob(s.ctx, &luciusv1.ReplayJobRequest{JobId: failedJob, Reason: pick(other, "retry it", "another"), RequestId: id})
		},
		state: func() string { return s.snapshot(`SELECT job_id FROM requests WHERE replay_of = $1`, failedJob) },
	}, {
		method: luciusv1.ConfigService_UpdateGlobalConfig_FullMethodName,
		call: func(id string, other bool) (proto.Message, error) {
			g, err := cfg.GetGlobalConfig(s.ctx, &luciusv1.GetGlobalConfigRequest{})
			if err != nil {
				return nil, err
			}
			c := g.GetConfig()
			c.Revision, c.UpdateTime, c.UpdatedBy = 0, nil, ""
			c.RetryAfterSeconds = int32(len(pick(other, "xxxxxxx", "xxxxxxxx")))
			return cfg.UpdateGlobalConfig(s.ctx, &luciusv1.UpdateGlobalConfigRequest{Config: c, RequestId: id})
		},
		state: func() string { return s.snapshot(`SELECT revision, scope, action FROM config_changes`) },
	}, {
		method: luciusv1.ConfigService_UpdateTenantConfig_FullMethodName,
		call: func(id string, other bool) (proto.Message, error) {
			limit := int32(len(pick(other, "xxxxx", "xxxxxx")))
			return cfg.UpdateTenantConfig(s.ctx, &luciusv1.UpdateTenantConfigRequest{
				Config: &luciusv1.TenantConfig{TenantId: "reqid-tenant", MaxActiveJobs: &limit}, RequestId: id})
		},
		state: func() string { return s.snapshot(`SELECT revision, scope, action FROM config_changes`) },
	}, {
		method: luciusv1.ConfigService_DeleteTenantConfig_FullMethodName,
		setup: func(t *testing.T) {
			if _, err := cfg.UpdateTenantConfig(s.ctx, &luciusv1.UpdateTenantConfigRequest{
				Config: &luciusv1.TenantConfig{TenantId: "reqid-delete", Mode: luciusv1.Mode_MODE_DEFAULT}}); err != nil {
				t.Fatal(err)
			}
		},
		call: func(id string, other bool) (proto.Message, error) {
			return cfg.DeleteTenantConfig(s.ctx, &luciusv1.DeleteTenantConfigRequest{TenantId: pick(other, "reqid-delete", "reqid-other"), RequestId: id})
		},
		state: func() string { return s.snapshot(`SELECT revision, scope, action FROM config_changes`) },
	}, {
		method: luciusv1.ConfigService_PauseWork_FullMethodName,
		call: func(id string, other bool) (proto.Message, error) {
			return cfg.PauseWork(s.ctx, &luciusv1.PauseWorkRequest{Scope: luciusv1.PauseScope_PAUSE_SCOPE_TENANT, Key: "reqid-paused",
				Reason: pick(other, "incident", "another"), RequestId: id})
		},
		state: func() string {
			return s.snapshot(`SELECT p.*, (SELECT count(*) FROM config_changes) AS changes FROM config_pauses p`)
		},
	}, {
		method: luciusv1.ConfigService_ResumeWork_FullMethodName,
		setup: func(t *testing.T) {
			if _, err := cfg.PauseWork(s.ctx, &luciusv1.PauseWorkRequest{Scope: luciusv1.PauseScope_PAUSE_SCOPE_TENANT, Key: "reqid-resume"}); err != nil {
				t.Fatal(err)
			}
		},
		call: func(id string, other bool) (proto.Message, error) {
			return cfg.ResumeWork(s.ctx, &luciusv1.ResumeWorkRequest{Scope: luciusv1.PauseScope_PAUSE_SCOPE_TENANT,
				Key: pick(other, "reqid-resume", "reqid-other"), RequestId: id})
		},
		state: func() string {
			return s.snapshot(`SELECT p.*, (SELECT count(*) FROM config_changes) AS changes FROM config_pauses p`)
		},
	}, {
		method: luciusv1.WorkflowService_RegisterWorkflow_FullMethodName,
		call: func(id string, other bool) (proto.Message, error) {
			src := strings.Replace(manualWorkflow, "workflow_id: E2E_MANUAL", "workflow_id: E2E_REQID", 1)
			if other {
				src = strings.Replace(src, "version: 1", "version: 2", 1)
			}
			return wfs.RegisterWorkflow(s.ctx, &luciusv1.RegisterWorkflowRequest{Source: src, RequestId: id})
		},
		state: func() string {
			return s.snapshot(`SELECT * FROM workflow_definitions WHERE workflow_id = 'E2E_REQID'`)
		},
	}, {
		method: luciusv1.RunbookService_ApplyRunbook_FullMethodName,
		call: func(id string, other bool) (proto.Message, error) {
			src := e2eRunbook
			if other {
				src = strings.Replace(src, "version: 1", "version: 2", 1)
			}
			return rbs.ApplyRunbook(s.ctx, &luciusv1.ApplyRunbookRequest{Source: src, RequestId: id})
		},
		state: func() string {
			return s.snapshot(`SELECT name, version, is_active, created_at, activated_at FROM runbooks`)
		},
	}, {
		method: luciusv1.RunbookService_LoadMembers_FullMethodName,
		call: func(id string, other bool) (proto.Message, error) {
			next := timestamppb.New(time.Now().Add(365 * 24 * time.Hour).Truncate(time.Hour))
			members := []*luciusv1.RunbookMember{
				{MemberKey: "r1", BatchTime: next, Values: map[string]string{"email": "r1@contoso.test"}},
				{MemberKey: "r2", BatchTime: next, Values: map[string]string{"email": "r2@contoso.test"}},
			}
			if other {
				members = members[:1]
			}
			return rbs.LoadMembers(s.ctx, &luciusv1.LoadMembersRequest{Name: "e2e-migration", Members: members, RequestId: id})
		},
		state: func() string {
			var table string
			if err := s.pool.QueryRow(s.ctx, `SELECT data_table_name FROM runbooks WHERE name = 'e2e-migration' AND is_active`).Scan(&table); err != nil {
				t.Fatal(err)
			}
			return s.snapshot(`SELECT * FROM ` + table)
		},
	}, {
		method: luciusv1.AssetService_RollbackAsset_FullMethodName,
		setup: func(t *testing.T) {
			for i, key := range []string{"reqid-asset-1", "reqid-asset-2"} {
				out, _ := s.output(key + ".txt")
				code, sub := s.rest("POST", "/v1/commands", map[string]any{"tenant_id": "acme", "request_type": "OCR", "schema_version": "1",
					"input_ref": in, "output_ref": out, "payload": map[string]any{}, "idempotency_key": key,
					"platform_id": "ddh", "platform_refs": map[string]any{"dataset_id": "reqid", "resource_id": "r", "version_id": "1"}})
				if code != http.StatusAccepted || sub["asset_revision"] != float64(i+1) {
					t.Fatalf("submit %s: %d %v", key, code, sub)
				}
				assetID = sub["asset_id"].(string)
				if job := s.waitJob(sub["job_id"].(string), 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
					t.Fatalf("asset job %s ended %s", key, job.GetStatus())
				}
			}
		},
		call: func(id string, other bool) (proto.Message, error) {
			rev := int32(1)
			if other {
				rev = 2
			}
			return assets.RollbackAsset(s.ctx, &luciusv1.RollbackAssetRequest{AssetId: assetID, TenantId: "acme", Revision: rev, RequestId: id})
		},
		state: func() string { return s.snapshot(`SELECT * FROM assets WHERE asset_id = $1`, assetID) },
	}, {
		method: luciusv1.AssetService_SetAssetApproval_FullMethodName,
		call: func(id string, other bool) (proto.Message, error) {
			return assets.SetAssetApproval(s.ctx, &luciusv1.SetAssetApprovalRequest{AssetId: assetID, TenantId: "acme",
				ApprovalState: luciusv1.ApprovalState_APPROVAL_STATE_APPROVED, Note: pick(other, "looks right", "another"), RequestId: id})
		},
		state: func() string { return s.snapshot(`SELECT * FROM assets WHERE asset_id = $1`, assetID) },
	}, {
		method: luciusv1.AssetService_DeleteAsset_FullMethodName,
		call: func(id string, other bool) (proto.Message, error) {
			return assets.DeleteAsset(s.ctx, &luciusv1.DeleteAssetRequest{AssetId: assetID, TenantId: pick(other, "acme", "globex"), RequestId: id})
		},
		state: func() string { return s.snapshot(`SELECT * FROM assets WHERE asset_id = $1`, assetID) },
	}, {
		method: luciusv1.CircuitBreakerService_ResetCircuitBreaker_FullMethodName,
		call: func(id string, other bool) (proto.Message, error) {
			return breakers.ResetCircuitBreaker(s.ctx, &luciusv1.ResetCircuitBreakerRequest{Service: "ocr",
				Reason: pick(other, "fixed upstream", "another"), RequestId: id})
		},
		state: func() string {
			return s.snapshot(`SELECT b.*, (SELECT count(*) FROM circuit_transitions WHERE service = 'ocr') AS transitions
				FROM circuit_breakers b WHERE service = 'ocr'`)
		},
	}}

	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.method] = true
	}
	for _, m := range methodsWithRequestID(t) {
		if !covered[m] {
			t.Errorf("%s takes a request_id but has no case here", m)
		}
	}

	for i, c := range cases {
		t.Run(c.method[strings.LastIndex(c.method, "/")+1:], func(t *testing.T) {
			if c.setup != nil {
				c.setup(t)
			}
			id := fmt.Sprintf("e2e-%d-%d", i, time.Now().UnixNano())
			before := c.state()
			first, err := c.call(id, false)
			if err != nil {
				t.Fatalf("first call: %v", err)
			}
			changed := c.state()
			if changed == before {
				t.Fatalf("the first call changed nothing the test reads: %s", changed)
			}
			again, err := c.call(id, false)
			if err != nil || !proto.Equal(first, again) {
				t.Fatalf("retry: %v, %v; want the first answer %v", again, err, first)
			}
			if after := c.state(); after != changed {
				t.Fatalf("the retry changed state:\nafter the first call: %s\nafter the retry:      %s", changed, after)
			}
			_, err = c.call(id, true)
			if status.Code(err) != codes.AlreadyExists || server.ReasonOf(err) != luciusv1.ErrorReason_ERROR_REASON_REQUEST_ID_REUSED {
				t.Fatalf("same id, another request: %v, want ALREADY_EXISTS REQUEST_ID_REUSED", err)
			}
			if after := c.state(); after != changed {
				t.Fatalf("the refused call changed state: %s", after)
			}
		})
	}

	// Over REST the id is a field like any other (a query parameter where
	// the body is one field): the gateway's REST calls pass the same interceptor.
	path := "/v1/config/tenants/reqid-rest?request_id=rest-1"
	body := map[string]any{"mode": "MODE_DEFAULT"}
	code, first := s.rest("PUT", path, body)
	if code != http.StatusOK {
		t.Fatalf("REST update: %d %v", code, first)
	}
	changes := s.count(`SELECT count(*) FROM config_changes`)
	if code, again := s.rest("PUT", path, body); code != http.StatusOK || fmt.Sprint(again) != fmt.Sprint(first) ||
		s.count(`SELECT count(*) FROM config_changes`) != changes {
		t.Fatalf("REST retry: %d %v, want the first answer %v and no new revision", code, again, first)
	}
	if code, refused := s.rest("PUT", path, map[string]any{"mode": "MODE_BURST"}); code != http.StatusConflict {
		t.Fatalf("REST retry with another body: %d %v, want 409", code, refused)
	} else if reason, _ := restReason(refused); reason != server.Reason(luciusv1.ErrorReason_ERROR_REASON_REQUEST_ID_REUSED) {
		t.Fatalf("REST refusal reason %q", reason)
	}

	// The CLI sends --request-id with the change it makes.
	pause := func(reason string) (string, int) {
		_, stderr, code := s.cli(s.operator, "--request-id", "cli-1", "pause", "--tenant", "reqid-cli", "--reason", reason)
		return stderr, code
	}
	if stderr, code := pause("incident"); code != 0 {
		t.Fatalf("lucius pause --request-id: exit %d %s", code, stderr)
	}
	paused := s.snapshot(`SELECT * FROM config_pauses WHERE key = 'reqid-cli'`)
	if stderr, code := pause("incident"); code != 0 || s.snapshot(`SELECT * FROM config_pauses WHERE key = 'reqid-cli'`) != paused {
		t.Fatalf("lucius pause again with the same --request-id: exit %d %s, or the pause changed", code, stderr)
	}
	if stderr, code := pause("another"); code == 0 || !strings.Contains(stderr, "REQUEST_ID_REUSED") {
		t.Fatalf("lucius pause with the same --request-id and another reason: exit %d %s", code, stderr)
	}

	// Replays are counted, by method and outcome.
	resp, err := s.metrics(s.Endpoints.GatewayHTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	scraped, _ := io.ReadAll(resp.Body)
	replayed := regexp.MustCompile(`lucius_gateway_request_ids_total\{[^}]*method="/lucius.v1.JobService/CancelJob"[^}]*outcome="replayed"[^}]*\} 1\b`)
	if !replayed.Match(scraped) {
		t.Fatalf("no replayed CancelJob in the gateway's metrics:\n%s", grepLines(string(scraped), "lucius_gateway_request_ids_total"))
	}
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// snapshot renders the rows of query as sorted JSON, to compare states.
func (s *suite) snapshot(query string, args ...any) string {
	s.t.Helper()
	var out string
	if err := s.pool.QueryRow(s.ctx, `SELECT coalesce(string_agg(j, ' | ' ORDER BY j), '') FROM
		(SELECT row_to_json(t)::text AS j FROM (`+query+`) t) q`, args...).Scan(&out); err != nil {
		s.t.Fatalf("snapshot %q: %v", query, err)
	}
	return out
}

// methodsWithRequestID lists the contract's methods whose request has a
// request_id field.
func methodsWithRequestID(t *testing.T) []string {
	t.Helper()
	var out []string
	protoregistry.GlobalFiles.RangeFilesByPackage("lucius.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				md := sd.Methods().Get(j)
				if md.Input().Fields().ByName("request_id") != nil {
					out = append(out, fmt.Sprintf("/%s/%s", sd.FullName(), md.Name()))
				}
			}
		}
		return true
	})
	if len(out) == 0 {
		t.Fatal("no method takes a request_id: the contract is not registered")
	}
	return out
}
