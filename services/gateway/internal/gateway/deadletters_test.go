package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lucius-platform/lucius/base/auth"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/workflow"
)

// failJob claims a submitted job the way an orchestrator does and fails its
// first step for good.
func (f *gatewayFixture) failJob(t *testing.T, store *ledger.Store, jobID string) {
	t.Helper()
	eng, err := engine.New(store, engine.Config{CallbackKeys: testCallbackKeys, Definitions: registry.New(store, workflow.Limits{}), WorkspaceRoot: "file:///ws",
		Callbacks: engine.Callbacks{GRPCTarget: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	if err := f.pool.QueryRow(f.ctx, `SELECT body FROM outbox WHERE job_id = $1 AND kind = 'job-request'`, jobID).Scan(&body); err != nil {
		t.Fatal(err)
	}
	q := &luciusv1.QueuedJob{}
	if err := protojson.Unmarshal(body, q); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateJob(f.ctx, q, "orch-test"); err != nil {
		t.Fatal(err)
	}
	var lease string
	if err := f.pool.QueryRow(f.ctx, `SELECT lease_id::text FROM steps WHERE job_id = $1 AND step_id = 'ocr'`, jobID).Scan(&lease); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Result(f.ctx, engine.CallbackKey{JobID: jobID, StepID: "ocr", AttemptNo: 1, LeaseID: lease},
		engine.Result{Status: engine.ResultFailed, Reason: "unreadable scan"}); err != nil {
		t.Fatal(err)
	}
}

func TestDeadLettersAndReplayOverREST(t *testing.T) {
	t.Parallel()
	f := startGateway(t)
	store := ledger.New(f.pool, nil)
	t.Cleanup(store.Close)
	_, body := f.rest(t, "POST", "/v1/commands", validBody("replay-me"))
	jobID := body["job_id"].(string)

	tests := []struct {
		name, method, path string
		body               any
		code               int
		reason             string
		field              string
	}{
		{"replay of a job still waiting", "POST", "/v1/jobs/" + jobID + ":replay", map[string]any{}, http.StatusBadRequest, server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_REPLAYABLE), ""},
		{"replay of an unknown job", "POST", "/v1/jobs/" + strings.Repeat("0", 64) + ":replay", map[string]any{}, http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND), ""},
		{"replay of a malformed id", "POST", "/v1/jobs/nope:replay", map[string]any{}, http.StatusBadRequest, "", "job_id"},
		{"unknown dead letter", "GET", "/v1/deadletters/999999", nil, http.StatusNotFound, server.Reason(luciusv1.ErrorReason_ERROR_REASON_DEAD_LETTER_NOT_FOUND), ""},
		{"dead letter id zero", "GET", "/v1/deadletters/0", nil, http.StatusBadRequest, "", "dead_letter_id"},
		{"bad page token", "GET", "/v1/deadletters?page_token=xyz", nil, http.StatusBadRequest, server.Reason(luciusv1.ErrorReason_ERROR_REASON_INVALID_PAGE_TOKEN), "page_token"},
		{"page size over the limit", "GET", "/v1/deadletters?page_size=501", nil, http.StatusBadRequest, "", "page_size"},
	}
	for _, tt := range tests {
		code, out := f.rest(t, tt.method, tt.path, tt.body)
		if code != tt.code || (tt.reason != "" && reasonOf(out) != tt.reason) || (tt.field != "" && !hasFieldViolation(out, tt.field)) {
			t.Fatalf("%s: %d %v", tt.name, code, out)
		}
	}
	if n := f.count(t, "requests"); n != 1 {
		t.Fatalf("rejected calls wrote requests: %d", n)
	}

	f.failJob(t, store, jobID)
	if _, err := store.CollectDeadLetter(f.ctx, ledger.DeadLetter{Kind: ledger.DeadLetterBus, Reason: "PoisonMessage",
		Entity: "orchestrator-jobs/$deadletterqueue", MessageID: "m-1", Body: []byte("garbage")}); err != nil {
		t.Fatal(err)
	}
	code, list := f.rest(t, "GET", "/v1/deadletters?page_size=1", nil)
	letters, _ := list["dead_letters"].([]any)
	if code != http.StatusOK || len(letters) != 1 || list["next_page_token"] == "" {
		t.Fatalf("first page: %d %v", code, list)
	}
	newest := letters[0].(map[string]any)
	if newest["kind"] != "DEAD_LETTER_KIND_BUS" || newest["body"] != "garbage" {
		t.Fatalf("newest dead letter %v", newest)
	}
	code, list = f.rest(t, "GET", "/v1/deadletters?page_size=1&page_token="+list["next_page_token"].(string), nil)
	letters, _ = list["dead_letters"].([]any)
	if code != http.StatusOK || len(letters) != 1 {
		t.Fatalf("second page: %d %v", code, list)
	}
	step := letters[0].(map[string]any)
	if step["kind"] != "DEAD_LETTER_KIND_STEP" || step["job_id"] != jobID || step["step_id"] != "ocr" ||
		step["reason"] != "RESULT_FAILED_NON_RETRYABLE" {
		t.Fatalf("step dead letter %v", step)
	}
	id := step["dead_letter_id"].(string) // int64 travels as a JSON string
	if code, one := f.rest(t, "GET", "/v1/deadletters/"+id, nil); code != http.StatusOK ||
		one["dead_letter"].(map[string]any)["description"] != "unreadable scan" {
		t.Fatalf("get dead letter: %d %v", code, one)
	}
	code, filtered := f.rest(t, "GET", "/v1/deadletters?kind=DEAD_LETTER_KIND_STEP&job_id="+jobID, nil)
	if letters, _ := filtered["dead_letters"].([]any); code != http.StatusOK || len(letters) != 1 {
		t.Fatalf("filtered: %d %v", code, filtered)
	}

	code, replayed := f.rest(t, "POST", "/v1/jobs/"+jobID+":replay", map[string]any{"reason": "fixed the scanner"})
	job, _ := replayed["job"].(map[string]any)
	if code != http.StatusOK || job["replay_of"] != jobID || job["job_id"] == jobID || job["status"] != "JOB_STATUS_RECEIVED" {
		t.Fatalf("replay: %d %v", code, replayed)
	}
	code, again := f.rest(t, "POST", "/v1/jobs/"+jobID+":replay", map[string]any{})
	if code != http.StatusOK || again["job"].(map[string]any)["job_id"] != job["job_id"] {
		t.Fatalf("repeated replay: %d %v", code, again)
	}
	if code, one := f.rest(t, "GET", "/v1/deadletters/"+id, nil); code != http.StatusOK ||
		one["dead_letter"].(map[string]any)["replay_job_id"] != job["job_id"] {
		t.Fatalf("dead letter after replay: %d %v", code, one)
	}
}

// testCallbackKeys sign the callback tokens of the tests' directives.
var testCallbackKeys = func() *auth.CallbackKeys {
	k, err := auth.GenerateCallbackKeys()
	if err != nil {
		panic(err)
	}
	return k
}()
