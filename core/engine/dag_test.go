package engine_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

// succeedWith reports step success with an output.
func (f *fixture) succeedWith(s ledger.StepWithAttempts, output map[string]any) engineResult {
	f.t.Helper()
	r, err := f.eng.Result(f.ctx, engine.CallbackKey{JobID: s.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo, LeaseID: s.LeaseID},
		engine.Result{Status: engine.ResultSucceeded, Output: object(f.t, output),
			Artifacts: []ledger.Artifact{{Name: "out", URI: "file:///tmp/ws/" + s.StepID + ".json"}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return engineResult{outcome: r.Outcome, step: r.StepStatus, job: r.JobStatus}
}

type engineResult struct {
	outcome luciusv1.CallbackOutcome
	step    ledger.StepStatus
	job     ledger.JobStatus
}

// step returns one step by id, with its attempts.
func (f *fixture) step(jobID, stepID string) ledger.StepWithAttempts {
	f.t.Helper()
	all, err := f.store.ListSteps(f.ctx, jobID, ledger.StepFilter{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, s := range all {
		if s.StepID == stepID {
			return s
		}
	}
	f.t.Fatalf("job %s has no step %s", jobID, stepID)
	return ledger.StepWithAttempts{}
}

func (f *fixture) directive(jobID, stepID string) *luciusv1.Directive {
	f.t.Helper()
	var body []byte
	err := f.store.Pool().QueryRow(f.ctx, `SELECT body FROM outbox WHERE job_id = $1 AND step_id = $2 AND kind = 'directive'
		ORDER BY attempt_no DESC LIMIT 1`, jobID, stepID).Scan(&body)
	if err != nil {
		f.t.Fatalf("directive of %s/%s: %v", jobID, stepID, err)
	}
	d := &luciusv1.Directive{}
	if err := protojson.Unmarshal(body, d); err != nil {
		f.t.Fatal(err)
	}
	return d
}

func TestConditionalTakesTheBranchTheOutputSelects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sizeMB        float64
		taken, missed string
	}{{12, "process_fa", "process_docker"}, {640, "process_docker", "process_fa"}} {
		t.Run(tc.taken, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			q := f.acceptWith("raster_processing", map[string]any{"container_name": "bronze", "blob_name": "a.tif"}, "")
			f.create(q)
			validate := f.current(q.JobId)
			if d := f.directive(q.JobId, "validate"); d.Payload.AsMap()["blob_name"] != "a.tif" || d.FinalStep {
				t.Fatalf("validate directive payload %v final %v", d.Payload.AsMap(), d.FinalStep)
			}
			f.succeedWith(validate, map[string]any{"file_size_mb": tc.sizeMB, "blob_url": "file:///tmp/a.tif"})
			if got := f.step(q.JobId, tc.missed).Status; got != ledger.StepSkipped {
				t.Fatalf("%s is %s, want SKIPPED", tc.missed, got)
			}
			next := f.current(q.JobId)
			if next.StepID != tc.taken {
				t.Fatalf("dispatched %s, want %s", next.StepID, tc.taken)
			}
			d := f.directive(q.JobId, tc.taken)
			if p := d.Payload.AsMap(); p["source_url"] != "file:///tmp/a.tif" || p["target_crs"] != "EPSG:3857" || !d.FinalStep {
				t.Fatalf("%s directive payload %v final %v", tc.taken, p, d.FinalStep)
			}
			if d.InputRef != "file:///tmp/ws/validate.json" {
				t.Fatalf("input_ref %s, want validate's artifact", d.InputRef)
			}
			if !hasEvent(f.events(q.JobId), ledger.EventBranchTaken, "") {
				t.Fatal("no BRANCH_TAKEN event")
			}
			if r := f.succeedWith(next, map[string]any{"cog": "ok"}); r.job != ledger.JobSucceeded {
				t.Fatalf("job after the branch: %s", r.job)
			}
			assertTerminalNeverChanged(t, f.events(q.JobId))
		})
	}
}

// Hundreds of children reporting at once: the fan-in fires exactly once, after
// the last of them, with their outputs in index order.
func TestFanOutSurvivesConcurrentResultsAndFiresFanInOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 300
	q := f.acceptWith("tile_mosaic", map[string]any{"tiles": n}, "")
	f.create(q)
	plan := f.current(q.JobId)
	tiles := make([]any, n)
	for i := range tiles {
		tiles[i] = map[string]any{"index": i}
	}
	f.succeedWith(plan, map[string]any{"tiles": tiles})
	var kids []ledger.StepWithAttempts
	for _, s := range f.steps(q.JobId) {
		if s.Kind == ledger.KindChild {
			kids = append(kids, s)
		}
	}
	if len(kids) != n {
		t.Fatalf("%d children, want %d", len(kids), n)
	}
	for i, k := range kids {
		if k.StepID != fmt.Sprintf("split[%d]", i) || k.Status != ledger.StepDispatching {
			t.Fatalf("child %d: %s %s", i, k.StepID, k.Status)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, k := range kids {
		wg.Add(1)
		out := object(t, map[string]any{"tile": i})
		go func() {
			defer wg.Done()
			_, err := f.eng.Result(f.ctx, engine.CallbackKey{JobID: k.JobID, StepID: k.StepID, AttemptNo: 1, LeaseID: k.LeaseID},
				engine.Result{Status: engine.ResultSucceeded, Output: out})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	split := f.step(q.JobId, "split")
	if split.Status != ledger.StepSucceeded || split.Children.Succeeded != n || split.Children.Running != 0 {
		t.Fatalf("fan-out %s children %+v", split.Status, split.Children)
	}
	agg := f.step(q.JobId, "aggregate")
	if agg.Status != ledger.StepDispatching || len(agg.Attempts) != 1 {
		t.Fatalf("aggregate %s with %d attempts, want one dispatch", agg.Status, len(agg.Attempts))
	}
	var params struct {
		Results []struct {
			Tile int `json:"tile"`
		} `json:"results"`
	}
	if err := json.Unmarshal(agg.Params, &params); err != nil {
		t.Fatal(err)
	}
	for i, r := range params.Results {
		if r.Tile != i {
			t.Fatalf("aggregate input %d is tile %d: fan_in output out of order", i, r.Tile)
		}
	}
	if len(params.Results) != n {
		t.Fatalf("aggregate got %d results, want %d", len(params.Results), n)
	}
	if d := f.directive(q.JobId, "aggregate"); len(d.UpstreamArtifacts) != 0 || !d.FinalStep {
		t.Fatalf("aggregate directive: %d upstream artifacts, final %v", len(d.UpstreamArtifacts), d.FinalStep)
	}
}

const failFastYAML = `workflow_id: fail_fast
version: 1
inputs:
  items: {type: list, default: [a, b, c, d, e]}
nodes:
  START: {type: start, next: fan}
  fan:
    type: fan_out
    over: "{{ inputs.items }}"
    max_parallel: 2
    task: {handler: tile_process}
    next: END
  END: {type: end}
`

func TestFailedChildFailsTheJobFastAndRunningSiblingsAreRecorded(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, _, err := f.reg.Register(f.ctx, "fail_fast.yaml", []byte(failFastYAML), "test"); err != nil {
		t.Fatal(err)
	}
	q := f.acceptWith("fail_fast", map[string]any{}, "")
	f.create(q)
	kids := f.steps(q.JobId)
	if kids[0].Status != ledger.StepDispatching || kids[1].Status != ledger.StepDispatching || kids[2].Status != ledger.StepPending {
		t.Fatalf("max_parallel 2 not honoured: %s %s %s", kids[0].Status, kids[1].Status, kids[2].Status)
	}
	r := f.result(q.JobId, "fan[0]", 1, kids[0].LeaseID, engine.ResultFailed, false)
	if r.JobStatus != ledger.JobFailedFinal {
		t.Fatalf("job after a failed child: %s", r.JobStatus)
	}
	for _, k := range f.steps(q.JobId)[2:] {
		if k.Status != ledger.StepCancelled || k.AttemptNo != 0 {
			t.Fatalf("unstarted sibling %s is %s (attempt %d), want CANCELLED, never started", k.StepID, k.Status, k.AttemptNo)
		}
	}
	// The sibling that was running finishes; its result is recorded, the job stays failed.
	late := f.succeed(kids[1])
	if late.Outcome != applied || late.StepStatus != ledger.StepSucceeded || late.JobStatus != ledger.JobFailedFinal {
		t.Fatalf("running sibling's result: %+v", late)
	}
	fan := f.step(q.JobId, "fan")
	if fan.Status != ledger.StepFailedFinal || fan.Children.Running != 0 || fan.Children.Succeeded != 1 || fan.Children.Failed != 1 {
		t.Fatalf("fan-out %s %+v", fan.Status, fan.Children)
	}
	directives := 0
	for _, m := range f.outbox(q.JobId) {
		if m.Kind == ledger.KindDirective {
			directives++
		}
	}
	if n := directives; n != 2 {
		t.Fatalf("%d directives, want 2: nothing dispatched after the failure", n)
	}
	assertTerminalNeverChanged(t, f.events(q.JobId))
}

func TestOversizedOutputFailsTheStepWithAClearReason(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	f.create(q)
	s := f.current(q.JobId)
	r := f.succeedWith(s, map[string]any{"blob": strings.Repeat("x", 300<<10)})
	if r.step != ledger.StepFailedFinal || r.job != ledger.JobFailedFinal {
		t.Fatalf("oversized output: %+v", r)
	}
	if got := f.steps(q.JobId)[0]; !strings.Contains(got.Reason, "OUTPUT_TOO_LARGE") || !strings.Contains(got.Reason, "artifacts") {
		t.Fatalf("step reason %q", got.Reason)
	}
}

func TestTerminalJobWithCallbackURLEnqueuesItsCompletion(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.acceptWith("OCR", map[string]any{}, "https://partner.example/hooks/lucius")
	f.create(q)
	f.succeed(f.current(q.JobId))
	var dest string
	var body []byte
	err := f.store.Pool().QueryRow(f.ctx, `SELECT destination, body FROM outbox WHERE job_id = $1 AND kind = 'completion-callback'`,
		q.JobId).Scan(&dest, &body)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if dest != "https://partner.example/hooks/lucius" || got["job_id"] != q.JobId || got["status"] != "SUCCEEDED" || got["result_ref"] != "file:///out.json" {
		t.Fatalf("completion %s %v", dest, got)
	}
}

const customYAML = `workflow_id: summarize_twice
version: 1
inputs:
  prompt_set: {type: list, items: string, required: true}
nodes:
  START: {type: start, next: [first, second]}
  first: {type: task, handler: SIS, params: {prompt_set: "{{ inputs.prompt_set }}"}, next: join}
  second: {type: task, handler: SIS, params: {prompt_set: "{{ inputs.prompt_set }}"}, next: join}
  join: {type: fan_in, next: END}
  END: {type: end}
`

// A new request type is a new definition only: registered, then run.
func TestRegisteredWorkflowRunsWithoutCodeChanges(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, _, err := f.reg.Register(f.ctx, "summarize_twice.yaml", []byte(customYAML), "test"); err != nil {
		t.Fatal(err)
	}
	q := f.acceptWith("summarize_twice", map[string]any{"prompt_set": []any{"q"}}, "")
	f.create(q)
	steps := f.steps(q.JobId)
	if len(steps) != 2 || steps[0].Status != ledger.StepDispatching || steps[1].Status != ledger.StepDispatching {
		t.Fatalf("parallel branches not both dispatched: %+v", steps)
	}
	f.succeed(steps[0])
	if r := f.succeed(steps[1]); r.JobStatus != ledger.JobSucceeded {
		t.Fatalf("job %s", r.JobStatus)
	}
	if got := f.step(q.JobId, "join").Status; got != ledger.StepSucceeded {
		t.Fatalf("join is %s", got)
	}
}

// spreadYAML fans out over inputs.items; each child's params repeat the whole
// array, so the children's params grow with the square of its length.
const spreadYAML = `workflow_id: spread
version: 1
inputs:
  items: {type: list, required: true}
nodes:
  START: {type: start, next: each}
  each:
    type: fan_out
    over: "{{ inputs.items }}"
    task:
      handler: OCR
      params: {item: "{{ item }}", all: "{{ inputs.items }}"}
    next: END
  END: {type: end}
`

func TestFanOutOverTheLimitsFailsTheJobWithoutCreatingChildren(t *testing.T) {
	t.Parallel()
	limits := workflow.Limits{MaxFanOut: 10, MaxExpansionBytes: 3000}
	word := strings.Repeat("x", 30)
	items := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = word
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		items    int
		children int    // created
		reason   string // in the job's reason when it fails
	}{
		{"within both limits", 8, 8, ""}, // 8 children × about 310 bytes
		{"wider than max_fan_out", 11, 0, "max_fan_out"},
		{"params over max_expansion_bytes", 10, 0, "max_expansion_bytes"}, // 10 × about 380 bytes
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setupWithLimits(t, limits)
			if _, _, err := f.reg.Register(f.ctx, "spread.yaml", []byte(spreadYAML), "test"); err != nil {
				t.Fatal(err)
			}
			q := f.acceptWith("spread", map[string]any{"items": items(tc.items)}, "")
			job := f.job(f.create(q).JobID)
			if got := len(f.steps(q.JobId)); got != tc.children {
				t.Errorf("%d children created, want %d", got, tc.children)
			}
			if tc.reason == "" {
				if job.Status.Terminal() {
					t.Fatalf("job %s: %s", job.Status, job.Reason)
				}
				return
			}
			if job.Status != ledger.JobFailedFinal || !strings.Contains(job.Reason, tc.reason) || !strings.Contains(job.Reason, "each") {
				t.Fatalf("job %s with reason %q, want FAILED_FINAL naming %s and the fan_out", job.Status, job.Reason, tc.reason)
			}
			if s := f.step(q.JobId, "each"); s.Status != ledger.StepFailedFinal {
				t.Errorf("fan_out step is %s, want FAILED_FINAL", s.Status)
			}
		})
	}
}
