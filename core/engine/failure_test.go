package engine_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/workflow"
)

func keyOf(s ledger.StepWithAttempts) ledger.AttemptKey {
	return ledger.AttemptKey{JobID: s.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo, LeaseID: s.LeaseID}
}

func (f *fixture) heartbeat(jobID, stepID string, attempt int, lease string, progress map[string]any) engine.HeartbeatResult {
	f.t.Helper()
	var hb engine.Heartbeat
	if progress != nil {
		hb.Progress = object(f.t, progress)
	}
	r, err := f.eng.Heartbeat(f.ctx, engine.CallbackKey{JobID: jobID, StepID: stepID, AttemptNo: attempt, LeaseID: lease, WorkerID: "w1"}, hb)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// callback sends one callback of the given kind and returns its outcome.
func (f *fixture) callback(kind, jobID, stepID string, attempt int, lease string) engine.Outcome {
	f.t.Helper()
	switch kind {
	case "ACK":
		r, err := f.eng.Ack(f.ctx, engine.CallbackKey{JobID: jobID, StepID: stepID, AttemptNo: attempt, LeaseID: lease, WorkerID: "w1"})
		if err != nil {
			f.t.Fatal(err)
		}
		return r.Outcome
	case "RESULT":
		return f.result(jobID, stepID, attempt, lease, engine.ResultSucceeded, false).Outcome
	default:
		return f.heartbeat(jobID, stepID, attempt, lease, nil).Outcome
	}
}

func (f *fixture) swept(name string, got engine.Swept, err error, applied bool, outcome string) {
	f.t.Helper()
	if err != nil {
		f.t.Fatalf("%s: %v", name, err)
	}
	if got.Applied != applied || (applied && got.Outcome != outcome) {
		f.t.Fatalf("%s: %+v, want applied=%v outcome=%s", name, got, applied, outcome)
	}
}

func (f *fixture) deadLetters(jobID string) []ledger.DeadLetter {
	f.t.Helper()
	dl, err := f.store.ListDeadLetters(f.ctx, ledger.DeadLetterFilter{JobID: jobID, Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	return dl
}

// Every kind of callback that does not match the current attempt, or comes
// after the step ended, is answered with its reason, recorded, and changes nothing.
func TestEveryStaleCallbackIsRecordedAndChangesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	codes := map[string]luciusv1.CallbackOutcome{
		engine.ReasonStaleAttempt:  luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT,
		engine.ReasonLeaseMismatch: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_LEASE_MISMATCH,
		engine.ReasonAfterTerminal: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_AFTER_TERMINAL,
		engine.ReasonDuplicate:     luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE,
	}
	// Each case brings the step where a callback is stale and returns the
	// (attempt, lease) the callback names.
	type staleCase struct {
		kind, reason string
		prepare      func(s ledger.StepWithAttempts) (int, string)
	}
	var tests []staleCase
	for _, kind := range []string{"ACK", "RESULT", "HEARTBEAT"} {
		tests = append(tests,
			staleCase{kind, engine.ReasonStaleAttempt, func(s ledger.StepWithAttempts) (int, string) { return s.AttemptNo + 1, s.LeaseID }},
			staleCase{kind, engine.ReasonLeaseMismatch, func(s ledger.StepWithAttempts) (int, string) { return s.AttemptNo, uuid.NewString() }},
			staleCase{kind, engine.ReasonAfterTerminal, func(s ledger.StepWithAttempts) (int, string) {
				f.succeed(s)
				return s.AttemptNo, uuid.NewString()
			}},
			staleCase{kind, engine.ReasonDuplicate, func(s ledger.StepWithAttempts) (int, string) {
				f.succeed(s) // the current attempt's own RESULT; anything it sends again is a duplicate
				return s.AttemptNo, s.LeaseID
			}},
		)
	}
	for _, tt := range tests {
		t.Run(tt.kind+"/"+tt.reason, func(t *testing.T) {
			q := f.accept("OCR")
			f.create(q)
			s := f.current(q.JobId)
			attempt, lease := tt.prepare(s)
			before, beforeJob := f.steps(q.JobId)[0], f.job(q.JobId)
			if got := f.callback(tt.kind, q.JobId, s.StepID, attempt, lease); got != codes[tt.reason] {
				t.Fatalf("outcome %s, want %s", got, codes[tt.reason])
			}
			after, afterJob := f.steps(q.JobId)[0], f.job(q.JobId)
			if after.Status != before.Status || after.AttemptNo != before.AttemptNo || after.LeaseID != before.LeaseID ||
				afterJob.Status != beforeJob.Status || len(after.Attempts) != len(before.Attempts) {
				t.Fatalf("state changed: %s#%d/%s → %s#%d/%s", before.Status, before.AttemptNo, beforeJob.Status,
					after.Status, after.AttemptNo, afterJob.Status)
			}
			typ := ledger.EventCallbackRejected
			if tt.reason == engine.ReasonDuplicate {
				typ = ledger.EventCallbackDuplicate
			}
			if !hasEvent(f.events(q.JobId), typ, tt.reason) {
				t.Fatalf("no %s %s event", typ, tt.reason)
			}
		})
	}
}

// Repeating a callback of the current attempt is idempotent.
func TestDuplicateCallbacksOfTheCurrentAttemptAreIdempotent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	f.create(q)
	s := f.current(q.JobId)
	if r := f.ack(s); r.Outcome != applied {
		t.Fatalf("first ACK %s", r.Outcome)
	}
	if r := f.ack(s); r.Outcome != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE || r.StepStatus != ledger.StepInProgress {
		t.Fatalf("second ACK %+v", r)
	}
	// Heartbeats repeat by design: each extends the lease.
	for range 2 {
		if r := f.heartbeat(q.JobId, s.StepID, s.AttemptNo, s.LeaseID, nil); r.Outcome != applied {
			t.Fatalf("heartbeat %s", r.Outcome)
		}
	}
	if r := f.succeed(s); r.Outcome != applied {
		t.Fatalf("RESULT %s", r.Outcome)
	}
	if r := f.succeed(s); r.Outcome != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE || r.JobStatus != ledger.JobSucceeded {
		t.Fatalf("second RESULT %+v", r)
	}
	if n := len(f.steps(q.JobId)[0].Attempts); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

// Dispatch track: no ACK in time → a new attempt (new lease, same routing) at
// once; the last one exhausted fails the step and job and leaves a dead letter.
func TestAckTimeoutRetriesThenFailsWithADeadLetter(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	job := f.create(q)
	first := f.current(q.JobId)
	r, err := f.eng.ExpireAck(f.ctx, keyOf(first))
	f.swept("before the deadline", r, err, false, "")

	// The scan finds an attempt past its deadline (the database's clock).
	if _, err := f.store.Pool().Exec(f.ctx, `UPDATE attempts SET ack_deadline = now() - interval '1 second' WHERE job_id = $1`, q.JobId); err != nil {
		t.Fatal(err)
	}
	due, err := f.store.DueAcks(f.ctx, 100)
	if err != nil || !containsKey(due, keyOf(first)) {
		t.Fatalf("DueAcks %v %v, want %v", due, err, keyOf(first))
	}

	leases := map[string]bool{}
	for attempt := 1; attempt <= workflow.DefaultMaxAttempts; attempt++ {
		s := f.current(q.JobId)
		if s.AttemptNo != attempt || s.Status == ledger.StepInProgress {
			t.Fatalf("attempt %d: current is %s#%d", attempt, s.Status, s.AttemptNo)
		}
		leases[s.LeaseID] = true
		f.clock.Advance(workflow.DefaultAckTimeout + time.Second)
		r, err := f.eng.ExpireAck(f.ctx, keyOf(s))
		want := "RETRIED"
		if attempt == workflow.DefaultMaxAttempts {
			want = "FAILED_FINAL"
		}
		f.swept("expire ack", r, err, true, want)
		r, err = f.eng.ExpireAck(f.ctx, keyOf(s))
		f.swept("expire the same attempt again", r, err, false, "")
	}
	steps := f.steps(q.JobId)
	if steps[0].Status != ledger.StepFailedFinal || len(steps[0].Attempts) != 3 || len(leases) != 3 {
		t.Fatalf("step %s with %d attempts, %d leases", steps[0].Status, len(steps[0].Attempts), len(leases))
	}
	for _, a := range steps[0].Attempts {
		if a.Routing != job.Routing {
			t.Fatalf("attempt %d routed %+v, pinned %+v", a.AttemptNo, a.Routing, job.Routing)
		}
	}
	final := f.job(q.JobId)
	if final.Status != ledger.JobFailedFinal || !strings.Contains(final.Reason, "MAX_ATTEMPTS_EXHAUSTED") {
		t.Fatalf("job %s: %s", final.Status, final.Reason)
	}
	dl := f.deadLetters(q.JobId)
	if len(dl) != 1 || dl[0].Kind != ledger.DeadLetterStep || dl[0].StepID != "ocr" || dl[0].AttemptNo != 3 ||
		dl[0].Reason != "MAX_ATTEMPTS_EXHAUSTED" {
		t.Fatalf("dead letters %+v", dl)
	}
	if n := countEvents(f.events(q.JobId), ledger.EventAckTimeout); n != 3 {
		t.Fatalf("%d ACK_TIMEOUT events, want 3", n)
	}
	assertTerminalNeverChanged(t, f.events(q.JobId))
}

// Execution track: an acknowledged attempt must heartbeat or finish within its
// lease; heartbeats extend it; expiry retries after the backoff.
func TestLeaseExpiryRetriesAndHeartbeatsExtendTheLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR_EMBEDDING")
	f.create(q)
	s := f.current(q.JobId)
	f.ack(s)
	att := f.steps(q.JobId)[0].Attempts[0]
	if att.LeaseExpiresAt.IsZero() || att.LeaseExpiresAt.Sub(att.AckedAt) != workflow.DefaultTimeout {
		t.Fatalf("lease %s after ACK at %s, want the node timeout %s", att.LeaseExpiresAt, att.AckedAt, workflow.DefaultTimeout)
	}
	f.clock.Advance(workflow.DefaultTimeout - time.Minute)
	hb := f.heartbeat(q.JobId, s.StepID, s.AttemptNo, s.LeaseID, map[string]any{"percent": 40})
	if hb.Outcome != applied || !hb.LeaseExpiresAt.After(att.LeaseExpiresAt) {
		t.Fatalf("heartbeat %+v did not extend lease %s", hb, att.LeaseExpiresAt)
	}
	got := f.steps(q.JobId)[0].Attempts[0]
	var progress map[string]any
	if err := json.Unmarshal(got.Progress, &progress); err != nil || progress["percent"] != float64(40) {
		t.Fatalf("progress %s (%v)", got.Progress, err)
	}
	f.clock.Advance(2 * time.Minute) // past the first lease, inside the extended one
	r, err := f.eng.ExpireLease(f.ctx, keyOf(s))
	f.swept("inside the extended lease", r, err, false, "")

	f.clock.Advance(workflow.DefaultTimeout)
	r, err = f.eng.ExpireLease(f.ctx, keyOf(s))
	f.swept("past the lease", r, err, true, "RETRIED")
	step := f.steps(q.JobId)[0]
	if step.Status != ledger.StepFailedRetry || step.AttemptNo != 2 || f.job(q.JobId).Status != ledger.JobFailedRetry {
		t.Fatalf("after expiry: step %s#%d, job %s", step.Status, step.AttemptNo, f.job(q.JobId).Status)
	}
	if !hasEvent(f.events(q.JobId), ledger.EventLeaseExpired, "LEASE_EXPIRED") {
		t.Fatal("no LEASE_EXPIRED event")
	}
	// The expired attempt's late result is stale; the retry runs the step.
	if o := f.callback("RESULT", q.JobId, s.StepID, s.AttemptNo, s.LeaseID); o != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT {
		t.Fatalf("late result of the expired attempt: %s", o)
	}
	retry := f.current(q.JobId)
	if r := f.ack(retry); r.Outcome != applied || f.job(q.JobId).Status != ledger.JobInProgress {
		t.Fatalf("ack of the retry: %+v, job %s", r, f.job(q.JobId).Status)
	}
	f.succeed(retry)
	f.succeed(f.current(q.JobId))
	if j := f.job(q.JobId); j.Status != ledger.JobSucceeded {
		t.Fatalf("job %s", j.Status)
	}
	assertTerminalNeverChanged(t, f.events(q.JobId))
}

// Cancellation in every job state (seed 004 §1.5).
func TestCancelInEveryJobState(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		state ledger.JobStatus
		// reach brings a new job into the state and returns its id.
		reach func() string
		// want is the status right after CancelJob; then finishes the job's
		// in-flight work (if any) and returns the final status expected.
		want    ledger.JobStatus
		settle  func(jobID string)
		final   ledger.JobStatus
		noEvent bool // a no-op records nothing
	}{
		{state: ledger.JobReceived, reach: func() string { return f.accept("OCR").JobId },
			want: ledger.JobCancelling, final: ledger.JobCancelled,
			settle: func(id string) { f.createID(id) }},
		{state: ledger.JobQueued, reach: func() string {
			id := f.accept("OCR").JobId
			f.publishRequests()
			return id
		}, want: ledger.JobCancelling, final: ledger.JobCancelled, settle: func(id string) { f.createID(id) }},
		{state: ledger.JobDispatching, reach: func() string {
			q := f.accept("OCR_EMBEDDING")
			f.create(q)
			return q.JobId
		}, want: ledger.JobCancelling, final: ledger.JobCancelled, settle: func(id string) {
			// Nobody ever acknowledges: the ACK sweeper ends the attempt, and no retry starts.
			s := f.current(id)
			f.clock.Advance(workflow.DefaultAckTimeout + time.Second)
			r, err := f.eng.ExpireAck(f.ctx, keyOf(s))
			f.swept("expire ack while cancelling", r, err, true, "FAILED_FINAL")
		}},
		{state: ledger.JobInProgress, reach: func() string {
			q := f.accept("OCR_EMBEDDING")
			f.create(q)
			f.ack(f.current(q.JobId))
			return q.JobId
		}, want: ledger.JobCancelling, final: ledger.JobCancelled, settle: func(id string) { f.succeed(f.current(id)) }},
		{state: ledger.JobFailedRetry, reach: func() string {
			q := f.accept("OCR_EMBEDDING")
			f.create(q)
			s := f.current(q.JobId)
			f.result(q.JobId, s.StepID, s.AttemptNo, s.LeaseID, engine.ResultFailed, true)
			return q.JobId
		}, want: ledger.JobCancelled, final: ledger.JobCancelled},
		{state: ledger.JobCancelling, reach: func() string {
			q := f.accept("OCR")
			f.create(q)
			if _, err := f.eng.Cancel(f.ctx, q.JobId, "first"); err != nil {
				t.Fatal(err)
			}
			return q.JobId
		}, want: ledger.JobCancelling, final: ledger.JobCancelled, noEvent: true,
			settle: func(id string) { f.succeed(f.current(id)) }},
		{state: ledger.JobSucceeded, reach: func() string {
			q := f.accept("OCR")
			f.create(q)
			f.succeed(f.current(q.JobId))
			return q.JobId
		}, want: ledger.JobSucceeded, final: ledger.JobSucceeded, noEvent: true},
		{state: ledger.JobFailedFinal, reach: func() string {
			q := f.accept("OCR")
			f.create(q)
			s := f.current(q.JobId)
			f.result(q.JobId, s.StepID, 1, s.LeaseID, engine.ResultFailed, false)
			return q.JobId
		}, want: ledger.JobFailedFinal, final: ledger.JobFailedFinal, noEvent: true},
		{state: ledger.JobCancelled, reach: func() string {
			q := f.accept("OCR")
			f.create(q)
			f.eng.Cancel(f.ctx, q.JobId, "") //nolint:errcheck
			f.succeed(f.current(q.JobId))
			return q.JobId
		}, want: ledger.JobCancelled, final: ledger.JobCancelled, noEvent: true},
	}
	for _, tt := range tests {
		t.Run(string(tt.state), func(t *testing.T) {
			id := tt.reach()
			if got := f.job(id).Status; got != tt.state {
				t.Fatalf("reached %s, want %s", got, tt.state)
			}
			before := countEvents(f.events(id), ledger.EventCancelRequested)
			j, err := f.eng.Cancel(f.ctx, id, "test")
			if err != nil || j.Status != tt.want {
				t.Fatalf("cancel: %v, status %s, want %s", err, j.Status, tt.want)
			}
			if after := countEvents(f.events(id), ledger.EventCancelRequested); tt.noEvent != (after == before) {
				t.Fatalf("CANCEL_REQUESTED events %d → %d", before, after)
			}
			if tt.settle != nil {
				tt.settle(id)
			}
			if got := f.job(id).Status; got != tt.final {
				t.Fatalf("finally %s, want %s", got, tt.final)
			}
			for _, s := range f.steps(id) {
				if !s.Status.Terminal() {
					t.Fatalf("step %s left %s", s.StepID, s.Status)
				}
				if tt.final == ledger.JobCancelled && s.StepID == "embedding" && s.AttemptNo != 0 {
					t.Fatalf("cancelled job started step %s", s.StepID)
				}
			}
			assertTerminalNeverChanged(t, f.events(id))
		})
	}
	t.Run("the retry of a step cancelled during its backoff is answered after-terminal", func(t *testing.T) {
		q := f.accept("OCR")
		f.create(q)
		s := f.current(q.JobId)
		f.result(q.JobId, s.StepID, 1, s.LeaseID, engine.ResultFailed, true)
		retry := f.steps(q.JobId)[0]
		f.eng.Cancel(f.ctx, q.JobId, "") //nolint:errcheck
		if o := f.callback("ACK", q.JobId, retry.StepID, retry.AttemptNo, retry.LeaseID); o != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_AFTER_TERMINAL {
			t.Fatalf("ACK of the cancelled retry: %s", o)
		}
		if !hasEvent(f.events(q.JobId), ledger.EventStepStatusChanged, "CANCELLED_DURING_BACKOFF") {
			t.Fatal("no CANCELLED_DURING_BACKOFF transition")
		}
	})
}

