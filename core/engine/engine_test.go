package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/base/auth"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/telemetry/telemetrytest"
	"github.com/lucius-platform/lucius/bus/routing"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/workflow"
)

// metrics reads what the package's tests record on the global meter provider.
var metrics *telemetrytest.Reader

func TestMain(m *testing.M) {
	metrics = telemetrytest.InstallGlobal()
	pgtest.Main(m, ledger.Migrations, config.Migrations)
}

type fixture struct {
	t     *testing.T
	ctx   context.Context
	store *ledger.Store
	waits *pgtest.Waits // the store's waits on the database
	reg   *registry.Registry
	eng   *engine.Engine
	clock *clock
}

// clock is the engine's time: real time until a test moves it on.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the engine's time on (the database's now() stays real).
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func setup(t *testing.T) *fixture {
	t.Helper()
	return setupWithLimits(t, workflow.Limits{})
}

// setupWithLimits is setup with a registry whose definitions have limits.
func setupWithLimits(t *testing.T, limits workflow.Limits) *fixture {
	t.Helper()
	pool, waits := pgtest.NewCountingPool(t)
	store := ledger.New(pool, nil)
	t.Cleanup(store.Close)
	reg := registry.New(store, limits)
	if _, err := reg.Load(context.Background(), workflow.BuiltinFiles()); err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	eng, err := engine.New(store, engine.Config{CallbackKeys: testCallbackKeys,
		Definitions:   reg,
		Callbacks:     engine.Callbacks{GRPCTarget: "dns:///orchestrator:9091", RESTBaseURL: "http://orchestrator:8081"},
		WorkspaceRoot: "file:///tmp/ws",
		Now:           clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ctx: context.Background(), store: store, waits: waits, reg: reg, eng: eng, clock: clk}
}

// accept stores a request the way the gateway does and returns its queue message.
func (f *fixture) accept(requestType string) *luciusv1.QueuedJob {
	f.t.Helper()
	return f.acceptWith(requestType, map[string]any{"prompt_set": []any{"summarize"}}, "")
}

func (f *fixture) acceptWith(requestType string, inputs map[string]any, callbackURL string) *luciusv1.QueuedJob {
	f.t.Helper()
	q, err := f.submit("Acme", requestType, inputs, callbackURL, ledger.Limits{})
	if err != nil {
		f.t.Fatal(err)
	}
	return q
}

// submit stores a request the way the gateway does, under admission limits.
func (f *fixture) submit(tenant, requestType string, inputs map[string]any, callbackURL string, limits ledger.Limits) (*luciusv1.QueuedJob, error) {
	q, req, msg, err := f.request(tenant, requestType, inputs, callbackURL)
	if err != nil {
		return nil, err
	}
	_, err = f.store.Accept(f.ctx, req, msg, limits)
	return q, err
}

// request builds what the gateway stores for a command.
func (f *fixture) request(tenant, requestType string, inputs map[string]any, callbackURL string) (*luciusv1.QueuedJob, ledger.Request, ledger.OutboxMessage, error) {
	def, err := f.reg.Get(f.ctx, requestType, 0)
	if err != nil {
		return nil, ledger.Request{}, ledger.OutboxMessage{}, err
	}
	payload, _ := structpb.NewStruct(inputs)
	cmd := &luciusv1.Command{TenantId: tenant, RequestType: requestType, InputRef: "file:///in.txt",
		OutputRef: "file:///out.json", Payload: payload, SchemaVersion: "1", CallbackUrl: callbackURL}
	d, err := routing.Resolve(routing.Input{TenantID: cmd.TenantId})
	if err != nil {
		return nil, ledger.Request{}, ledger.OutboxMessage{}, err
	}
	jobID := strings.ReplaceAll(uuid.NewString()+uuid.NewString(), "-", "")
	pinned := ledger.Routing{Mode: string(d.Mode), Partition: d.Partition, RoutingKey: d.RoutingKey, Topic: d.Topic,
		DecisionSource: string(d.Source), DecisionReason: d.Reason}
	raw, _ := protojson.Marshal(cmd)
	q := &luciusv1.QueuedJob{JobId: jobID, Command: cmd, Routing: engine.RoutingToProto(pinned)}
	body, _ := protojson.Marshal(q)
	req := ledger.Request{JobID: jobID, TenantID: routing.Normalize(tenant), RequestHash: "h",
		RequestType: requestType, WorkflowVersion: def.Version, InputRef: cmd.InputRef, OutputRef: cmd.OutputRef,
		CallbackURL: callbackURL, Command: raw, Routing: pinned}
	msg := ledger.OutboxMessage{MessageID: "job/" + jobID, Destination: "orchestrator-jobs", Kind: ledger.KindJobRequest, JobID: jobID, Body: body}
	return q, req, msg, nil
}

func (f *fixture) create(q *luciusv1.QueuedJob) *ledger.Job {
	f.t.Helper()
	c, err := f.eng.CreateJob(f.ctx, q, "orch-a")
	if err != nil {
		f.t.Fatal(err)
	}
	if !c.New {
		f.t.Fatal("CreateJob did not create the job")
	}
	return c.Job
}

// steps lists the job's executable steps (tasks and fan-out children).
func (f *fixture) steps(jobID string) []ledger.StepWithAttempts {
	f.t.Helper()
	steps, err := f.store.ListSteps(f.ctx, jobID, ledger.StepFilter{Kinds: []string{ledger.KindTask, ledger.KindChild}})
	if err != nil {
		f.t.Fatal(err)
	}
	return steps
}

func (f *fixture) job(jobID string) *ledger.Job {
	f.t.Helper()
	j, err := f.store.GetJob(f.ctx, jobID)
	if err != nil {
		f.t.Fatal(err)
	}
	return j
}

// current returns the step in flight (or waiting for its retry) and its attempt.
func (f *fixture) current(jobID string) ledger.StepWithAttempts {
	f.t.Helper()
	for _, s := range f.steps(jobID) {
		if s.Status.InFlight() || s.Status == ledger.StepFailedRetry {
			return s
		}
	}
	f.t.Fatalf("job %s has no step in flight", jobID)
	return ledger.StepWithAttempts{}
}

// keyOfStep names the current attempt of s as its worker's callbacks do.
func keyOfStep(s ledger.StepWithAttempts) engine.CallbackKey {
	return engine.CallbackKey{JobID: s.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo, LeaseID: s.LeaseID, WorkerID: "w1"}
}

// object is m as the orchestrator hands a callback's output or progress to
// the engine: the JSON of a google.protobuf.Struct ({} for nil).
func object(t testing.TB, m map[string]any) json.RawMessage {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := protojson.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *fixture) ack(s ledger.StepWithAttempts) engine.AckResult {
	f.t.Helper()
	r, err := f.eng.Ack(f.ctx, keyOfStep(s))
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) result(jobID, stepID string, attempt int, lease string, status engine.ResultStatus, retryable bool) engine.ResultResult {
	f.t.Helper()
	r, err := f.eng.Result(f.ctx, engine.CallbackKey{JobID: jobID, StepID: stepID, AttemptNo: attempt, LeaseID: lease},
		engine.Result{Status: status, Retryable: retryable, Reason: "boom",
			Artifacts: []ledger.Artifact{{Name: "out", URI: "file:///tmp/ws/" + stepID + ".txt"}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) succeed(s ledger.StepWithAttempts) engine.ResultResult {
	f.t.Helper()
	return f.result(s.JobID, s.StepID, s.AttemptNo, s.LeaseID, engine.ResultSucceeded, false)
}

func (f *fixture) events(jobID string) []ledger.Event {
	f.t.Helper()
	ev, err := f.store.ListEvents(f.ctx, jobID, 0, 1000)
	if err != nil {
		f.t.Fatal(err)
	}
	return ev
}

func (f *fixture) outbox(jobID string) []ledger.OutboxMessage {
	f.t.Helper()
	var out []ledger.OutboxMessage
	msgs, err := f.store.ClaimOutbox(f.ctx, ledger.OutboxClaim{Limit: 1000, Lease: time.Minute})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, m := range msgs {
		if m.JobID == jobID {
			out = append(out, m)
		}
	}
	return out
}

const applied = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED

func TestThreeStepJobRunsToSuccess(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR_EMBEDDING_SIS")
	if got := f.job(q.JobId).Status; got != ledger.JobReceived {
		t.Fatalf("accepted job is %s, want RECEIVED", got)
	}
	job := f.create(q)
	if job.Status != ledger.JobDispatching || job.OwnerID != "orch-a" || job.OwnerEpoch != 1 {
		t.Fatalf("created job %+v", job)
	}
	for i, want := range []string{"ocr", "embedding", "sis"} {
		s := f.current(q.JobId)
		if s.StepID != want || s.AttemptNo != 1 {
			t.Fatalf("step %d in flight is %s#%d, want %s#1", i, s.StepID, s.AttemptNo, want)
		}
		if r := f.ack(s); r.Outcome != applied || r.StepStatus != ledger.StepInProgress {
			t.Fatalf("ack: %+v", r)
		}
		if got := f.job(q.JobId).Status; got != ledger.JobInProgress {
			t.Fatalf("job after ack is %s", got)
		}
		if r := f.succeed(s); r.Outcome != applied || r.StepStatus != ledger.StepSucceeded {
			t.Fatalf("result: %+v", r)
		}
	}
	final := f.job(q.JobId)
	if final.Status != ledger.JobSucceeded || final.ResultRef != "file:///out.json" || final.CompletedAt.IsZero() {
		t.Fatalf("final job %+v", final)
	}
	steps := f.steps(q.JobId)
	for _, s := range steps {
		if s.Status != ledger.StepSucceeded || len(s.Attempts) != 1 {
			t.Fatalf("step %s is %s with %d attempts", s.StepID, s.Status, len(s.Attempts))
		}
	}
	// Each step's directive reads the previous step's artifact.
	msgs := f.outbox(q.JobId)
	var directives []*luciusv1.Directive
	for _, m := range msgs {
		if m.Kind != ledger.KindDirective {
			continue
		}
		d := &luciusv1.Directive{}
		if err := protojson.Unmarshal(m.Body, d); err != nil {
			t.Fatal(err)
		}
		directives = append(directives, d)
		if m.Destination != job.Routing.Topic || m.Properties["service"] != d.Service || m.Key != "acme" {
			t.Fatalf("directive message routed wrong: %+v", m)
		}
	}
	if len(directives) != 3 {
		t.Fatalf("%d directives, want 3", len(directives))
	}
	if directives[0].InputRef != "file:///in.txt" || directives[1].InputRef != "file:///tmp/ws/ocr.txt" ||
		directives[2].InputRef != "file:///tmp/ws/embedding.txt" || !directives[2].FinalStep || directives[0].FinalStep {
		t.Fatalf("directive inputs: %s, %s, %s", directives[0].InputRef, directives[1].InputRef, directives[2].InputRef)
	}
	if directives[0].WorkspaceRef != "file:///tmp/ws/lucius/acme/"+q.JobId+"/" {
		t.Fatalf("workspace_ref %s", directives[0].WorkspaceRef)
	}
	if directives[0].CallbackUrls.GetAckUrl() != "http://orchestrator:8081/v1/jobs/"+q.JobId+"/steps/ocr/attempts/1:ack" {
		t.Fatalf("ack url %s", directives[0].CallbackUrls.GetAckUrl())
	}
	assertTerminalNeverChanged(t, f.events(q.JobId))
}

func TestCreateJobTwiceCreatesOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	f.create(q)
	again, err := f.eng.CreateJob(f.ctx, q, "orch-b")
	if err != nil {
		t.Fatal(err)
	}
	if again.New {
		t.Fatal("a redelivered queue message created the job again")
	}
	if j := f.job(q.JobId); j.OwnerID != "orch-a" {
		t.Fatalf("owner changed to %s", j.OwnerID)
	}
	if n := len(f.steps(q.JobId)[0].Attempts); n != 1 {
		t.Fatalf("%d attempts after redelivery, want 1", n)
	}
}

func TestStaleCallbacksAreRecordedAndChangeNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR_EMBEDDING")
	f.create(q)
	s := f.current(q.JobId)
	f.ack(s)
	succeeded := engine.ResultSucceeded
	tests := []struct {
		name    string
		attempt int
		lease   string
		want    luciusv1.CallbackOutcome
		reason  string
	}{
		{"wrong lease", s.AttemptNo, uuid.NewString(), luciusv1.CallbackOutcome_CALLBACK_OUTCOME_LEASE_MISMATCH, engine.ReasonLeaseMismatch},
		{"wrong attempt", s.AttemptNo + 1, s.LeaseID, luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT, engine.ReasonStaleAttempt},
		{"unknown attempt and lease", s.AttemptNo + 6, uuid.NewString(), luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT, engine.ReasonStaleAttempt},
	}
	for _, tt := range tests {
		before := f.steps(q.JobId)
		r := f.result(q.JobId, s.StepID, tt.attempt, tt.lease, succeeded, false)
		if r.Outcome != tt.want {
			t.Fatalf("%s: outcome %s, want %s", tt.name, r.Outcome, tt.want)
		}
		after := f.steps(q.JobId)
		if after[0].Status != before[0].Status || after[1].Status != before[1].Status {
			t.Fatalf("%s changed state: %s/%s → %s/%s", tt.name, before[0].Status, before[1].Status, after[0].Status, after[1].Status)
		}
		if !hasEvent(f.events(q.JobId), ledger.EventCallbackRejected, tt.reason) {
			t.Fatalf("%s: no CALLBACK_REJECTED %s event", tt.name, tt.reason)
		}
	}
	// The genuine result still applies after the rejected ones.
	if r := f.succeed(s); r.Outcome != applied {
		t.Fatalf("genuine result: %s", r.Outcome)
	}
	// Repeating it is a duplicate; it changes nothing.
	next := f.current(q.JobId)
	if r := f.succeed(s); r.Outcome != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE {
		t.Fatalf("repeated result: %s", r.Outcome)
	}
	if f.current(q.JobId).AttemptNo != next.AttemptNo {
		t.Fatal("duplicate result started another attempt")
	}
	if r := f.ack(s); r.Outcome != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE {
		t.Fatalf("ACK for a finished current attempt: %s", r.Outcome)
	}
	// Finish the job; any callback afterwards is AFTER_TERMINAL or DUPLICATE, never applied.
	f.succeed(next)
	if r := f.result(q.JobId, next.StepID, next.AttemptNo, uuid.NewString(), succeeded, false); r.Outcome != luciusv1.CallbackOutcome_CALLBACK_OUTCOME_AFTER_TERMINAL {
		t.Fatalf("late result with another lease: %s", r.Outcome)
	}
	if f.job(q.JobId).Status != ledger.JobSucceeded {
		t.Fatal("late callback changed the terminal job")
	}
	assertTerminalNeverChanged(t, f.events(q.JobId))
}

func TestResultBeforeAckImpliesAck(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	f.create(q)
	s := f.current(q.JobId)
	if r := f.succeed(s); r.Outcome != applied || r.JobStatus != ledger.JobSucceeded {
		t.Fatalf("result without ack: %+v", r)
	}
	att := f.steps(q.JobId)[0].Attempts[0]
	if att.AckedAt.IsZero() || att.Status != ledger.StepSucceeded {
		t.Fatalf("attempt %+v", att)
	}
}

func TestNonRetryableFailureFailsJobAndCancelsPendingSteps(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR_EMBEDDING_SIS")
	f.create(q)
	s := f.current(q.JobId)
	r := f.result(q.JobId, s.StepID, 1, s.LeaseID, engine.ResultFailed, false)
	if r.StepStatus != ledger.StepFailedFinal || r.JobStatus != ledger.JobFailedFinal {
		t.Fatalf("result %+v", r)
	}
	steps := f.steps(q.JobId)
	if steps[1].Status != ledger.StepCancelled || steps[2].Status != ledger.StepCancelled || steps[1].AttemptNo != 0 {
		t.Fatalf("later steps %s/%s", steps[1].Status, steps[2].Status)
	}
	if j := f.job(q.JobId); j.Reason != "step ocr failed (RESULT_FAILED_NON_RETRYABLE): boom" {
		t.Fatalf("job reason %q", j.Reason)
	}
}

func TestRetryableFailureRetriesWithPinnedRoutingUntilExhausted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	job := f.create(q)
	for attempt := 1; attempt <= workflow.DefaultMaxAttempts; attempt++ {
		s := f.current(q.JobId) // a retry waiting out its backoff is current too
		if s.AttemptNo != attempt {
			t.Fatalf("attempt %d in flight, want %d", s.AttemptNo, attempt)
		}
		r := f.result(q.JobId, s.StepID, attempt, s.LeaseID, engine.ResultFailed, true)
		if attempt < workflow.DefaultMaxAttempts && (r.StepStatus != ledger.StepFailedRetry || r.JobStatus != ledger.JobFailedRetry) {
			t.Fatalf("attempt %d: %+v", attempt, r)
		}
		if attempt == workflow.DefaultMaxAttempts && (r.StepStatus != ledger.StepFailedFinal || r.JobStatus != ledger.JobFailedFinal) {
			t.Fatalf("last attempt: %+v", r)
		}
	}
	steps := f.steps(q.JobId)
	if len(steps[0].Attempts) != 3 {
		t.Fatalf("%d attempts, want 3", len(steps[0].Attempts))
	}
	leases := map[string]bool{}
	for _, a := range steps[0].Attempts {
		if a.Routing != job.Routing {
			t.Fatalf("attempt %d routing %+v differs from pinned %+v", a.AttemptNo, a.Routing, job.Routing)
		}
		leases[a.LeaseID] = true
	}
	if len(leases) != 3 {
		t.Fatal("attempts share a lease id")
	}
	// Retries are delivered after backoff through scheduled enqueue.
	var scheduled int
	for _, m := range f.outbox(q.JobId) {
		if m.Kind == ledger.KindDirective && m.AttemptNo > 1 && !m.ScheduledAt.IsZero() {
			scheduled++
		}
	}
	if scheduled != 2 {
		t.Fatalf("%d scheduled retry directives, want 2", scheduled)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	t.Run("before an orchestrator claims the job", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		q := f.accept("OCR_EMBEDDING")
		j, err := f.eng.Cancel(f.ctx, q.JobId, "changed my mind")
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != ledger.JobCancelling {
			t.Fatalf("unclaimed cancelled job shows %s, want CANCELLING", j.Status)
		}
		c, err := f.eng.CreateJob(f.ctx, q, "orch-a")
		if err != nil || !c.New {
			t.Fatal(err)
		}
		if c.Job.Status != ledger.JobCancelled {
			t.Fatalf("claimed cancelled job is %s", c.Job.Status)
		}
		for _, s := range f.steps(q.JobId) {
			if s.Status != ledger.StepCancelled || s.AttemptNo != 0 {
				t.Fatalf("step %s is %s (attempt %d)", s.StepID, s.Status, s.AttemptNo)
			}
		}
	})
	t.Run("in flight lets the step finish and starts nothing new", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		q := f.accept("OCR_EMBEDDING_SIS")
		f.create(q)
		s := f.current(q.JobId)
		f.ack(s)
		j, err := f.eng.Cancel(f.ctx, q.JobId, "")
		if err != nil || j.Status != ledger.JobCancelling {
			t.Fatalf("cancel: %v %+v", err, j)
		}
		if r := f.succeed(s); r.Outcome != applied || r.JobStatus != ledger.JobCancelled {
			t.Fatalf("in-flight result after cancel: %+v", r)
		}
		steps := f.steps(q.JobId)
		if steps[0].Status != ledger.StepSucceeded || steps[1].Status != ledger.StepCancelled || steps[1].AttemptNo != 0 {
			t.Fatalf("steps %s %s#%d", steps[0].Status, steps[1].Status, steps[1].AttemptNo)
		}
	})
	t.Run("a terminal job is left alone", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		q := f.accept("OCR")
		f.create(q)
		f.succeed(f.current(q.JobId))
		j, err := f.eng.Cancel(f.ctx, q.JobId, "")
		if err != nil || j.Status != ledger.JobSucceeded {
			t.Fatalf("cancel of terminal job: %v %+v", err, j)
		}
	})
	t.Run("an unknown job is not found", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		if _, err := f.eng.Cancel(f.ctx, "0000000000000000000000000000000000000000000000000000000000000000", ""); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("error %v, want ErrNotFound", err)
		}
	})
}

