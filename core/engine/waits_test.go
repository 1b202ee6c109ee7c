package engine_test

import (
	"testing"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// On a busy machine every wait on the database is a wake-up of a backend and
// then of the waiting process, and those waits, more than the statements,
// make a submit's tail latency and a callback's CPU. This pins how many a
// submit and each callback take.
func TestSubmitAndCallbacksWaitOnTheDatabaseFewTimes(t *testing.T) {
	f := setup(t)
	ctx := f.waits.Counting(f.ctx)
	q, req, msg, err := f.request("Acme", "OCR_EMBEDDING_SIS", map[string]any{"prompt_set": []any{"summarize"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	f.waits.Reset()
	if _, err := f.store.Accept(ctx, req, msg, ledger.Limits{}); err != nil {
		t.Fatal(err)
	}
	if got := f.waits.Load(); got != 2 {
		t.Errorf("a submit waited %d times, want 2: BEGIN with the request, then the events, outbox row and slot with the COMMIT", got)
	}
	f.create(q)
	s := f.current(q.JobId)

	f.waits.Reset()
	ack, err := f.eng.Ack(ctx, keyOfStep(s))
	if err != nil || ack.Outcome != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		t.Fatalf("ack: %v, %v", ack.Outcome, err)
	}
	if got := f.waits.Load(); got != 2 {
		t.Errorf("an ACK waited %d times, want 2: BEGIN with the job, step and attempt, then the writes and events with the COMMIT", got)
	}

	f.waits.Reset()
	res, err := f.eng.Result(ctx, engine.CallbackKey{JobID: s.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo, LeaseID: s.LeaseID},
		engine.Result{Status: engine.ResultSucceeded})
	if err != nil || res.Outcome != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED {
		t.Fatalf("result: %v, %v", res.Outcome, err)
	}
	if got := f.waits.Load(); got != 3 {
		t.Errorf("a RESULT that dispatches the next step waited %d times, want 3: BEGIN with the job, step and attempt, "+
			"the job's steps, then the writes, events and next directive with the COMMIT", got)
	}
}
