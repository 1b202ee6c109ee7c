package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

func (f *fixture) checkpoint(jobID, stepID string, attempt int, lease, name string) engine.CheckpointResult {
	f.t.Helper()
	r, err := f.eng.RecordCheckpoint(f.ctx, engine.CallbackKey{JobID: jobID, StepID: stepID, AttemptNo: attempt, LeaseID: lease,
		WorkerID: "w1", CorrelationID: "corr-1"},
		engine.Checkpoint{Name: name, URI: "file:///ws/checkpoints/" + stepID + "/" + name, SizeBytes: 12,
			SHA256: strings.Repeat("ab", 32), SavedAt: time.Now()})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func checkpointEvents(events []ledger.Event) []ledger.Event {
	var out []ledger.Event
	for _, e := range events {
		if e.Type == ledger.EventCheckpointSaved {
			out = append(out, e)
		}
	}
	return out
}

// A checkpoint of the step's current attempt becomes a CHECKPOINT_SAVED
// event naming it and changes no state; one from an attempt that no longer
// owns the step is rejected as stale and records no checkpoint.
func TestRecordCheckpointAppendsAnEventForTheCurrentAttemptOnly(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR_EMBEDDING")
	f.create(q)
	s := f.current(q.JobId)
	f.ack(s)
	tests := []struct {
		name    string
		attempt int
		lease   string
		want    luciusv1.CallbackOutcome
		saved   bool
	}{
		{"current attempt", s.AttemptNo, s.LeaseID, applied, true},
		{"wrong lease", s.AttemptNo, uuid.NewString(), luciusv1.CallbackOutcome_CALLBACK_OUTCOME_LEASE_MISMATCH, false},
		{"older attempt", s.AttemptNo + 1, s.LeaseID, luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT, false},
	}
	for _, tt := range tests {
		before := len(checkpointEvents(f.events(q.JobId)))
		r := f.checkpoint(q.JobId, s.StepID, tt.attempt, tt.lease, "phase-1")
		if r.Outcome != tt.want {
			t.Fatalf("%s: outcome %s, want %s", tt.name, r.Outcome, tt.want)
		}
		if r.StepStatus != ledger.StepInProgress {
			t.Fatalf("%s: step status %s, want IN_PROGRESS", tt.name, r.StepStatus)
		}
		saved := checkpointEvents(f.events(q.JobId))
		if got := len(saved) - before; got != map[bool]int{true: 1, false: 0}[tt.saved] {
			t.Fatalf("%s: %d new CHECKPOINT_SAVED events", tt.name, got)
		}
		if !tt.saved {
			continue
		}
		e := saved[len(saved)-1]
		if e.StepID != s.StepID || e.AttemptNo != s.AttemptNo || e.Data["checkpoint_name"] != "phase-1" ||
			e.Data["correlation_id"] != "corr-1" || e.Data["sha256"] != strings.Repeat("ab", 32) {
			t.Fatalf("%s: event %+v", tt.name, e)
		}
	}
	if st := f.current(q.JobId); st.Status != ledger.StepInProgress || st.AttemptNo != s.AttemptNo {
		t.Fatalf("checkpoints changed the step: %s attempt %d", st.Status, st.AttemptNo)
	}
	// After the step ended, a checkpoint is never recorded as saved.
	f.succeed(s)
	if r := f.checkpoint(q.JobId, s.StepID, s.AttemptNo, s.LeaseID, "late"); r.Outcome == applied {
		t.Fatalf("checkpoint after the step succeeded: %s", r.Outcome)
	}
	if n := len(checkpointEvents(f.events(q.JobId))); n != 1 {
		t.Fatalf("%d CHECKPOINT_SAVED events, want 1", n)
	}
}

// A worker that lost RecordCheckpoint's answer calls again with the same
// save: it is one event, the retry answered DUPLICATE; a new save of the
// same name is a new event.
func TestRecordCheckpointRetriedIsRecordedOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR_EMBEDDING")
	f.create(q)
	s := f.current(q.JobId)
	f.ack(s)
	key := engine.CallbackKey{JobID: q.JobId, StepID: s.StepID, AttemptNo: s.AttemptNo, LeaseID: s.LeaseID, WorkerID: "w1"}
	save := engine.Checkpoint{Name: "progress", URI: "file:///ws/checkpoints/ocr/progress", SizeBytes: 4, SHA256: strings.Repeat("cd", 32),
		SavedAt: time.Now()}
	later := save
	later.SavedAt = save.SavedAt.Add(time.Second)
	for i, tc := range []struct {
		req  engine.Checkpoint
		want luciusv1.CallbackOutcome
	}{
		{save, applied},
		{save, luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE},
		{later, applied},
	} {
		r, err := f.eng.RecordCheckpoint(f.ctx, key, tc.req)
		if err != nil || r.Outcome != tc.want {
			t.Fatalf("call %d: %v (%v), want %v", i+1, r.Outcome, err, tc.want)
		}
	}
	if n := len(checkpointEvents(f.events(q.JobId))); n != 2 {
		t.Fatalf("%d CHECKPOINT_SAVED events, want 2 (the retry is not one)", n)
	}
}
