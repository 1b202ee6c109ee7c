package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// A plain workflow's task that answers POLLING is dispatched again every
// poll_interval, each poll a new attempt, until it answers; one that never
// answers fails POLL_TIMEOUT; cancelling a polling job stops its polls at once.
func TestPollingTaskIsRedispatchedUntilItAnswersOrTimesOut(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{env: map[string]string{"LUCIUS_SWEEP_POLL_INTERVAL": "200ms"}})
	in := s.input("watch.txt", "watched\n")
	submit := func(outcome string) string {
		out, _ := s.output("watch-" + strings.ReplaceAll(outcome, ":", "-") + ".json")
		return s.submit("E2E_POLLED", map[string]any{"outcome": outcome}, in, out, "")
	}
	answered, never := submit("poll:2"), submit("poll")
	out, _ := s.output("watch-cancelled.json")
	cancelled := s.submit("E2E_POLLED", map[string]any{"outcome": "poll"}, in, out, "")
	attempts := func(id string) int { return s.count(`SELECT count(*) FROM attempts WHERE job_id = $1`, id) }

	s.waitStep(cancelled, luciusv1.StepStatus_STEP_STATUS_POLLING)
	if code, body := s.rest("POST", "/v1/jobs/"+cancelled+":cancel", map[string]any{"reason": "no longer needed"}); code != http.StatusOK {
		t.Fatalf("cancel: %d %v", code, body)
	}
	if job := s.waitJob(cancelled, 30*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_CANCELLED {
		t.Fatalf("cancelled polling job ended %s", job.GetStatus())
	}
	before := attempts(cancelled)
	time.Sleep(2500 * time.Millisecond) // more than two poll intervals
	if after := attempts(cancelled); after != before {
		t.Errorf("a cancelled job was polled again: %d attempts, then %d", before, after)
	}

	// poll:2 answers POLLING on dispatches 1 and 2 and succeeds on the third;
	// max_attempts 1 shows polls are not retries.
	if job := s.waitJob(answered, 30*time.Second); job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_SUCCEEDED {
		t.Fatalf("polled job ended %s: %s", job.GetStatus(), job.GetReason())
	}
	if n := attempts(answered); n != 3 {
		t.Errorf("polled job ran %d attempts, want 3 (two POLLING answers, then SUCCEEDED)", n)
	}
	if n := s.count(`SELECT count(*) FROM job_events WHERE job_id = $1 AND reason = 'REPOLL'`, answered); n != 2 {
		t.Errorf("%d REPOLL events, want 2", n)
	}

	// poll never answers: poll_timeout (4 s) after the first POLLING it fails.
	job := s.waitJob(never, 30*time.Second)
	if job.GetStatus() != luciusv1.JobStatus_JOB_STATUS_FAILED_FINAL || !strings.Contains(job.GetReason(), "POLL_TIMEOUT") {
		t.Fatalf("never-answering job ended %s: %s, want FAILED_FINAL with POLL_TIMEOUT", job.GetStatus(), job.GetReason())
	}
	// At 1 s intervals a 4 s poll_timeout leaves room for up to 5 dispatches;
	// a loaded machine manages fewer, but at least one poll.
	if n := attempts(never); n < 2 || n > 6 {
		t.Errorf("never-answering job ran %d attempts in its 4 s poll_timeout at 1 s intervals, want 2-6", n)
	}
}
