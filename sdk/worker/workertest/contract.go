package workertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/membus"
	"github.com/lucius-platform/lucius/bus/routing"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

// eventually bounds the kit's waits for something that must happen.
const eventually = 30 * time.Second

// CheckContract runs handler (the step type name) in the real runtime (a
// worker.Runner) against an in-memory bus, a local idempotency store and an
// in-process CallbackService, with input as the job's input, and checks
// what Lucius relies on from every worker:
//
//   - the directive is ACKed, within its ack timeout, before the work runs;
//   - one RESULT follows, for the directive's attempt, well formed: a
//     SUCCEEDED one lists artifacts with a URI and SHA-256, a FAILED one
//     carries a failure class and a reason;
//   - a redelivered directive is not executed again: its stored RESULT is
//     sent again, the same;
//   - long work heartbeats while it runs, when the directive has a lease;
//   - a worker shut down mid-attempt lets the attempt finish (drain), the
//     RESULT delivered before the runner stops, or, when the handler stops at
//     the shutdown notice, releases it: the next worker delivers the RESULT;
//   - when the handler saves checkpoints, an attempt interrupted by a
//     shutdown after its first checkpoint resumes from it on the next
//     delivery and succeeds.
func CheckContract(t *testing.T, handler string, exec worker.Executor, input []byte) {
	t.Helper()
	t.Run("ack then one well-formed result", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, handler)
		runs := h.Start(exec)
		d := h.Directive(input)
		sent := time.Now()
		h.Publish(d)
		res := h.Orchestrator.WaitResult(t, d)
		acks := h.Orchestrator.Acks(d)
		if len(acks) != 1 {
			t.Fatalf("%d ACKs for the attempt, want 1", len(acks))
		}
		if took := acks[0].At.Sub(sent); took > d.GetAckTimeout().AsDuration() {
			t.Errorf("ACK took %v, past the directive's ack timeout %v", took, d.GetAckTimeout().AsDuration())
		}
		if runs.Load() != 1 {
			t.Errorf("handler ran %d times, want 1", runs.Load())
		}
		checkResultShape(t, d, res)
	})
	t.Run("redelivered directive is not executed again", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, handler)
		runs := h.Start(exec)
		d := h.Directive(input)
		h.Publish(d)
		first := h.Orchestrator.WaitResult(t, d)
		h.Publish(d) // the same attempt again: a duplicate delivery
		h.Orchestrator.WaitResults(t, d, 2)
		if runs.Load() != 1 {
			t.Errorf("handler ran %d times for one attempt delivered twice, want 1", runs.Load())
		}
		again := h.Orchestrator.Results(d)[1]
		again.CallbackToken, first.CallbackToken = "", ""
		if !proto.Equal(first, again) {
			t.Errorf("the redelivery's RESULT differs from the stored one:\nfirst %v\nagain %v", first, again)
		}
	})
	t.Run("long work heartbeats", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, handler)
		lease := 3 * time.Second
		// The work takes longer than two heartbeat intervals.
		h.Config.Middleware = append(h.Config.Middleware, delay(3*worker.HeartbeatInterval(lease)))
		h.Start(exec)
		d := h.Directive(input)
		d.LeaseTimeout = durationpb.New(lease)
		h.Publish(d)
		h.Orchestrator.WaitResult(t, d)
		if n := len(h.Orchestrator.Heartbeats(d)); n < 1 {
			t.Errorf("no heartbeat during %v of work with a %v lease", 3*worker.HeartbeatInterval(lease), lease)
		}
	})
	t.Run("shutdown drains the attempt in flight", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, handler)
		h.Config.ShutdownGrace = eventually
		started := make(chan struct{})
		var once sync.Once
		h.Config.Middleware = append(h.Config.Middleware, func(next worker.Executor) worker.Executor {
			return worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
				once.Do(func() { close(started) })
				time.Sleep(500 * time.Millisecond) // still running when the shutdown comes
				return next.Execute(ctx, task)
			})
		})
		h.Start(exec)
		d := h.Directive(input)
		h.Publish(d)
		select {
		case <-started:
		case <-time.After(eventually):
			t.Fatal("the handler never started")
		}
		h.Stop() // what SIGTERM does to worker.Run
		switch res := h.Orchestrator.Results(d); len(res) {
		case 1: // the attempt finished within the grace
		case 0:
			// The handler stopped at the shutdown notice (ErrShuttingDown):
			// the attempt was released, and the next worker runs it.
			h.Start(exec)
			h.Orchestrator.WaitResult(t, d)
		default:
			t.Fatalf("%d RESULTs for one attempt", len(res))
		}
	})
	t.Run("checkpoint resumes after a restart", func(t *testing.T) {
		t.Parallel()
		h := NewHarness(t, handler)
		h.Config.ShutdownGrace = eventually
		h.Start(exec)
		d := h.Directive(input)
		h.Publish(d)
		if !h.Orchestrator.waitFor(func() bool { return len(h.Orchestrator.Checkpoints(d)) > 0 || len(h.Orchestrator.Results(d)) > 0 }) {
			t.Fatal("neither a checkpoint nor a RESULT came")
		}
		if len(h.Orchestrator.Checkpoints(d)) == 0 {
			t.Skip("the handler saves no checkpoint")
		}
		h.Stop()
		if len(h.Orchestrator.Results(d)) > 0 {
			t.Skip("the handler finished before the shutdown took effect")
		}
		saved := h.Orchestrator.Checkpoints(d)[0].GetCheckpointName()
		var resumed atomic.Bool
		h.Config.Middleware = append(h.Config.Middleware, func(next worker.Executor) worker.Executor {
			return worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
				if _, ok, err := task.Checkpoint(ctx, saved); err == nil && ok {
					resumed.Store(true)
				}
				return next.Execute(ctx, task)
			})
		})
		h.Start(exec) // the released message is delivered again
		res := h.Orchestrator.WaitResult(t, d)
		if !resumed.Load() {
			t.Errorf("the next delivery did not see checkpoint %q", saved)
		}
		if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED {
			t.Errorf("resumed attempt ended %v (%s), want SUCCEEDED", res.GetStatus(), res.GetReason())
		}
	})
}

