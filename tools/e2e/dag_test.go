package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// submit sends a command of tenant acme over gRPC and returns its job id.
func (s *suite) submit(requestType string, payload map[string]any, input, output, callback string) string {
	s.t.Helper()
	return s.submitAs("acme", requestType, payload, input, output, callback)
}

// submitAs sends a command of tenant over gRPC and returns its job id.
func (s *suite) submitAs(tenant, requestType string, payload map[string]any, input, output, callback string) string {
	s.t.Helper()
	p, err := structpb.NewStruct(payload)
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := s.cmds.Submit(s.ctx, &luciusv1.SubmitRequest{Command: &luciusv1.Command{TenantId: tenant,
		RequestType: requestType, SchemaVersion: "1", InputRef: input, OutputRef: output, Payload: p, CallbackUrl: callback}})
	if err != nil {
		s.t.Fatalf("submit %s: %v", requestType, err)
	}
	return resp.GetJobId()
}

// allSteps lists every step of a job, every workflow node included.
func (s *suite) allSteps(jobID string) map[string]*luciusv1.Step {
	s.t.Helper()
	out := map[string]*luciusv1.Step{}
	token := ""
	for {
		resp, err := s.jobs.ListJobSteps(s.ctx, &luciusv1.ListJobStepsRequest{JobId: jobID, View: luciusv1.StepView_STEP_VIEW_FULL,
			PageSize: 5000, PageToken: token})
		if err != nil {
			s.t.Fatal(err)
		}
		for _, st := range resp.GetSteps() {
			out[st.GetStepId()] = st
		}
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
}

func TestConditionalWorkflowTakesEachBranchByInput(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	small := s.input("small.tif", "a small raster")
	bigPath := filepath.Join(s.inputs, "big.tif")
	if err := os.WriteFile(bigPath, []byte("header"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(bigPath, 150<<20); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	for _, c := range []struct {
		input, taken, skipped, pipeline string
	}{{small, "process_fa", "process_docker", "fa"}, {"file://" + bigPath, "process_docker", "process_fa", "docker"}} {
		out, outPath := s.output(c.taken + ".json")
		id := s.submit("raster_processing", map[string]any{"container_name": "bronze", "blob_name": c.taken + ".tif"}, c.input, out, "")
		job := s.waitJob(id, 60*time.Second)
		if job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
			t.Fatalf("%s job ended %s: %s", c.taken, job.GetStatus(), job.GetReason())
		}
		steps := s.allSteps(id)
		if steps[c.taken].GetStatus() != luciusv1.StepStatus_STEP_STATUS_SUCCEEDED ||
			steps[c.skipped].GetStatus() != luciusv1.StepStatus_STEP_STATUS_SKIPPED || steps[c.skipped].GetAttemptNo() != 0 {
			t.Fatalf("branch %s: taken %s, skipped %s (attempt %d)", c.taken, steps[c.taken].GetStatus(),
				steps[c.skipped].GetStatus(), steps[c.skipped].GetAttemptNo())
		}
		if got := steps["route_by_size"].GetOutput().AsMap()["branch"]; got != c.taken {
			t.Fatalf("conditional recorded branch %v, want %s", got, c.taken)
		}
		var manifest map[string]any
		raw, err := os.ReadFile(outPath)
		if err != nil || json.Unmarshal(raw, &manifest) != nil || manifest["pipeline"] != c.pipeline {
			t.Fatalf("final result at output_ref: %s (%v)", raw, err)
		}
	}
}

// The 1,000-way fan-out: exactly 1,000 child executions and one aggregate,
// whose digest proves every tile was processed, in order.
func TestThousandWayFanOutCompletes(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{"LUCIUS_LOG_LEVEL": "info"}})
	const tiles = 1000
	data := strings.Repeat("Lucius tiles the world. ", 2000) // 48,000 bytes
	input := s.input("mosaic.txt", data)
	out, outPath := s.output("mosaic.json")
	start := time.Now()
	id := s.submit("tile_mosaic", map[string]any{"tiles": tiles}, input, out, "")
	job := s.waitJob(id, 5*time.Minute)
	elapsed := time.Since(start)
	if job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("fan-out job ended %s: %s", job.GetStatus(), job.GetReason())
	}
	t.Logf("1,000-way fan-out: submit → SUCCEEDED in %s", elapsed.Round(time.Millisecond))
	if n := s.count(`SELECT count(*) FROM worker_executions WHERE job_id = $1 AND step_id LIKE 'split[%'`, id); n != tiles {
		t.Fatalf("%d child executions, want %d", n, tiles)
	}
	if n := s.count(`SELECT count(*) FROM worker_executions WHERE job_id = $1 AND step_id = 'aggregate'`, id); n != 1 {
		t.Fatalf("%d aggregate executions, want 1", n)
	}
	var mosaic struct {
		Tiles  int    `json:"tiles"`
		Digest string `json:"digest"`
	}
	raw, err := os.ReadFile(outPath)
	if err != nil || json.Unmarshal(raw, &mosaic) != nil {
		t.Fatalf("mosaic at output_ref: %s (%v)", raw, err)
	}
	if mosaic.Tiles != tiles || mosaic.Digest != expectedDigest(data, tiles) {
		t.Fatalf("mosaic %+v, want %d tiles with digest %s", mosaic, tiles, expectedDigest(data, tiles))
	}
}

