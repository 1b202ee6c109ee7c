package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// An operator pauses a tenant: its new jobs are accepted but wait, their
// first step READY with the pause as the reason, while another tenant's run;
// with --refuse-submits new commands are refused (503 WORK_PAUSED); resume
// dispatches what waited and the jobs succeed. Partners may not pause.
func TestPauseAndResumeATenant(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	op := s.operator
	if _, stderr, code := s.cli(op, "pause", "--tenant", "acme", "--reason", "incident 42"); code != 0 {
		t.Fatalf("pause: exit %d %s", code, stderr)
	}
	out, _ := s.output("paused.json")
	input := s.input("paused.txt", sampleText)
	paused := s.submitAs("acme", "OCR", map[string]any{}, input, out, "")
	other := s.submitAs("globex", "OCR", map[string]any{}, input, out+".globex", "")
	step := s.waitStep(paused, luciusv1.StepStatus_STEP_STATUS_READY)
	if !strings.Contains(step.GetReason(), "PAUSED") || !strings.Contains(step.GetReason(), "tenant acme") ||
		!strings.Contains(step.GetReason(), "incident 42") {
		t.Fatalf("the paused step's reason: %q", step.GetReason())
	}
	if job := s.waitJob(other, 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("another tenant's job: %s", job.GetStatus())
	}
	stdout, _, code := s.cli(op, "pauses")
	if code != 0 || !strings.Contains(stdout, "acme") || !strings.Contains(stdout, "incident 42") {
		t.Fatalf("pauses: %d\n%s", code, stdout)
	}
	if _, _, code := s.cli(s.partner("acme"), "pause", "--tenant", "acme"); code != 7 {
		t.Fatalf("a partner pauses: exit %d, want 7", code)
	}
	if _, _, code := s.cli(op, "pause"); code != 2 {
		t.Fatalf("a pause naming nothing: exit %d, want 2", code)
	}

	// Refusing submits too.
	if _, stderr, code := s.cli(op, "pause", "--tenant", "acme", "--reason", "incident 42", "--refuse-submits"); code != 0 {
		t.Fatalf("pause --refuse-submits: exit %d %s", code, stderr)
	}
	code, body := s.rest("POST", "/v1/commands", map[string]any{"tenant_id": "acme", "request_type": "OCR", "schema_version": "1",
		"input_ref": input, "output_ref": out + ".refused", "payload": map[string]any{}})
	if code != http.StatusServiceUnavailable || !strings.Contains(body["message"].(string), "paused") {
		t.Fatalf("a submit while refusing: %d %v", code, body)
	}
	if reason, _ := restReason(body); reason != server.Reason(luciusv1.ErrorReason_ERROR_REASON_WORK_PAUSED) {
		t.Fatalf("a refused submit's reason %q, want %s: %v", reason, server.Reason(luciusv1.ErrorReason_ERROR_REASON_WORK_PAUSED), body)
	}

	if _, stderr, code := s.cli(op, "resume", "--tenant", "acme"); code != 0 {
		t.Fatalf("resume: exit %d %s", code, stderr)
	}
	if job := s.waitJob(paused, 60*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("the paused job after resume: %s %s", job.GetStatus(), job.GetReason())
	}
	if _, stderr, code := s.cli(op, "resume", "--tenant", "acme"); code != 6 || !strings.Contains(stderr, server.Reason(luciusv1.ErrorReason_ERROR_REASON_PAUSE_NOT_FOUND)) {
		t.Fatalf("resume again: exit %d %s", code, stderr)
	}
}