// checkResultShape checks what every RESULT must carry.
func checkResultShape(t *testing.T, d *luciusv1.Directive, res *luciusv1.ResultRequest) {
	t.Helper()
	if res.GetJobId() != d.GetJobId() || res.GetStepId() != d.GetStepId() || res.GetAttemptNo() != d.GetAttemptNo() || res.GetLeaseId() != d.GetLeaseId() {
		t.Errorf("RESULT for %s/%s/%d/%s, want the directive's %s/%s/%d/%s", res.GetJobId(), res.GetStepId(), res.GetAttemptNo(), res.GetLeaseId(),
			d.GetJobId(), d.GetStepId(), d.GetAttemptNo(), d.GetLeaseId())
	}
	switch res.GetStatus() {
	case luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED:
		for _, a := range res.GetArtifacts() {
			if a.GetUri() == "" || len(a.GetSha256()) != 64 {
				t.Errorf("artifact %q has URI %q and SHA-256 %q", a.GetName(), a.GetUri(), a.GetSha256())
			}
		}
	case luciusv1.ResultStatus_RESULT_STATUS_FAILED:
		if res.GetFailureClass() == luciusv1.FailureClass_FAILURE_CLASS_UNSPECIFIED || res.GetReason() == "" {
			t.Errorf("FAILED RESULT without a failure class and reason: %v %q", res.GetFailureClass(), res.GetReason())
		}
	case luciusv1.ResultStatus_RESULT_STATUS_POLLING:
	default:
		t.Errorf("RESULT status %v", res.GetStatus())
	}
	if res.GetStartTime() == nil || res.GetFinishTime() == nil || res.GetFinishTime().AsTime().Before(res.GetStartTime().AsTime()) {
		t.Errorf("RESULT times: start %v, finish %v", res.GetStartTime(), res.GetFinishTime())
	}
}

// delay is a Middleware that makes the work take at least d.
func delay(d time.Duration) worker.Middleware {
	return func(next worker.Executor) worker.Executor {
		return worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			return next.Execute(ctx, task)
		})
	}
}

// Harness is one worker's world for a test: an in-memory bus, a local
// idempotency store, an in-process Orchestrator (CallbackService) and a
// workspace folder, and the Runner configuration a test may change before
// Start.
type Harness struct {
	t            *testing.T
	Handler      string
	Config       worker.Config
	Bus          *membus.Bus
	Store        worker.Store
	Orchestrator *Orchestrator
	Workspace    string

	stop func()
}

// NewHarness builds a harness for the service serving handler (named after
// it, lowercased). Everything is closed when the test ends.
func NewHarness(t *testing.T, handler string) *Harness {
	t.Helper()
	b, err := membus.New(membus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) }) //nolint:errcheck
	dir := t.TempDir()
	store, err := worker.OpenLocalStore(filepath.Join(dir, "store", "worker.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() }) //nolint:errcheck
	service := strings.ToLower(strings.ReplaceAll(handler, "_", "-"))
	return &Harness{t: t, Handler: handler, Bus: b, Store: store, Orchestrator: newOrchestrator(t), Workspace: dir,
		Config: worker.Config{Service: service, WorkerID: service + "-test", Concurrency: 2, FileRoots: []string{dir},
			LockDuration: 5 * time.Second, CallTimeout: 2 * time.Second,
			Backoff: worker.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}}}
}