// expectedDigest is tiles_aggregate's digest computed directly: the sha256 of
// the tiles' sha256 hex strings, in order, over an even split of the input.
func expectedDigest(data string, tiles int) string {
	all := sha256.New()
	size := len(data)
	for i := range tiles {
		from, to := i*size/tiles, (i+1)*size/tiles
		sum := sha256.Sum256([]byte(data[from:to]))
		all.Write([]byte(hex.EncodeToString(sum[:])))
	}
	return hex.EncodeToString(all.Sum(nil))
}

const limitedMosaic = `workflow_id: tile_mosaic_limited
name: Tile mosaic, four at a time
version: 1
inputs:
  tiles: {type: integer, min: 1, max: 10000, default: 16}
  fail_tile: {type: integer, default: -1}
nodes:
  START: {type: start, next: plan}
  plan: {type: task, handler: tiles_plan, params: {tiles: "{{ inputs.tiles }}"}, next: split}
  split:
    type: fan_out
    over: "{{ nodes.plan.output.tiles }}"
    max_parallel: 4
    task:
      handler: tile_process
      params: {tile: "{{ item }}", index: "{{ index }}", fail_tile: "{{ inputs.fail_tile }}"}
      retry: {max_attempts: 1}
    next: gather
  gather: {type: fan_in, next: aggregate}
  aggregate: {type: task, handler: tiles_aggregate, params: {results: "{{ nodes.gather.output }}"}, next: END}
  END: {type: end}
`

