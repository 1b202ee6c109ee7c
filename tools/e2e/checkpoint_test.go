package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// phasedWorkflowYAML is a workflow id of one long PHASED step
// (services/worker-skeleton/examples/phased), which checkpoints after each
// phase and resumes from the last one, with the task's extra settings.
func phasedWorkflowYAML(id, task string) string {
	return `workflow_id: ` + id + `
version: 1
description: One step in phases that checkpoints after each.
inputs:
  phases: {type: integer, required: true}
  phase_ms: {type: integer, required: true}
nodes:
  START: {type: start, next: phased}
  phased:
    type: task
    handler: PHASED
    params: {phases: "{{ inputs.phases }}", phase_ms: "{{ inputs.phase_ms }}"}
` + task + `    next: END
  END: {type: end}
`
}

var (
	// phasedWorkflow leases the step for 2 minutes.
	phasedWorkflow = phasedWorkflowYAML("E2E_PHASED", "    timeout_seconds: 120\n")
	// phasedShortLeaseWorkflow leases it for 3 s (kept alive by heartbeats)
	// with three attempts: a worker that dies loses the attempt within
	// seconds and the step's next attempt runs.
	phasedShortLeaseWorkflow = phasedWorkflowYAML("E2E_PHASED_SHORT_LEASE",
		"    timeout_seconds: 3\n    retry: {max_attempts: 3, backoff: fixed, initial_delay_seconds: 1}\n")
)

// The example's service (its worker process) and checkpoint name.
const phasedWorker, phasedCheckpoint = "worker-phased", "progress"

// phasedPhase is one phase the PHASED step reports done: by which execution
// (run: 1, then 2 for one resuming from a checkpoint) and attempt.
type phasedPhase struct {
	Phase     int `json:"phase"`
	Run       int `json:"run"`
	AttemptNo int `json:"attempt_no"`
}

// phasedOutput is the PHASED step's output.
type phasedOutput struct {
	Phases       int           `json:"phases"`
	Digest       string        `json:"digest"`
	Run          int           `json:"run"`
	ResumedAfter int           `json:"resumed_after"`
	Done         []phasedPhase `json:"done"`
}