// A job still running past its deadline fails with SLA_EXCEEDED; what still
// runs is closed by the sweepers and never changes the job.
func TestSLAExceededFailsTheJob(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR_EMBEDDING")
	job := f.create(q)
	if d := time.Until(job.DeadlineAt); d < 23*time.Hour || d > 25*time.Hour {
		t.Fatalf("deadline in %s, want the 24h default", d)
	}
	r, err := f.eng.ExpireSLA(f.ctx, q.JobId)
	f.swept("before the deadline", r, err, false, "")
	s := f.current(q.JobId)
	f.ack(s)
	f.clock.Advance(25 * time.Hour)
	r, err = f.eng.ExpireSLA(f.ctx, q.JobId)
	f.swept("past the deadline", r, err, true, "FAILED_FINAL")
	j := f.job(q.JobId)
	if j.Status != ledger.JobFailedFinal || !strings.HasPrefix(j.Reason, "SLA_EXCEEDED") {
		t.Fatalf("job %s: %s", j.Status, j.Reason)
	}
	if dl := f.deadLetters(q.JobId); len(dl) != 1 || dl[0].Reason != "SLA_EXCEEDED" {
		t.Fatalf("dead letters %+v", dl)
	}
	if steps := f.steps(q.JobId); steps[1].Status != ledger.StepCancelled {
		t.Fatalf("the step not started yet is %s", steps[1].Status)
	}
	r, err = f.eng.ExpireSLA(f.ctx, q.JobId)
	f.swept("again", r, err, false, "")
	// The in-flight attempt's lease runs out: the sweeper closes the step.
	r, err = f.eng.ExpireLease(f.ctx, keyOf(s))
	f.swept("lease of a step of an ended job", r, err, true, "CLOSED")
	if st := f.steps(q.JobId)[0]; st.Status != ledger.StepCancelled || st.Attempts[0].CompletedAt.IsZero() {
		t.Fatalf("closed step %s, attempt completed %v", st.Status, st.Attempts[0].CompletedAt)
	}
	if f.job(q.JobId).Status != ledger.JobFailedFinal {
		t.Fatal("closing a step changed the job")
	}
	assertTerminalNeverChanged(t, f.events(q.JobId))
}