// Many workers delivering the same RESULT at once must advance the job exactly once.
func TestConcurrentDuplicateResultsApplyOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR_EMBEDDING")
	f.create(q)
	s := f.current(q.JobId)
	var wg sync.WaitGroup
	outcomes := make(chan luciusv1.CallbackOutcome, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := f.eng.Result(f.ctx, engine.CallbackKey{JobID: s.JobID, StepID: s.StepID, AttemptNo: 1, LeaseID: s.LeaseID},
				engine.Result{Status: engine.ResultSucceeded})
			if err != nil {
				t.Error(err)
				return
			}
			outcomes <- r.Outcome
		}()
	}
	wg.Wait()
	close(outcomes)
	count := map[luciusv1.CallbackOutcome]int{}
	for o := range outcomes {
		count[o]++
	}
	if count[applied] != 1 || count[luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE] != 49 {
		t.Fatalf("outcomes %v, want 1 applied and 49 duplicates", count)
	}
	if steps := f.steps(q.JobId); len(steps[1].Attempts) != 1 {
		t.Fatalf("next step has %d attempts, want 1", len(steps[1].Attempts))
	}
}

func TestMarkSentMovesJobAndStepOn(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	msgs, err := f.store.ClaimOutbox(f.ctx, ledger.OutboxClaim{Limit: 10, Lease: time.Minute})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("claim: %v, %d messages", err, len(msgs))
	}
	if err := f.store.MarkSent(f.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if got := f.job(q.JobId).Status; got != ledger.JobQueued {
		t.Fatalf("published request shows %s, want QUEUED", got)
	}
	f.create(q)
	msgs, err = f.store.ClaimOutbox(f.ctx, ledger.OutboxClaim{Limit: 10, Lease: time.Minute})
	if err != nil || len(msgs) != 1 || msgs[0].Kind != ledger.KindDirective {
		t.Fatalf("claim directive: %v %+v", err, msgs)
	}
	if again, _ := f.store.ClaimOutbox(f.ctx, ledger.OutboxClaim{Limit: 10, Lease: time.Minute}); len(again) != 0 {
		t.Fatal("a leased outbox message was claimed twice")
	}
	if err := f.store.MarkSent(f.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if s := f.steps(q.JobId)[0]; s.Status != ledger.StepAwaitingAck || s.Attempts[0].Status != ledger.StepAwaitingAck {
		t.Fatalf("step after publish: %s / %s", s.Status, s.Attempts[0].Status)
	}
	// Marking again (a dispatcher that crashed after publishing) changes nothing.
	if err := f.store.MarkSent(f.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range f.events(q.JobId) {
		if e.ToStatus == string(ledger.StepAwaitingAck) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d AWAITING_ACK transitions, want 1", n)
	}
}

func TestOrphanReclaimIncrementsEpoch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	f.create(q)
	orphans := func(threshold time.Duration) int64 {
		t.Helper()
		n, err := f.store.CountOrphans(f.ctx, threshold)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := orphans(2 * time.Minute); n != 0 {
		t.Fatalf("%d orphans while the owner heartbeats", n)
	}
	if _, err := f.store.Pool().Exec(f.ctx, `UPDATE jobs SET owner_heartbeat_at = now() - interval '10 minutes'`); err != nil {
		t.Fatal(err)
	}
	if n, longer := orphans(2*time.Minute), orphans(20*time.Minute); n != 1 || longer != 0 {
		t.Fatalf("orphans past 2m: %d, past 20m: %d; want 1 and 0", n, longer)
	}
	got, err := f.store.ReclaimOrphans(f.ctx, "orch-b", 2*time.Minute, 10)
	if err != nil || len(got) != 1 || got[0].PreviousOwner != "orch-a" || got[0].Epoch != 2 {
		t.Fatalf("reclaim: %v %+v", err, got)
	}
	if n := orphans(2 * time.Minute); n != 0 {
		t.Fatalf("%d orphans after the reclaim", n)
	}
	kept, fenced, err := f.store.HeartbeatOwned(f.ctx, "orch-a", []ledger.OwnedJob{{JobID: q.JobId, Epoch: 1}})
	if err != nil || len(kept) != 0 || len(fenced) != 1 || fenced[0].Owner != "orch-b" || fenced[0].CurrentEpoch != 2 {
		t.Fatalf("the former owner's heartbeat: kept %v, fenced %+v, %v", kept, fenced, err)
	}
	if kept, fenced, err := f.store.HeartbeatOwned(f.ctx, "orch-b", []ledger.OwnedJob{{JobID: q.JobId, Epoch: 2}}); err != nil || len(kept) != 1 || len(fenced) != 0 {
		t.Fatalf("the new owner's heartbeat: kept %v, fenced %+v, %v", kept, fenced, err)
	}
	if again, _ := f.store.ReclaimOrphans(f.ctx, "orch-c", 2*time.Minute, 10); len(again) != 0 {
		t.Fatal("a freshly heartbeated job was reclaimed")
	}
}

// Two orchestrators racing to reclaim the same orphans: each job gets exactly
// one new owner (epoch 2, one OWNER_CHANGED event), and the loser's writes on
// a job it did not win are fenced.
func TestConcurrentReclaimersTakeEachOrphanOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const jobs = 20
	for range jobs {
		f.create(f.accept("OCR"))
	}
	if _, err := f.store.Pool().Exec(f.ctx, `UPDATE jobs SET owner_heartbeat_at = now() - interval '10 minutes'`); err != nil {
		t.Fatal(err)
	}
	won := map[string][]ledger.Reclaimed{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, owner := range []string{"orch-b", "orch-c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 10 { // small batches, so the two interleave
				got, err := f.store.ReclaimOrphans(f.ctx, owner, 2*time.Minute, 3)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				won[owner] = append(won[owner], got...)
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	winner := map[string]string{}
	for owner, rs := range won {
		for _, r := range rs {
			if prev, ok := winner[r.JobID]; ok {
				t.Fatalf("job %s reclaimed by %s and %s", r.JobID, prev, owner)
			}
			if r.Epoch != 2 || r.PreviousOwner != "orch-a" {
				t.Fatalf("reclaim %+v, want epoch 2 from orch-a", r)
			}
			winner[r.JobID] = owner
		}
	}
	if len(winner) != jobs {
		t.Fatalf("%d of %d orphans reclaimed (orch-b %d, orch-c %d)", len(winner), jobs, len(won["orch-b"]), len(won["orch-c"]))
	}
	t.Logf("orch-b reclaimed %d, orch-c %d", len(won["orch-b"]), len(won["orch-c"]))
	var events int
	if err := f.store.Pool().QueryRow(f.ctx, `SELECT count(*) FROM job_events WHERE type = 'OWNER_CHANGED'`).Scan(&events); err != nil || events != jobs {
		t.Fatalf("%d OWNER_CHANGED events, want %d (%v)", events, jobs, err)
	}
	for job, owner := range winner {
		loser := "orch-b"
		if owner == loser {
			loser = "orch-c"
		}
		kept, fenced, err := f.store.HeartbeatOwned(f.ctx, loser, []ledger.OwnedJob{{JobID: job, Epoch: 2}})
		if err != nil || len(kept) != 0 || len(fenced) != 1 || fenced[0].Owner != owner {
			t.Fatalf("%s's heartbeat on %s (won by %s): kept %v, fenced %+v, %v", loser, job, owner, kept, fenced, err)
		}
	}
}

func hasEvent(events []ledger.Event, typ, reason string) bool {
	for _, e := range events {
		if e.Type == typ && e.Reason == reason {
			return true
		}
	}
	return false
}

// assertTerminalNeverChanged fails when the trail shows a job or step leaving a terminal state.
func assertTerminalNeverChanged(t *testing.T, events []ledger.Event) {
	t.Helper()
	for _, e := range events {
		from := e.FromStatus
		switch e.Type {
		case ledger.EventJobStatusChanged:
			if ledger.JobStatus(from).Terminal() {
				t.Fatalf("job left terminal state %s: %+v", from, e)
			}
		case ledger.EventStepStatusChanged:
			if ledger.StepStatus(from).Terminal() {
				t.Fatalf("step left terminal state %s: %+v", from, e)
			}
		}
	}
}

// A request pinned to a workflow version this orchestrator cannot find
// (configuration drift) fails with a reason instead of being lost.
func TestMissingWorkflowVersionFailsTheJobWithAReason(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	if _, err := f.store.Pool().Exec(f.ctx, `UPDATE requests SET workflow_version = 42`); err != nil {
		t.Fatal(err)
	}
	c, err := f.eng.CreateJob(f.ctx, q, "orch-a")
	if err != nil || !c.New {
		t.Fatalf("create: %v %+v", err, c)
	}
	j := f.job(q.JobId)
	if j.Status != ledger.JobFailedFinal || !strings.Contains(j.Reason, "OCR@42") || j.CompletedAt.IsZero() {
		t.Fatalf("job %+v", j)
	}
}

// testCallbackKeys sign the callback tokens of the tests' directives.
var testCallbackKeys = func() *auth.CallbackKeys {
	k, err := auth.GenerateCallbackKeys()
	if err != nil {
		panic(err)
	}
	return k
}()

// The correlation id a worker echoes from its directive lands on the events
// its callbacks cause (seed 004 §12: ingress → directive → callbacks → events).
func TestCallbacksCarryTheEchoedCorrelationIDIntoEvents(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := f.accept("OCR")
	f.create(q)
	s := f.current(q.JobId)
	if _, err := f.eng.Ack(f.ctx, engine.CallbackKey{JobID: s.JobID, StepID: s.StepID, AttemptNo: s.AttemptNo,
		LeaseID: s.LeaseID, WorkerID: "w1", CorrelationID: "order-4711"}); err != nil {
		t.Fatal(err)
	}
	var acked bool
	for _, e := range f.events(q.JobId) {
		if e.StepID == s.StepID && e.ToStatus == string(ledger.StepInProgress) {
			acked = true
			if e.Data["correlation_id"] != "order-4711" {
				t.Fatalf("the ACK's transition %+v lacks the echoed correlation id", e)
			}
		}
		if e.Type == ledger.EventJobAccepted && e.Data["correlation_id"] == "order-4711" {
			t.Fatalf("an event of an earlier transaction was annotated: %+v", e)
		}
	}
	if !acked {
		t.Fatal("no IN_PROGRESS transition")
	}
}