// A worker stopped in the middle of a long step — SIGTERM, or killed
// outright — does not make the step start over: the next execution (the
// same attempt redelivered after SIGTERM, the step's next attempt after a
// kill) loads the last checkpoint and runs only the phases after it. Each
// phase is checkpointed once, as one CHECKPOINT_SAVED event of the job.
func TestAStoppedWorkerResumesTheStepFromItsCheckpoint(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{workers: []string{"phased"}, env: map[string]string{
		"LUCIUS_LOG_LEVEL":             "info",
		"LUCIUS_SWEEP_LEASE_INTERVAL":  "200ms",
		"LUCIUS_WORKER_SHUTDOWN_GRACE": "20s",
	}})
	const phases = 6
	tests := []struct {
		name, workflow string
		stop           func() error
		// resumedAttempt is the attempt that resumes: the same one after
		// SIGTERM (released, redelivered), the next after a kill (lease expired).
		resumedAttempt int
	}{
		{"SIGTERM", "E2E_PHASED", func() error { return s.Terminate(phasedWorker) }, 1},
		{"SIGKILL", "E2E_PHASED_SHORT_LEASE", func() error { return s.Kill(phasedWorker) }, 2},
	}
	for _, tt := range tests {
		out, outPath := s.output(strings.ToLower(tt.name) + ".json")
		id := s.submit(tt.workflow, map[string]any{"phases": phases, "phase_ms": 600}, s.input(tt.name+".txt", "x"), out, "")
		// Stop the worker once two phases are checkpointed, mid-step.
		s.waitCheckpoints(id, 2)
		if err := tt.stop(); err != nil {
			t.Fatal(err)
		}
		before := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'CHECKPOINT_SAVED'`, id)
		if before < 2 || before >= phases {
			t.Fatalf("%s: %d phases checkpointed when the worker stopped, want 2..%d", tt.name, before, phases-1)
		}
		if tt.name == "SIGTERM" && !strings.Contains(s.logs.Tail(400), "execution interrupted by shutdown; releasing the attempt for redelivery") {
			t.Fatalf("%s: the worker did not release the attempt at shutdown", tt.name)
		}
		if err := s.Restart(s.ctx, phasedWorker); err != nil {
			t.Fatal(err)
		}
		job := s.waitJob(id, 90*time.Second)
		if job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
			t.Fatalf("%s: job ended %s: %s", tt.name, job.GetStatus(), job.GetReason())
		}
		step := s.allSteps(id)["phased"]
		if int(step.GetAttemptNo()) != tt.resumedAttempt {
			t.Fatalf("%s: the step succeeded on attempt %d, want %d", tt.name, step.GetAttemptNo(), tt.resumedAttempt)
		}
		var o phasedOutput
		raw, _ := json.Marshal(step.GetOutput().AsMap())
		if err := json.Unmarshal(raw, &o); err != nil {
			t.Fatal(err)
		}
		// The phases checkpointed before the stop ran in run 1 (attempt 1),
		// the rest in run 2, by the resuming attempt; none ran twice.
		if o.Run != 2 || o.ResumedAfter != before || len(o.Done) != phases || o.Digest == "" {
			t.Fatalf("%s: output %s; want run 2 resumed after %d phases", tt.name, raw, before)
		}
		for i, ph := range o.Done {
			want := phasedPhase{Phase: i + 1, Run: 1, AttemptNo: 1}
			if i >= before {
				want = phasedPhase{Phase: i + 1, Run: 2, AttemptNo: tt.resumedAttempt}
			}
			if ph != want {
				t.Fatalf("%s: phase %d ran as %+v, want %+v (output %s)", tt.name, i+1, ph, want, raw)
			}
		}
		t.Logf("%s: stopped after %d of %d phases; attempt %d resumed and ran phases %d-%d", tt.name, before, phases,
			tt.resumedAttempt, before+1, phases)
		if final, err := os.ReadFile(outPath); err != nil || !strings.Contains(string(final), o.Digest) {
			t.Fatalf("%s: output_ref: %s, %v", tt.name, final, err)
		}
		// One CHECKPOINT_SAVED per phase, each naming the checkpoint and
		// the attempt that saved it.
		saved := s.checkpointEvents(id)
		if len(saved) != phases {
			t.Fatalf("%s: %d CHECKPOINT_SAVED events, want %d", tt.name, len(saved), phases)
		}
		for i, e := range saved {
			wantAttempt := int32(1)
			if i >= before {
				wantAttempt = int32(tt.resumedAttempt)
			}
			if e.GetStepId() != "phased" || e.GetAttemptNo() != wantAttempt || e.GetData().AsMap()["checkpoint_name"] != phasedCheckpoint {
				t.Fatalf("%s: event %d: %v", tt.name, i, e)
			}
		}
	}
}

// waitCheckpoints waits until the job has n CHECKPOINT_SAVED events.
func (s *suite) waitCheckpoints(jobID string, n int) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND type = 'CHECKPOINT_SAVED'`, jobID) < n {
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s: fewer than %d checkpoints saved after 60s", jobID, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkpointEvents lists the job's CHECKPOINT_SAVED events through the API.
func (s *suite) checkpointEvents(jobID string) []*luciusv1.JobEvent {
	s.t.Helper()
	resp, err := s.jobs.ListJobEvents(s.ctx, &luciusv1.ListJobEventsRequest{JobId: jobID, PageSize: 1000})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []*luciusv1.JobEvent
	for _, e := range resp.GetEvents() {
		if e.GetType() == "CHECKPOINT_SAVED" {
			out = append(out, e)
		}
	}
	return out
}