// Start runs a Runner with exec until Stop or the test's end, returning
// once it receives; the counter counts exec's runs.
func (h *Harness) Start(exec worker.Executor) *atomic.Int64 {
	h.t.Helper()
	runs := &atomic.Int64{}
	cfg := h.Config
	cfg.Middleware = append(append([]worker.Middleware(nil), cfg.Middleware...), func(next worker.Executor) worker.Executor {
		return worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
			runs.Add(1)
			return next.Execute(ctx, task)
		})
	})
	r, err := worker.NewRunner(h.Bus, h.Store, exec, cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					h.t.Errorf("runner: %v", err)
				}
			case <-time.After(eventually + h.Config.ShutdownGrace):
				h.t.Errorf("runner did not stop")
			}
		})
	}
	h.t.Cleanup(h.stop)
	deadline := time.Now().Add(eventually)
	for r.Ready(ctx) != nil {
		select {
		case err := <-done:
			h.t.Fatalf("runner ended early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatal("runner not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return runs
}

// Stop stops the runner as a shutdown signal does and waits for it.
func (h *Harness) Stop() { h.stop() }

// Directive returns a first attempt of a one-step job running the harness's
// handler on input (written under the workspace).
func (h *Harness) Directive(input []byte) *luciusv1.Directive {
	h.t.Helper()
	id := make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		h.t.Fatal(err)
	}
	jobID := hex.EncodeToString(id)
	in := filepath.Join(h.Workspace, "inputs", jobID)
	if err := os.MkdirAll(filepath.Dir(in), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(in, input, 0o644); err != nil {
		h.t.Fatal(err)
	}
	payload, _ := structpb.NewStruct(nil)
	return &luciusv1.Directive{
		JobId: jobID, TenantId: "acme", StepId: strings.ToLower(h.Handler), StepType: h.Handler, Service: h.Config.Service,
		AttemptNo: 1, LeaseId: uuid.NewString(), InputRef: "file://" + in, JobInputRef: "file://" + in,
		WorkspaceRef: "file://" + h.Workspace + "/lucius/acme/" + jobID + "/",
		Payload:      payload, AckTimeout: durationpb.New(30 * time.Second),
		CallbackUrls: &luciusv1.CallbackEndpoints{GrpcTarget: h.Orchestrator.Addr},
	}
}

// Publish sends d as the orchestrator's outbox does, to the subscription
// of the harness's service on the default lane.
func (h *Harness) Publish(d *luciusv1.Directive) {
	h.t.Helper()
	body, err := protojson.Marshal(d)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx := context.Background()
	topic := routing.Topic(routing.TopologyTwoTopicSets, routing.ModeDefault, routing.Partition(d.GetTenantId()))
	s, err := h.Bus.NewSender(ctx, topic)
	if err != nil {
		h.t.Fatal(err)
	}
	defer s.Close(ctx) //nolint:errcheck
	msg := bus.Message{ID: fmt.Sprintf("directive/%s/%s/%d/%d", d.GetJobId(), d.GetStepId(), d.GetAttemptNo(), time.Now().UnixNano()),
		Body: body, ContentType: "application/json", Key: d.GetTenantId(),
		Properties: map[string]string{topology.PropertyMessageType: "directive", topology.PropertyService: h.Config.Service,
			topology.PropertyLane: "default", "job_id": d.GetJobId(), "step_id": d.GetStepId()}}
	if err := s.Send(ctx, msg); err != nil {
		h.t.Fatal(err)
	}
}

// Orchestrator is an in-process CallbackService over real gRPC: it records
// every call and answers as the orchestrator does for a live attempt
// (APPLIED; DUPLICATE for a RESULT it already has).
type Orchestrator struct {
	luciusv1.UnimplementedCallbackServiceServer
	// Addr is its gRPC address, the directives' callback target.
	Addr string

	mu          sync.Mutex
	changed     chan struct{}
	acks        []TimedAck
	results     []*luciusv1.ResultRequest
	heartbeats  []*luciusv1.HeartbeatRequest
	checkpoints []*luciusv1.RecordCheckpointRequest
}

// TimedAck is an ACK the fake orchestrator received, with when it arrived.
type TimedAck struct {
	*luciusv1.AckRequest
	At time.Time
}

func newOrchestrator(t *testing.T) *Orchestrator {
	t.Helper()
	o := &Orchestrator{changed: make(chan struct{})}
	srv := grpc.NewServer()
	luciusv1.RegisterCallbackServiceServer(srv, o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.Addr = ln.Addr().String()
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return o
}

// record runs add under the lock and wakes the waiters.
func (o *Orchestrator) record(add func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	add()
	close(o.changed)
	o.changed = make(chan struct{})
}

// Ack records an ACK and applies it.
func (o *Orchestrator) Ack(_ context.Context, req *luciusv1.AckRequest) (*luciusv1.AckResponse, error) {
	o.record(func() { o.acks = append(o.acks, TimedAck{req, time.Now()}) })
	return &luciusv1.AckResponse{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED, StepStatus: luciusv1.StepStatus_STEP_STATUS_IN_PROGRESS}, nil
}

// Result records a RESULT and answers with the outcome the test set.
func (o *Orchestrator) Result(_ context.Context, req *luciusv1.ResultRequest) (*luciusv1.ResultResponse, error) {
	outcome := luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED
	o.record(func() {
		for _, r := range o.results {
			if sameAttempt(r, req) {
				outcome = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_DUPLICATE
			}
		}
		o.results = append(o.results, req)
	})
	return &luciusv1.ResultResponse{Outcome: outcome}, nil
}

// Heartbeat records a heartbeat and extends the lease.
func (o *Orchestrator) Heartbeat(_ context.Context, req *luciusv1.HeartbeatRequest) (*luciusv1.HeartbeatResponse, error) {
	o.record(func() { o.heartbeats = append(o.heartbeats, req) })
	return &luciusv1.HeartbeatResponse{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED,
		StepStatus: luciusv1.StepStatus_STEP_STATUS_IN_PROGRESS, LeaseExpireTime: timestamppb.New(time.Now().Add(time.Minute))}, nil
}

// RecordCheckpoint records a checkpoint.
func (o *Orchestrator) RecordCheckpoint(_ context.Context, req *luciusv1.RecordCheckpointRequest) (*luciusv1.RecordCheckpointResponse, error) {
	o.record(func() { o.checkpoints = append(o.checkpoints, req) })
	return &luciusv1.RecordCheckpointResponse{Outcome: luciusv1.CallbackOutcome_CALLBACK_OUTCOME_APPLIED,
		StepStatus: luciusv1.StepStatus_STEP_STATUS_IN_PROGRESS}, nil
}

// attempt is what identifies an attempt in every callback.
type attempt interface {
	GetJobId() string
	GetStepId() string
	GetAttemptNo() int32
}

func sameAttempt(a, b attempt) bool {
	return a.GetJobId() == b.GetJobId() && a.GetStepId() == b.GetStepId() && a.GetAttemptNo() == b.GetAttemptNo()
}

// of returns the calls of d's attempt.
func of[T attempt](o *Orchestrator, calls *[]T, d *luciusv1.Directive) []T {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []T
	for _, c := range *calls {
		if sameAttempt(c, d) {
			out = append(out, c)
		}
	}
	return out
}

// Acks returns the ACKs of d's attempt, with when each arrived.
func (o *Orchestrator) Acks(d *luciusv1.Directive) []TimedAck { return of(o, &o.acks, d) }

// Results returns the RESULTs of d's attempt.
func (o *Orchestrator) Results(d *luciusv1.Directive) []*luciusv1.ResultRequest {
	return of(o, &o.results, d)
}

// Heartbeats returns the heartbeats of d's attempt.
func (o *Orchestrator) Heartbeats(d *luciusv1.Directive) []*luciusv1.HeartbeatRequest {
	return of(o, &o.heartbeats, d)
}

// Checkpoints returns the checkpoints d's attempt recorded.
func (o *Orchestrator) Checkpoints(d *luciusv1.Directive) []*luciusv1.RecordCheckpointRequest {
	return of(o, &o.checkpoints, d)
}

// WaitResult waits for the first RESULT of d's attempt.
func (o *Orchestrator) WaitResult(t *testing.T, d *luciusv1.Directive) *luciusv1.ResultRequest {
	t.Helper()
	return o.WaitResults(t, d, 1)[0]
}

// WaitResults waits until d's attempt has n RESULTs.
func (o *Orchestrator) WaitResults(t *testing.T, d *luciusv1.Directive, n int) []*luciusv1.ResultRequest {
	t.Helper()
	if !o.waitFor(func() bool { return len(o.Results(d)) >= n }) {
		t.Fatalf("timed out waiting for %d RESULT(s) of %s/%s (have %d)", n, d.GetJobId(), d.GetStepId(), len(o.Results(d)))
	}
	return o.Results(d)
}

// waitFor waits until cond holds (reporting true) or the kit's deadline.
func (o *Orchestrator) waitFor(cond func() bool) bool {
	deadline := time.After(eventually)
	for {
		o.mu.Lock()
		changed := o.changed
		o.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-changed:
		case <-deadline:
			return cond()
		}
	}
}
