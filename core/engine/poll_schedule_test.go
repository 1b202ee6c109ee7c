package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// polledWorkflow is one task that polls every second for up to 30 s, with a
// single retry attempt: polls must not count against it.
const polledWorkflow = `workflow_id: POLLED
version: 1
nodes:
  START: {type: start, next: watch}
  watch: {type: task, handler: OCR, poll_interval: 1, poll_timeout: 30, retry: {max_attempts: 1}, next: END}
  END: {type: end}
`

const polling = engine.ResultPolling

// startPolled creates a POLLED job and answers its first attempt POLLING.
func (f *fixture) startPolled() (*ledger.Job, ledger.StepWithAttempts) {
	f.t.Helper()
	if _, _, err := f.reg.Register(f.ctx, "polled.yaml", []byte(polledWorkflow), "test"); err != nil {
		f.t.Fatal(err)
	}
	job := f.create(f.acceptWith("POLLED", map[string]any{}, ""))
	s := f.current(job.JobID)
	f.ack(s)
	if r := f.result(s.JobID, s.StepID, s.AttemptNo, s.LeaseID, polling, false); r.StepStatus != ledger.StepPolling {
		f.t.Fatalf("POLLING answer left the step %s", r.StepStatus)
	}
	return job, s
}

// duePolls lists the due polls of one job.
func (f *fixture) duePolls(jobID string) []ledger.AttemptKey {
	f.t.Helper()
	keys, err := f.store.DuePolls(f.ctx, 1000)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []ledger.AttemptKey
	for _, k := range keys {
		if k.JobID == jobID {
			out = append(out, k)
		}
	}
	return out
}

// A task whose node sets poll_interval is dispatched again when its poll is
// due, each poll a new attempt outside the retry budget, until it answers;
// poll_timeout after its first POLLING answer it fails POLL_TIMEOUT.
func TestScheduledPollingRedispatchesUntilAnswerOrTimeout(t *testing.T) {
	t.Run("answered", func(t *testing.T) {
		f := setup(t)
		job, first := f.startPolled()
		if due := f.duePolls(job.JobID); len(due) != 0 {
			t.Fatalf("a poll is due at once: %v", due)
		}
		time.Sleep(1100 * time.Millisecond) // poll_interval, on the database's clock
		due := f.duePolls(job.JobID)
		if len(due) != 1 || due[0].AttemptNo != first.AttemptNo || due[0].LeaseID != first.LeaseID {
			t.Fatalf("due polls %v, want the step's attempt %d", due, first.AttemptNo)
		}
		swept, err := f.eng.PollDue(f.ctx, due[0])
		if err != nil || !swept.Applied || swept.Outcome != "REPOLLED" {
			t.Fatalf("poll: %+v %v", swept, err)
		}
		if again, err := f.eng.PollDue(f.ctx, due[0]); err != nil || again.Applied {
			t.Fatalf("the same poll applied twice: %+v %v", again, err)
		}
		second := f.current(job.JobID)
		if second.AttemptNo != first.AttemptNo+1 || second.LeaseID == first.LeaseID {
			t.Fatalf("poll dispatched attempt %d (lease %s), want %d with a new lease", second.AttemptNo, second.LeaseID, first.AttemptNo+1)
		}
		var repoll bool
		for _, ev := range f.events(job.JobID) {
			repoll = repoll || (ev.AttemptNo == second.AttemptNo && ev.Reason == "REPOLL")
		}
		if !repoll {
			t.Error("no event of the poll's attempt names the poll (reason REPOLL)")
		}
		if due := f.duePolls(job.JobID); len(due) != 0 {
			t.Fatalf("a dispatched poll is still due: %v", due)
		}
		f.ack(second)
		if r := f.succeed(second); r.JobStatus != ledger.JobSucceeded {
			t.Fatalf("answer after a poll: job %s, want SUCCEEDED (polls do not use up max_attempts 1)", r.JobStatus)
		}
		var rows int
		if err := f.store.Pool().QueryRow(f.ctx, `SELECT count(*) FROM step_polls WHERE job_id = $1`, job.JobID).Scan(&rows); err != nil || rows != 0 {
			t.Fatalf("%d step_polls rows after the answer (%v)", rows, err)
		}
	})
	t.Run("timed out", func(t *testing.T) {
		f := setup(t)
		job, first := f.startPolled()
		key := ledger.AttemptKey{JobID: first.JobID, StepID: first.StepID, AttemptNo: first.AttemptNo, LeaseID: first.LeaseID}
		f.clock.Advance(31 * time.Second) // past poll_timeout since the first POLLING answer
		swept, err := f.eng.PollDue(f.ctx, key)
		if err != nil || !swept.Applied || swept.Outcome != "FAILED_FINAL" {
			t.Fatalf("poll after poll_timeout: %+v %v", swept, err)
		}
		if j := f.job(job.JobID); j.Status != ledger.JobFailedFinal || !strings.Contains(j.Reason, "POLL_TIMEOUT") {
			t.Fatalf("job %s: %s, want FAILED_FINAL with POLL_TIMEOUT", j.Status, j.Reason)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		f := setup(t)
		job, _ := f.startPolled()
		if _, err := f.eng.Cancel(f.ctx, job.JobID, "no longer needed"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
		if due := f.duePolls(job.JobID); len(due) != 0 {
			t.Fatalf("a cancelled job's step is still polled: %v", due)
		}
		if j := f.job(job.JobID); j.Status != ledger.JobCancelled {
			t.Fatalf("job %s after cancel", j.Status)
		}
	})
}