// An attempt left DISPATCHING whose directive left the outbox unpublished gets
// its directive again, same attempt and lease.
func TestRedispatchOfAStuckDispatchingAttempt(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	f.create(q)
	s := f.current(q.JobId)
	if stuck, _ := f.store.StuckDispatching(f.ctx, 0, 100); containsKey(stuck, keyOf(s)) {
		t.Fatal("an attempt whose directive waits in the outbox counted as stuck")
	}
	r, err := f.eng.Redispatch(f.ctx, keyOf(s))
	f.swept("directive still pending", r, err, false, "")
	// Lose the directive (abandoned, or a restored backup).
	if _, err := f.store.Pool().Exec(f.ctx, `UPDATE outbox SET dead_at = now() WHERE job_id = $1 AND kind = 'directive'`, q.JobId); err != nil {
		t.Fatal(err)
	}
	stuck, err := f.store.StuckDispatching(f.ctx, 0, 100)
	if err != nil || !containsKey(stuck, keyOf(s)) {
		t.Fatalf("StuckDispatching %v %v", stuck, err)
	}
	r, err = f.eng.Redispatch(f.ctx, keyOf(s))
	f.swept("lost directive", r, err, true, "REENQUEUED")
	var msgs []ledger.OutboxMessage
	for _, m := range f.outbox(q.JobId) {
		if m.Kind == ledger.KindDirective {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) != 1 || !strings.HasSuffix(msgs[0].MessageID, "#2") {
		t.Fatalf("directives after redispatch: %+v", msgs)
	}
	d := &luciusv1.Directive{}
	if err := protojson.Unmarshal(msgs[0].Body, d); err != nil || d.LeaseId != s.LeaseID || d.AttemptNo != 1 {
		t.Fatalf("redispatched directive %v: attempt %d lease %s", err, d.AttemptNo, d.LeaseId)
	}
	if st := f.steps(q.JobId)[0]; len(st.Attempts) != 1 {
		t.Fatalf("%d attempts after redispatch, want 1", len(st.Attempts))
	}
}

// Sweepers use the normal path's guards: an answered, retried or finished
// attempt is never failed, retried or resurrected.
func TestSweepersNeverTouchAnsweredOrFinishedAttempts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	f.create(q)
	s := f.current(q.JobId)
	f.ack(s)
	f.clock.Advance(workflow.DefaultAckTimeout + time.Minute)
	r, err := f.eng.ExpireAck(f.ctx, keyOf(s))
	f.swept("ack timeout of an acknowledged attempt", r, err, false, "")
	f.succeed(s)
	f.clock.Advance(48 * time.Hour)
	for name, sweep := range map[string]func() (engine.Swept, error){
		"ack":      func() (engine.Swept, error) { return f.eng.ExpireAck(f.ctx, keyOf(s)) },
		"lease":    func() (engine.Swept, error) { return f.eng.ExpireLease(f.ctx, keyOf(s)) },
		"dispatch": func() (engine.Swept, error) { return f.eng.Redispatch(f.ctx, keyOf(s)) },
		"sla":      func() (engine.Swept, error) { return f.eng.ExpireSLA(f.ctx, q.JobId) },
	} {
		r, err := sweep()
		f.swept(name+" after success", r, err, false, "")
	}
	if j := f.job(q.JobId); j.Status != ledger.JobSucceeded {
		t.Fatalf("job %s", j.Status)
	}
	assertTerminalNeverChanged(t, f.events(q.JobId))
}

