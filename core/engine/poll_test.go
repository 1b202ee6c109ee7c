package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// notified accepts a one-step OCR request whose job reports to a topic.
func (f *fixture) notified() *luciusv1.QueuedJob {
	f.t.Helper()
	q, req, msg, err := f.request("acme", "OCR", ocrInputs, "")
	if err != nil {
		f.t.Fatal(err)
	}
	req.Notify = "orchestrator-events"
	if _, err := f.store.Accept(f.ctx, req, msg, ledger.Limits{}); err != nil {
		f.t.Fatal(err)
	}
	return q
}

func (f *fixture) pollResult(s ledger.StepWithAttempts, progress map[string]any) engine.ResultResult {
	f.t.Helper()
	r, err := f.eng.Result(f.ctx, engine.CallbackKey{JobID: s.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo, LeaseID: s.LeaseID},
		engine.Result{Status: engine.ResultPolling, Output: object(f.t, progress), Reason: "move 10% done"})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// jobUpdates decodes the job-update messages of a job waiting in the outbox.
func (f *fixture) jobUpdates(jobID string) []engine.JobUpdate {
	f.t.Helper()
	var out []engine.JobUpdate
	for _, m := range f.outbox(jobID) {
		if m.Kind != ledger.KindJobUpdate {
			continue
		}
		if m.Destination != "orchestrator-events" || m.Properties["MessageType"] != "job-update" {
			f.t.Fatalf("job-update routed %s %v", m.Destination, m.Properties)
		}
		var u engine.JobUpdate
		if err := json.Unmarshal(m.Body, &u); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// A RESULT POLLING closes the attempt and parks the step in POLLING (no lease
// runs, the job's notify topic hears of it); Repoll starts the next attempt,
// and polls do not use up retry attempts.
func TestPollingStepWaitsForRepoll(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.notified()
	f.create(q)
	first := f.current(q.JobId)
	f.ack(first)
	if r := f.pollResult(first, map[string]any{"percent": 10}); r.Outcome != applied || r.StepStatus != ledger.StepPolling || r.JobStatus != ledger.JobInProgress {
		t.Fatalf("polling result %+v", r)
	}
	if r := f.pollResult(first, map[string]any{"percent": 10}); r.Outcome != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE {
		t.Fatalf("the same polling result again: %s", r.Outcome)
	}
	step := f.steps(q.JobId)[0]
	if step.Status != ledger.StepPolling || step.Attempts[0].Status != ledger.StepPolling || step.Attempts[0].CompletedAt.IsZero() {
		t.Fatalf("step %s, attempt %s completed %v", step.Status, step.Attempts[0].Status, step.Attempts[0].CompletedAt)
	}
	updates := f.jobUpdates(q.JobId)
	if len(updates) != 1 || updates[0].StepStatus != "POLLING" || updates[0].Status != "IN_PROGRESS" || string(updates[0].Output) != `{"percent":10}` {
		t.Fatalf("job updates %+v", updates)
	}
	f.clock.Advance(48 * time.Hour)
	r, err := f.eng.ExpireLease(f.ctx, keyOf(first))
	f.swept("lease of a polling step", r, err, false, "")

	// Five polls, then a retryable failure still gets its retries.
	for poll := 2; poll <= 6; poll++ {
		r, err := f.eng.Repoll(f.ctx, q.JobId, "ocr")
		f.swept("repoll", r, err, true, "REDISPATCHED")
		r, err = f.eng.Repoll(f.ctx, q.JobId, "ocr")
		f.swept("repoll of a step already dispatched", r, err, false, "")
		s := f.current(q.JobId)
		if s.AttemptNo != poll || s.Status != ledger.StepDispatching {
			t.Fatalf("poll %d: %s#%d", poll, s.Status, s.AttemptNo)
		}
		if poll < 6 {
			f.pollResult(s, map[string]any{"percent": poll * 10})
		}
	}
	s := f.current(q.JobId)
	f.result(q.JobId, s.StepID, s.AttemptNo, s.LeaseID, engine.ResultFailed, true)
	if st := f.steps(q.JobId)[0]; st.Status != ledger.StepFailedRetry || st.AttemptNo != 7 {
		t.Fatalf("after a retryable failure: %s#%d, want a retry", st.Status, st.AttemptNo)
	}
	retry := f.current(q.JobId)
	if r := f.succeed(retry); r.JobStatus != ledger.JobSucceeded {
		t.Fatalf("result %+v", r)
	}
	updates = f.jobUpdates(q.JobId)
	last := updates[len(updates)-1]
	if last.Status != "SUCCEEDED" || last.StepID != "ocr" || last.StepStatus != "SUCCEEDED" {
		t.Fatalf("final job update %+v", last)
	}
	assertTerminalNeverChanged(t, f.events(q.JobId))
}

// A job whose step waits in POLLING has nothing running: cancelling ends it at once.
func TestCancelWhilePollingCancelsAtOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.notified()
	f.create(q)
	s := f.current(q.JobId)
	f.pollResult(s, nil) // RESULT before ACK implies the ACK
	j, err := f.eng.Cancel(f.ctx, q.JobId, "poll timeout")
	if err != nil || j.Status != ledger.JobCancelled {
		t.Fatalf("cancel: %v %+v", err, j)
	}
	st := f.steps(q.JobId)[0]
	if st.Status != ledger.StepCancelled || st.Attempts[0].Status != ledger.StepPolling {
		t.Fatalf("step %s, attempt %s (the attempt's own outcome stays)", st.Status, st.Attempts[0].Status)
	}
	if r, err := f.eng.Repoll(f.ctx, q.JobId, "ocr"); err != nil || r.Applied {
		t.Fatalf("repoll of a cancelled job: %+v %v", r, err)
	}
	updates := f.jobUpdates(q.JobId)
	if last := updates[len(updates)-1]; last.Status != "CANCELLED" {
		t.Fatalf("updates %+v", updates)
	}
	assertTerminalNeverChanged(t, f.events(q.JobId))
}