// A new request type is a definition only: registered through the API, then
// run. Its failing child fails the job fast: tiles not yet started never start.
func TestRegisteredWorkflowRunsAndAFailingChildFailsItFast(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	code, body := s.rest("POST", "/v1/workflows", map[string]any{"source": limitedMosaic})
	if code != http.StatusOK {
		t.Fatalf("register: %d %v", code, body)
	}
	input := s.input("limited.txt", strings.Repeat("x", 4000))
	okOut, okPath := s.output("limited-ok.json")
	if job := s.waitJob(s.submit("tile_mosaic_limited", map[string]any{"tiles": 12}, input, okOut, ""), 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("registered workflow ended %s: %s", job.GetStatus(), job.GetReason())
	}
	if _, err := os.Stat(okPath); err != nil {
		t.Fatalf("registered workflow wrote no result: %v", err)
	}
	failOut, _ := s.output("limited-fail.json")
	id := s.submit("tile_mosaic_limited", map[string]any{"tiles": 40, "fail_tile": 5}, input, failOut, "")
	job := s.waitJob(id, 60*time.Second)
	if job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL || !strings.Contains(job.GetReason(), "tile 5") {
		t.Fatalf("job ended %s (%s), want FAILED_FINAL naming tile 5", job.GetStatus(), job.GetReason())
	}
	// Let any child that was running at the failure report back.
	time.Sleep(500 * time.Millisecond)
	steps := s.allSteps(id)
	started, neverStarted := 0, 0
	for i := range 40 {
		st := steps[fmt.Sprintf("split[%d]", i)]
		switch {
		case st.GetAttemptNo() > 0:
			started++
		case st.GetStatus() == luciusv1.StepStatus_STEP_STATUS_CANCELLED:
			neverStarted++
		default:
			t.Fatalf("split[%d] is %s without an attempt", i, st.GetStatus())
		}
	}
	if neverStarted == 0 || started+neverStarted != 40 {
		t.Fatalf("%d tiles started and %d never started; fail-fast should leave the rest unstarted", started, neverStarted)
	}
	// How many started before tile 5's failure arrived depends on delivery
	// timing; that none started after it does not. Every write to a job holds
	// its row lock, so event ids order them.
	if n := s.count(`SELECT count(*) FROM job_events a WHERE a.job_id = $1 AND a.type = 'ATTEMPT_CREATED' AND a.step_id LIKE 'split[%'
		AND a.event_id > (SELECT min(f.event_id) FROM job_events f WHERE f.job_id = $1 AND f.step_id = 'split[5]' AND f.to_status = 'FAILED_FINAL')`, id); n != 0 {
		t.Fatalf("%d tiles started after tile 5 failed", n)
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND step_id = 'split[5]' AND to_status = 'FAILED_FINAL'`, id); n != 1 {
		t.Fatalf("tile 5's failure recorded %d times", n)
	}
	if n := s.count(`SELECT count(*) FROM worker_executions WHERE job_id = $1 AND step_id LIKE 'split[%'`, id); n != started {
		t.Fatalf("%d child executions for %d started children", n, started)
	}
	if st := steps["aggregate"]; st.GetAttemptNo() != 0 || st.GetStatus() != luciusv1.StepStatus_STEP_STATUS_CANCELLED {
		t.Fatalf("aggregate is %s (attempt %d), want CANCELLED unstarted", st.GetStatus(), st.GetAttemptNo())
	}
}

// The completion callback reaches a server that fails twice first; every
// delivery attempt is in the job's events, and each is signed with the
// tenant's webhook secret (Standard Webhooks), as the receiver verifies.
func TestCompletionCallbackIsRetriedUntilDelivered(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	receiver, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls []map[string]any
	var unverified []error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		mu.Lock()
		if err := receiver.Verify(raw, r.Header); err != nil {
			unverified = append(unverified, err)
		}
		calls = append(calls, body)
		n := len(calls)
		mu.Unlock()
		if n <= 2 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	s := startSuite(t, suiteOptions{env: map[string]string{"LUCIUS_CALLBACK_BACKOFF": "200ms"}})
	if code, body := s.rest("PUT", "/v1/config/tenants/acme", map[string]any{"webhook_secrets": []string{secret}}); code != http.StatusOK {
		t.Fatalf("set the webhook secret: %d %v", code, body)
	}
	out, _ := s.output("callback.json")
	id := s.submit("OCR", map[string]any{}, s.input("cb.txt", sampleText), out, srv.URL+"/hooks/lucius")
	if job := s.waitJob(id, 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("job ended %s", job.GetStatus())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'CALLBACK_DELIVERY' AND reason = 'DELIVERED'`, id) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("callback never delivered")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'CALLBACK_DELIVERY' AND reason = 'RETRY'`, id); n != 2 {
		t.Fatalf("%d RETRY delivery events, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 3 || calls[2]["job_id"] != id || calls[2]["status"] != "SUCCEEDED" || calls[2]["result_url"] != out ||
		calls[2]["result_ref"] != out {
		t.Fatalf("callback calls %v", calls)
	}
	if len(unverified) > 0 {
		t.Fatalf("deliveries the receiver could not verify: %v", unverified)
	}
}