// Replay re-runs a failed job from its failed step: succeeded steps keep their
// outputs, the failed step runs with a new attempt.
func TestReplayRerunsAFailedJobFromItsFailedStep(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR_EMBEDDING_SIS")
	f.create(q)
	if _, err := engine.Replay(f.ctx, f.store, q.JobId, "", nil); !errors.Is(err, engine.ErrNotReplayable) {
		t.Fatalf("replay of a running job: %v", err)
	}
	f.succeed(f.current(q.JobId))
	emb := f.current(q.JobId)
	f.result(q.JobId, emb.StepID, 1, emb.LeaseID, engine.ResultFailed, false)
	if j := f.job(q.JobId); j.Status != ledger.JobFailedFinal {
		t.Fatalf("job %s", j.Status)
	}
	f.outbox(q.JobId) // take what the original job enqueued

	replay, err := engine.Replay(f.ctx, f.store, q.JobId, "fixed the model", nil)
	if err != nil {
		t.Fatal(err)
	}
	if replay.JobID == q.JobId || replay.ReplayOf != q.JobId || replay.Status != ledger.JobReceived {
		t.Fatalf("replay %+v", replay)
	}
	again, err := engine.Replay(f.ctx, f.store, q.JobId, "", nil)
	if err != nil || again.JobID != replay.JobID {
		t.Fatalf("a second replay call while the first runs: %v, %s", err, again.JobID)
	}
	if dl := f.deadLetters(q.JobId); len(dl) != 1 || dl[0].ReplayJobID != replay.JobID {
		t.Fatalf("dead letters %+v", dl)
	}
	msgs := f.outbox(replay.JobID)
	if len(msgs) != 1 || msgs[0].Kind != ledger.KindJobRequest {
		t.Fatalf("replay outbox %+v", msgs)
	}
	rq := &luciusv1.QueuedJob{}
	if err := protojson.Unmarshal(msgs[0].Body, rq); err != nil || rq.ReplayOf != q.JobId {
		t.Fatalf("queued replay %v %+v", err, rq)
	}
	created, err := f.eng.CreateJob(f.ctx, rq, "orch-b")
	if err != nil || !created.New || created.Job.ReplayOf != q.JobId {
		t.Fatalf("create replay: %v %+v", err, created)
	}
	steps := f.steps(replay.JobID)
	if steps[0].Status != ledger.StepSucceeded || len(steps[0].Attempts) != 0 || steps[0].Artifacts[0].URI != "file:///tmp/ws/ocr.txt" {
		t.Fatalf("kept step %s with %d attempts, artifacts %+v", steps[0].Status, len(steps[0].Attempts), steps[0].Artifacts)
	}
	if steps[1].Status != ledger.StepDispatching || steps[1].AttemptNo != 2 || steps[2].Status != ledger.StepPending {
		t.Fatalf("replayed steps %s#%d, %s", steps[1].Status, steps[1].AttemptNo, steps[2].Status)
	}
	f.succeed(f.current(replay.JobID))
	f.succeed(f.current(replay.JobID))
	if j := f.job(replay.JobID); j.Status != ledger.JobSucceeded {
		t.Fatalf("replay ended %s: %s", j.Status, j.Reason)
	}
	if j := f.job(q.JobId); j.Status != ledger.JobFailedFinal {
		t.Fatalf("the original changed to %s", j.Status)
	}
	if !hasEvent(f.events(q.JobId), ledger.EventJobReplayed, "fixed the model") {
		t.Fatal("no JOB_REPLAYED event")
	}
	// A succeeded replay answers further calls too.
	if again, err := engine.Replay(f.ctx, f.store, q.JobId, "", nil); err != nil || again.JobID != replay.JobID {
		t.Fatalf("replay after the replay succeeded: %v %s", err, again.JobID)
	}
	assertTerminalNeverChanged(t, f.events(q.JobId))
	assertTerminalNeverChanged(t, f.events(replay.JobID))
}

// A write by an owner whose epoch was superseded changes nothing and is recorded.
func TestRecoverAtAStaleEpochIsFenced(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	f.create(q)
	if _, err := f.store.Pool().Exec(f.ctx, `UPDATE jobs SET owner_heartbeat_at = now() - interval '10 minutes' WHERE job_id = $1`, q.JobId); err != nil {
		t.Fatal(err)
	}
	got, err := f.store.ReclaimOrphans(f.ctx, "orch-b", 2*time.Minute, 10)
	if err != nil || len(got) != 1 || got[0].Epoch != 2 {
		t.Fatalf("reclaim %v %+v", err, got)
	}
	before := f.steps(q.JobId)
	if err := f.eng.Recover(f.ctx, q.JobId, "orch-a", 1); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("recover at the old epoch: %v", err)
	}
	if !hasEvent(f.events(q.JobId), ledger.EventFenced, "STALE_OWNER_EPOCH") {
		t.Fatal("no WRITE_FENCED event")
	}
	if err := f.eng.Recover(f.ctx, q.JobId, "orch-b", 2); err != nil {
		t.Fatalf("recover at the current epoch: %v", err)
	}
	after := f.steps(q.JobId)
	if after[0].AttemptNo != before[0].AttemptNo || after[0].Status != before[0].Status {
		t.Fatalf("recover changed an in-flight step: %s#%d → %s#%d", before[0].Status, before[0].AttemptNo, after[0].Status, after[0].AttemptNo)
	}
	if j := f.job(q.JobId); j.OwnerID != "orch-b" || j.OwnerEpoch != 2 {
		t.Fatalf("owner %s@%d", j.OwnerID, j.OwnerEpoch)
	}
}

// An accepted request whose queue message was lost is enqueued again.
func TestStrandedRequestIsRequeued(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	if ids, _ := f.store.StrandedRequests(f.ctx, 0, engine.MaxRequeues, 1000); contains(ids, q.JobId) {
		t.Fatal("a request whose message waits in the outbox counted as stranded")
	}
	f.publishRequests() // sent, then dead-lettered by the bus: nobody claims it
	ids, err := f.store.StrandedRequests(f.ctx, 0, engine.MaxRequeues, 1000)
	if err != nil || !contains(ids, q.JobId) {
		t.Fatalf("StrandedRequests %v %v", ids, err)
	}
	r, err := engine.Requeue(f.ctx, f.store, q.JobId)
	f.swept("requeue", r, err, true, "REQUEUED")
	msgs := f.outbox(q.JobId)
	if len(msgs) != 1 || msgs[0].MessageID != "job-request/"+q.JobId+"#requeue-1" {
		t.Fatalf("requeued outbox %+v", msgs)
	}
	rq := &luciusv1.QueuedJob{}
	if err := protojson.Unmarshal(msgs[0].Body, rq); err != nil || rq.JobId != q.JobId {
		t.Fatalf("requeued message %v %+v", err, rq)
	}
	f.create(rq)
	if ids, _ := f.store.StrandedRequests(f.ctx, 0, engine.MaxRequeues, 1000); contains(ids, q.JobId) {
		t.Fatal("a claimed request counted as stranded")
	}
	r, err = engine.Requeue(f.ctx, f.store, q.JobId)
	f.swept("requeue of a claimed request", r, err, false, "")
}

// Bus dead letters are collected once per (entity, message id).
func TestBusDeadLettersAreCollectedOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	d := ledger.DeadLetter{Kind: ledger.DeadLetterBus, JobID: q.JobId, Reason: "MaxDeliveryCountExceeded",
		Entity: "orchestrator-jobs/$deadletterqueue", MessageID: "job-request/" + q.JobId, Body: []byte(`{}`),
		Properties: map[string]string{"job_id": q.JobId}}
	for i, want := range []bool{true, false} {
		got, err := f.store.CollectDeadLetter(f.ctx, d)
		if err != nil || got != want {
			t.Fatalf("collect #%d: %v %v, want %v", i+1, got, err, want)
		}
	}
	list, err := f.store.ListDeadLetters(f.ctx, ledger.DeadLetterFilter{Kind: ledger.DeadLetterBus, JobID: q.JobId, Limit: 10})
	if err != nil || len(list) != 1 || list[0].Properties["job_id"] != q.JobId {
		t.Fatalf("list %v %+v", err, list)
	}
	one, err := f.store.GetDeadLetter(f.ctx, list[0].ID)
	if err != nil || string(one.Body) != `{}` || one.Reason != "MaxDeliveryCountExceeded" {
		t.Fatalf("get %v %+v", err, one)
	}
	if _, err := f.store.GetDeadLetter(f.ctx, list[0].ID+1000); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("unknown dead letter: %v", err)
	}
	if n := countEvents(f.events(q.JobId), ledger.EventBusDeadLetter); n != 1 {
		t.Fatalf("%d BUS_DEAD_LETTER events, want 1", n)
	}
}

// createID creates a job from its queued message in the outbox.
func (f *fixture) createID(jobID string) {
	f.t.Helper()
	var body []byte
	if err := f.store.Pool().QueryRow(f.ctx, `SELECT body FROM outbox WHERE job_id = $1 AND kind = 'job-request' ORDER BY id LIMIT 1`, jobID).Scan(&body); err != nil {
		f.t.Fatal(err)
	}
	q := &luciusv1.QueuedJob{}
	if err := protojson.Unmarshal(body, q); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.eng.CreateJob(f.ctx, q, "orch-a"); err != nil {
		f.t.Fatal(err)
	}
}

// publishRequests marks every waiting job request published.
func (f *fixture) publishRequests() {
	f.t.Helper()
	msgs, err := f.store.ClaimOutbox(f.ctx, ledger.OutboxClaim{Limit: 1000, Lease: time.Minute, Kinds: []string{ledger.KindJobRequest}})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.store.MarkSent(f.ctx, msgs); err != nil {
		f.t.Fatal(err)
	}
}

func containsKey(keys []ledger.AttemptKey, k ledger.AttemptKey) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func countEvents(events []ledger.Event, typ string) int {
	n := 0
	for _, e := range events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// A message stuck in the outbox is reported once; one that failed to publish
// and waits out its backoff is made available at once.
func TestStaleOutboxIsReportedOnceAndRetriedAtOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	msgs, err := f.store.ClaimOutbox(f.ctx, ledger.OutboxClaim{Limit: 10, Lease: time.Minute})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("claim: %v %d", err, len(msgs))
	}
	if err := f.store.ReleaseOutbox(f.ctx, msgs[0].ID, "entity not found", time.Hour); err != nil {
		t.Fatal(err)
	}
	if again, _ := f.store.ClaimOutbox(f.ctx, ledger.OutboxClaim{Limit: 10, Lease: time.Minute}); len(again) != 0 {
		t.Fatal("a message backing off was claimable")
	}
	if rows, _ := f.store.StaleOutbox(f.ctx, time.Hour, 100); len(rows) != 0 {
		t.Fatalf("a fresh message counted as stale: %+v", rows)
	}
	rows, err := f.store.StaleOutbox(f.ctx, 0, 100)
	if err != nil || len(rows) != 1 || rows[0].JobID != q.JobId || rows[0].LastError != "entity not found" ||
		rows[0].Destination != "orchestrator-jobs" || rows[0].Attempts != 1 {
		t.Fatalf("stale rows %v %+v", err, rows)
	}
	if again, _ := f.store.StaleOutbox(f.ctx, 0, 100); len(again) != 0 {
		t.Fatalf("reported twice: %+v", again)
	}
	if claimed, _ := f.store.ClaimOutbox(f.ctx, ledger.OutboxClaim{Limit: 10, Lease: time.Minute}); len(claimed) != 1 {
		t.Fatal("the stale message was not made available again")
	}
}
