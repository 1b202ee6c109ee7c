package worker_test

// The contract test of the worker skeleton. Each test publishes directives to
// a real directive topic of the PostgreSQL bus, runs a Runner against it and
// answers its callbacks with an in-process fake CallbackService over real
// gRPC, then checks the calls, the files and the bus. A fork runs these tests
// unchanged (they use a small executor of their own), and adds its own
// executor's table tests next to them.

import (
	"context"
	"errors"
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
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/workertest/faults"
)

func TestRunnerAcksExecutesAndReportsResult(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var runs counter
	e.start(upperExecutor(&runs))
	d := e.directive(e.writeInput("in.txt", []byte("hello lucius\n")))
	e.publish(d, msgID(d, ""), nil)

	e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
	e.stop()
	e.assertSettled()

	acks, results := e.orch.calls()
	if len(acks) != 1 || len(results) != 1 {
		t.Fatalf("calls: %d ACK, %d RESULT; want exactly 1 each", len(acks), len(results))
	}
	ack := acks[0]
	if ack.GetJobId() != d.GetJobId() || ack.GetStepId() != "ocr" || ack.GetAttemptNo() != 1 || ack.GetLeaseId() != d.GetLeaseId() ||
		ack.GetWorkerId() != "worker-test-1" || ack.GetAckTime() == nil {
		t.Errorf("ACK = %v", ack)
	}
	res := results[0]
	if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || res.GetLeaseId() != d.GetLeaseId() ||
		res.GetStartTime() == nil || res.GetFinishTime() == nil || res.GetWorkerId() != "worker-test-1" {
		t.Errorf("RESULT = %v", res)
	}
	if got := res.GetOutput().GetFields()["bytes"].GetNumberValue(); got != 13 {
		t.Errorf("output.bytes = %v, want 13", got)
	}
	if len(res.GetArtifacts()) != 1 {
		t.Fatalf("artifacts = %v, want 1", res.GetArtifacts())
	}
	art := res.GetArtifacts()[0]
	wantPath := filepath.Join(e.workspace, "lucius", "acme", d.GetJobId(), "ocr", "1", "output.txt")
	if art.GetUri() != "file://"+wantPath || art.GetName() != "text" || art.GetMediaType() != "text/plain; charset=utf-8" {
		t.Errorf("artifact = %v, want file://%s", art, wantPath)
	}
	content, err := os.ReadFile(wantPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(content) != "HELLO LUCIUS\n" || art.GetSizeBytes() != int64(len(content)) || art.GetSha256() != sha256Hex(content) {
		t.Errorf("file %q (size %d, sha %s) does not match artifact %v", content, len(content), sha256Hex(content), art)
	}
	if runs.get() != 1 {
		t.Errorf("executor ran %d times, want 1", runs.get())
	}
	if n := e.executions(d.GetJobId()); n != 1 {
		t.Errorf("worker_executions rows = %d, want 1", n)
	}
}

func TestRunnerDuplicateDirectiveResendsStoredResultWithoutRerunning(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var runs counter
	e.start(upperExecutor(&runs))
	d := e.directive(e.writeInput("in.txt", []byte("once\n")))
	e.publish(d, msgID(d, ""), nil)
	e.waitFor("first RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })

	// The same attempt again, as a re-dispatch or an outbox re-send after the
	// duplicate-detection window would deliver it.
	e.publish(d, msgID(d, "-again"), nil)
	e.waitFor("second RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 2 })
	e.stop()
	e.assertSettled()

	acks, results := e.orch.calls()
	if runs.get() != 1 {
		t.Errorf("executor ran %d times, want 1", runs.get())
	}
	if len(acks) != 1 {
		t.Errorf("ACKs = %d, want 1 (a finished attempt is not acknowledged again)", len(acks))
	}
	if !proto.Equal(results[0], results[1]) {
		t.Errorf("re-sent RESULT differs from the stored one:\n first %v\nsecond %v", results[0], results[1])
	}
	if n := e.executions(d.GetJobId()); n != 1 {
		t.Errorf("worker_executions rows = %d, want 1", n)
	}
}

func TestRunnerStopsWhenAckSaysAnotherAttemptOwnsTheStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		outcome luciusv1.CallbackOutcome
		err     error
	}{
		{"stale attempt", luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT, nil},
		{"lease mismatch", luciusv1.CallbackOutcome_CALLBACK_OUTCOME_LEASE_MISMATCH, nil},
		{"after terminal", luciusv1.CallbackOutcome_CALLBACK_OUTCOME_AFTER_TERMINAL, nil},
		{"job not found", 0, status.Error(codes.NotFound, "no such job")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.orch.script(func(f *fakeOrchestrator) { f.ackOutcome, f.ackErr = tc.outcome, tc.err })
			var runs counter
			e.start(upperExecutor(&runs))
			d := e.directive(e.writeInput("in.txt", []byte("late\n")))
			e.publish(d, msgID(d, ""), nil)
			e.waitFor("ACK", func() bool { acks, _ := e.orch.calls(); return len(acks) == 1 })
			e.assertSettled() // completed, not merely locked
			e.stop()

			_, results := e.orch.calls()
			if runs.get() != 0 || len(results) != 0 {
				t.Errorf("executor ran %d times and sent %d RESULTs; want none", runs.get(), len(results))
			}
			if n := e.executions(d.GetJobId()); n != 0 {
				t.Errorf("worker_executions rows = %d, want 0 (nothing was executed)", n)
			}
			if _, err := os.Stat(filepath.Join(e.workspace, "lucius", "acme", d.GetJobId())); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("workspace written for an attempt that must not run: %v", err)
			}
		})
	}
}

func TestRunnerRetriesUnavailableResultUntilAccepted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.orch.script(func(f *fakeOrchestrator) { f.resultErrs = []error{unavailable(), unavailable()} })
	var runs counter
	e.start(upperExecutor(&runs))
	d := e.directive(e.writeInput("in.txt", []byte("retry me\n")))
	e.publish(d, msgID(d, ""), nil)
	e.waitFor("third RESULT call", func() bool { _, res := e.orch.calls(); return len(res) == 3 })
	e.stop()
	e.assertSettled()

	acks, results := e.orch.calls()
	if len(acks) != 1 || runs.get() != 1 {
		t.Errorf("ACKs = %d, runs = %d; want 1 each", len(acks), runs.get())
	}
	for i, r := range results[1:] {
		if !proto.Equal(results[0], r) {
			t.Errorf("retry %d sent a different RESULT: %v", i+1, r)
		}
	}
	if results[2].GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED {
		t.Errorf("status = %v", results[2].GetStatus())
	}
}

func TestRunnerReportsFailureClassOfExecutorErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		exec       worker.HandlerFunc
		timeout    time.Duration
		wantClass  luciusv1.FailureClass
		wantReason string
	}{
		{
			name: "permanent",
			exec: func(context.Context, *worker.Task) (worker.Result, error) {
				return worker.Result{}, fmt.Errorf("parse page 3: %w", worker.PermanentCode(worker.CodeInvalidInput, errors.New("not a PDF")))
			},
			wantClass: luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE, wantReason: "INVALID_INPUT: parse page 3: not a PDF",
		},
		{
			name: "retryable",
			exec: func(context.Context, *worker.Task) (worker.Result, error) {
				return worker.Result{}, worker.Retryable(errors.New("model server busy"))
			},
			wantClass: luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE, wantReason: "TRANSIENT: model server busy",
		},
		{
			name: "unclassified defaults to retryable",
			exec: func(context.Context, *worker.Task) (worker.Result, error) {
				return worker.Result{}, errors.New("connection reset")
			},
			wantClass: luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE, wantReason: "UNCLASSIFIED: connection reset",
		},
		{
			name: "panic is permanent",
			exec: func(context.Context, *worker.Task) (worker.Result, error) {
				var m map[string]int
				m["boom"]++ //nolint:staticcheck // the panic is what this case tests
				return worker.Result{}, nil
			},
			wantClass: luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE, wantReason: "PANIC: executor panicked",
		},
		{
			name: "timeout is retryable",
			exec: func(ctx context.Context, _ *worker.Task) (worker.Result, error) {
				<-ctx.Done()
				return worker.Result{}, ctx.Err()
			},
			timeout:   200 * time.Millisecond,
			wantClass: luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE, wantReason: "TIMEOUT: task ran longer than 200ms",
		},
		{
			name: "missing input is permanent",
			exec: func(ctx context.Context, t *worker.Task) (worker.Result, error) {
				_, err := t.ReadRef(ctx, "file://"+filepath.Join(t.StepDir(), "missing.txt"))
				return worker.Result{}, err
			},
			wantClass: luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE, wantReason: "INPUT_NOT_FOUND: read file:///",
		},
		{
			name: "input outside the file roots is permanent",
			exec: func(ctx context.Context, t *worker.Task) (worker.Result, error) {
				_, err := t.ReadRef(ctx, "file:///etc/passwd")
				return worker.Result{}, err
			},
			wantClass: luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE, wantReason: "REF_OUTSIDE_FILE_ROOTS: ref \"file:///etc/passwd\"",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.cfg.TaskTimeout = tc.timeout
			e.start(tc.exec)
			d := e.directive(e.writeInput("in.txt", []byte("x")))
			d.FinalStep = true
			e.publish(d, msgID(d, ""), nil)
			e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
			e.stop()
			e.assertSettled()

			_, results := e.orch.calls()
			res := results[0]
			if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_FAILED || res.GetFailureClass() != tc.wantClass {
				t.Errorf("RESULT status %v class %v, want FAILED %v", res.GetStatus(), res.GetFailureClass(), tc.wantClass)
			}
			if !strings.HasPrefix(res.GetReason(), tc.wantReason) {
				t.Errorf("reason = %q, want prefix %q", res.GetReason(), tc.wantReason)
			}
			if len(res.GetArtifacts()) != 0 {
				t.Errorf("a failed RESULT lists artifacts: %v", res.GetArtifacts())
			}
			if _, err := os.Stat(strings.TrimPrefix(d.GetOutputRef(), "file://")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("output_ref written for a failed attempt: %v", err)
			}
		})
	}
}

func TestRunnerWritesFinalArtifactToOutputRef(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		outputRef func(e *env, jobID string) string
		wantPath  func(e *env, jobID string) string
	}{
		{
			name:      "file",
			outputRef: func(e *env, jobID string) string { return "file://" + e.workspace + "/out/" + jobID + ".txt" },
			wantPath:  func(e *env, jobID string) string { return filepath.Join(e.workspace, "out", jobID+".txt") },
		},
		{
			name:      "directory",
			outputRef: func(e *env, jobID string) string { return e.workspace + "/results/" + jobID + "/" },
			wantPath:  func(e *env, jobID string) string { return filepath.Join(e.workspace, "results", jobID, "output.txt") },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			var runs counter
			e.start(upperExecutor(&runs))
			d := e.directive(e.writeInput("in.txt", []byte("final words\n")))
			d.FinalStep, d.OutputRef = true, tc.outputRef(e, d.GetJobId())
			e.publish(d, msgID(d, ""), nil)
			e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
			e.stop()

			_, results := e.orch.calls()
			arts := results[0].GetArtifacts()
			if len(arts) != 2 || arts[0].GetName() != "text" || arts[1].GetName() != "output" {
				t.Fatalf("artifacts = %v, want text then output", arts)
			}
			want := tc.wantPath(e, d.GetJobId())
			got, err := os.ReadFile(want)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "FINAL WORDS\n" || arts[1].GetUri() != "file://"+want || arts[1].GetSha256() != arts[0].GetSha256() {
				t.Errorf("output %q at %s, artifact %v", got, want, arts[1])
			}
		})
	}
}

func TestRunnerDeadLettersInvalidDirectives(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var runs counter
	e.start(upperExecutor(&runs))
	d := e.directive(e.writeInput("in.txt", []byte("x")))
	e.publishRaw([]byte(`{"jobId": 42`), "garbage-1", d, nil)
	src := e.source().DeadLetterQueue()
	m := e.receiveOne(src)
	if m.DeadLetterReason != worker.DeadLetterInvalidDirective || !strings.Contains(m.DeadLetterDescription, "not a lucius.v1.Directive") {
		t.Errorf("dead letter reason %q, description %q", m.DeadLetterReason, m.DeadLetterDescription)
	}
	bad := e.directive(e.writeInput("in.txt", []byte("x")))
	bad.LeaseId = "not-a-uuid"
	e.publish(bad, "bad-lease", nil)
	m = e.receiveOne(src)
	if m.DeadLetterReason != worker.DeadLetterInvalidDirective || !strings.Contains(m.DeadLetterDescription, "lease_id") {
		t.Errorf("dead letter reason %q, description %q", m.DeadLetterReason, m.DeadLetterDescription)
	}
	if acks, _ := e.orch.calls(); len(acks) != 0 || runs.get() != 0 {
		t.Errorf("invalid directives were acknowledged (%d) or executed (%d)", len(acks), runs.get())
	}
}

func TestRunnerDeadLettersRejectedResult(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.orch.script(func(f *fakeOrchestrator) {
		f.resultErr = status.Error(codes.InvalidArgument, "artifact uri is not a URI")
	})
	var runs counter
	e.start(upperExecutor(&runs))
	d := e.directive(e.writeInput("in.txt", []byte("x")))
	e.publish(d, msgID(d, ""), nil)
	m := e.receiveOne(e.source().DeadLetterQueue())
	if m.DeadLetterReason != worker.DeadLetterCallbackRejected || !strings.Contains(m.DeadLetterDescription, "artifact uri") {
		t.Errorf("dead letter reason %q, description %q", m.DeadLetterReason, m.DeadLetterDescription)
	}
	if _, results := e.orch.calls(); len(results) != 1 {
		t.Errorf("RESULT calls = %d, want 1 (a rejection is not retried)", len(results))
	}
}

func TestRunnerNoOpSucceedsWithoutExecuting(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.cfg.NoOp = true
	e.cfg.ExecutionDelay = 300 * time.Millisecond
	e.start(nil)
	d := e.directive("file:///does/not/matter.txt")
	d.FinalStep = true
	e.publish(d, msgID(d, ""), nil)
	e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
	e.stop()
	e.assertSettled()
	acks, results := e.orch.calls()
	res := results[0]
	if len(acks) != 1 || res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || len(res.GetArtifacts()) != 0 ||
		!res.GetOutput().GetFields()["noop"].GetBoolValue() {
		t.Errorf("ACKs %d, RESULT %v", len(acks), res)
	}
	if took := res.GetFinishTime().AsTime().Sub(res.GetStartTime().AsTime()); took < 300*time.Millisecond {
		t.Errorf("attempt took %v, want at least the 300ms execution delay", took)
	}
	if n := e.executions(d.GetJobId()); n != 1 {
		t.Errorf("worker_executions rows = %d, want 1", n)
	}
}

func TestRunnerBoundsConcurrency(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.cfg.Concurrency = 2
	var running, peak atomic.Int32
	e.start(worker.HandlerFunc(func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(150 * time.Millisecond)
		_, err := t.WriteArtifact(ctx, "text", "output.txt", "text/plain", []byte("ok"))
		return worker.Result{}, err
	}))
	const jobs = 8
	for range jobs {
		d := e.directive("file:///unused")
		e.publish(d, msgID(d, ""), nil)
	}
	e.waitFor("all RESULTs", func() bool { _, res := e.orch.calls(); return len(res) == jobs })
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrency = %d, want 2", p)
	}
}

func TestRunnerShutdownInterruptsAndReleasesInFlightWork(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.cfg.ShutdownGrace = 100 * time.Millisecond
	started := make(chan struct{})
	e.start(worker.HandlerFunc(func(ctx context.Context, _ *worker.Task) (worker.Result, error) {
		close(started)
		<-ctx.Done()
		return worker.Result{}, ctx.Err()
	}))
	d := e.directive("file:///unused")
	e.publishUntilStarted(d, started)
	e.stop()

	if _, results := e.orch.calls(); len(results) != 0 {
		t.Fatalf("an interrupted attempt sent RESULT: %v", results)
	}
	// Abandoned, not completed: it is delivered again at once, and its claim
	// is free for the next worker.
	m := e.receiveOne(e.source())
	if m.DeliveryCount != 2 {
		t.Errorf("delivery count = %d, want 2", m.DeliveryCount)
	}
	claim, err := e.store.Claim(context.Background(), worker.Claim{Key: worker.KeyOf(d), Service: "ocr", WorkerID: "worker-test-2",
		Until: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if claim.State != worker.ClaimAcquired || !claim.TookOver {
		t.Errorf("claim after shutdown = %+v, want acquired by takeover", claim)
	}
}

func TestRunnerExecutesWhenAckStaysUnanswered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// Long enough for several retries even on a loaded machine (backoff
	// starts at about 10 ms and doubles).
	e.cfg.AckRetryTimeout = 2 * time.Second
	e.orch.script(func(f *fakeOrchestrator) { f.ackErr = unavailable() })
	var runs counter
	e.start(upperExecutor(&runs))
	d := e.directive(e.writeInput("in.txt", []byte("x")))
	e.publish(d, msgID(d, ""), nil)
	e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
	acks, _ := e.orch.calls()
	if len(acks) < 2 || runs.get() != 1 {
		t.Errorf("ACK calls = %d (want retries), runs = %d (want 1)", len(acks), runs.get())
	}
}

func TestRunnerFailsOverBetweenCallbackAddresses(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// The first orchestrator address is down: nothing listens there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	e.target = "ipv4:" + down + "," + e.orch.addr
	var runs counter
	e.start(upperExecutor(&runs))
	for i := range 3 {
		d := e.directive(e.writeInput("in.txt", []byte("x")))
		e.publish(d, msgID(d, ""), nil)
		e.waitFor(fmt.Sprintf("RESULT %d", i+1), func() bool { _, res := e.orch.calls(); return len(res) == i+1 })
	}
	if acks, _ := e.orch.calls(); len(acks) != 3 {
		t.Errorf("ACKs = %d, want 3", len(acks))
	}
}

func TestRunnerSpreadsCallbacksOverAddresses(t *testing.T) {
	t.Parallel()
	e := setup(t)
	second := newFakeOrchestrator(t, e.issuer)
	e.target = "ipv4:" + e.orch.addr + "," + second.addr
	var runs counter
	e.start(upperExecutor(&runs))
	// Round robin over ready connections: within a few directives both serve.
	total := func(f *fakeOrchestrator) int { acks, results := f.calls(); return len(acks) + len(results) }
	for i := 0; i < 30; i++ {
		d := e.directive(e.writeInput("in.txt", []byte("x")))
		e.publish(d, msgID(d, ""), nil)
		e.waitFor("RESULT", func() bool {
			_, a := e.orch.calls()
			_, b := second.calls()
			return len(a)+len(b) == i+1
		})
		if total(e.orch) > 0 && total(second) > 0 {
			return
		}
	}
	t.Errorf("every callback went to one address (%d and %d calls)", total(e.orch), total(second))
}

func TestRunnerContinuesTheDispatchTrace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	spans := tracetest.NewSpanRecorder()
	e.cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	e.cfg.Propagator = propagation.TraceContext{}
	var seen atomic.Value
	e.start(worker.HandlerFunc(func(ctx context.Context, _ *worker.Task) (worker.Result, error) {
		seen.Store(trace.SpanContextFromContext(ctx))
		return worker.Result{}, nil
	}))
	d := e.directive("file:///unused")
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	e.publish(d, msgID(d, ""), map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"})
	e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })

	sc, _ := seen.Load().(trace.SpanContext)
	if sc.TraceID().String() != traceID {
		t.Errorf("executor trace id = %s, want %s", sc.TraceID(), traceID)
	}
	e.stop()
	var found bool
	for _, s := range spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer && s.Name() == "ocr process" {
			found = true
			if s.Parent().SpanID().String() != parentID || s.SpanContext().TraceID().String() != traceID {
				t.Errorf("consumer span parent %s trace %s", s.Parent().SpanID(), s.SpanContext().TraceID())
			}
		}
	}
	if !found {
		t.Error("no consumer span recorded")
	}
}

func TestNewRunnerRejectsIncompleteSetup(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if _, err := worker.NewRunner(e.bus, e.store, nil, e.cfg); err == nil {
		t.Error("NewRunner accepted a nil executor without NoOp")
	}
	if _, err := worker.NewRunner(nil, e.store, worker.HandlerFunc(nil), e.cfg); err == nil {
		t.Error("NewRunner accepted a nil bus")
	}
	bad := e.cfg
	bad.Service = ""
	if _, err := worker.NewRunner(e.bus, e.store, worker.HandlerFunc(nil), bad); err == nil {
		t.Error("NewRunner accepted an invalid config")
	}
}

// slowExecutor works for about d in steps of 250ms, reporting its progress
// with SetProgress after each step, then writes its artifact. It honours ctx.
func slowExecutor(runs *counter, d time.Duration) worker.HandlerFunc {
	return func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		runs.inc()
		const step = 250 * time.Millisecond
		steps := int(d / step)
		for i := range steps {
			select {
			case <-ctx.Done():
				return worker.Result{}, ctx.Err()
			case <-time.After(step):
			}
			if err := t.SetProgress(map[string]any{"percent": float64(100 * (i + 1) / steps), "stage": "scanning"}); err != nil {
				return worker.Result{}, err
			}
		}
		_, err := t.WriteArtifact(ctx, "text", "output.txt", "text/plain", []byte("done"))
		return worker.Result{Output: map[string]any{"steps": steps}}, err
	}
}

func TestRunnerHeartbeatsWhileExecuting(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var runs counter
	e.start(slowExecutor(&runs, 4*time.Second))
	d := e.directive("file:///unused")
	d.LeaseTimeout = durationpb.New(3 * time.Second) // a heartbeat every second
	e.publish(d, msgID(d, ""), nil)
	e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
	// Heartbeats stop with the execution: none arrives after the RESULT.
	time.Sleep(1500 * time.Millisecond)
	e.stop()
	e.assertSettled()

	_, results := e.orch.calls()
	if len(results) != 1 || results[0].GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED {
		t.Fatalf("RESULTs = %v, want one SUCCEEDED", results)
	}
	beats := e.orch.heartbeatCalls()
	if len(beats) < 2 || len(beats) > 5 {
		t.Fatalf("heartbeats = %d during a 4s execution with a 3s lease, want 2-5 (one a second)", len(beats))
	}
	withProgress := 0
	for i, b := range beats {
		req := b.req
		if req.GetJobId() != d.GetJobId() || req.GetStepId() != d.GetStepId() || req.GetAttemptNo() != 1 ||
			req.GetLeaseId() != d.GetLeaseId() || req.GetWorkerId() != "worker-test-1" {
			t.Errorf("heartbeat %d = %v, want the attempt's key and worker id", i+1, req)
		}
		if b.resultsBefore != 0 {
			t.Errorf("heartbeat %d arrived after the RESULT", i+1)
		}
		if p := req.GetProgress().GetFields(); p != nil {
			withProgress++
			if p["stage"].GetStringValue() != "scanning" || p["percent"].GetNumberValue() <= 0 {
				t.Errorf("heartbeat %d progress = %v, want the executor's SetProgress data", i+1, req.GetProgress())
			}
		}
	}
	if withProgress == 0 {
		t.Error("no heartbeat carried the executor's progress")
	}
	// Later heartbeats carry later progress.
	first, last := beats[0].req.GetProgress().GetFields()["percent"].GetNumberValue(),
		beats[len(beats)-1].req.GetProgress().GetFields()["percent"].GetNumberValue()
	if last <= first {
		t.Errorf("progress went from %v%% to %v%%, want it to advance", first, last)
	}
	if runs.get() != 1 || e.finishedExecutions(d.GetJobId()) != 1 || len(e.effects(d.GetJobId())) != 1 {
		t.Errorf("runs %d, finished executions %d, effects %d; want 1 each", runs.get(), e.finishedExecutions(d.GetJobId()),
			len(e.effects(d.GetJobId())))
	}
}

func TestRunnerSendsNoHeartbeatWithoutLeaseTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var runs counter
	e.start(slowExecutor(&runs, 1500*time.Millisecond))
	d := e.directive("file:///unused") // no lease_timeout: an older orchestrator
	e.publish(d, msgID(d, ""), nil)
	e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
	if n := len(e.orch.heartbeatCalls()); n != 0 {
		t.Errorf("heartbeats = %d, want none when the directive sets no lease_timeout", n)
	}
	if _, results := e.orch.calls(); results[0].GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED {
		t.Errorf("RESULT = %v", results[0])
	}
}

func TestRunnerKeepsWorkingThroughFailedHeartbeats(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.orch.script(func(f *fakeOrchestrator) {
		f.heartbeatErrs = []error{unavailable(), status.Error(codes.DeadlineExceeded, "slow"), unavailable()}
	})
	var runs counter
	e.start(slowExecutor(&runs, 3*time.Second))
	d := e.directive("file:///unused")
	d.LeaseTimeout = durationpb.New(3 * time.Second)
	e.publish(d, msgID(d, ""), nil)
	e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
	e.stop()
	e.assertSettled()

	_, results := e.orch.calls()
	if results[0].GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED {
		t.Errorf("RESULT = %v, want SUCCEEDED: transport errors alone must not stop the work", results[0])
	}
	if n := len(e.orch.heartbeatCalls()); n < 4 {
		t.Errorf("heartbeat calls = %d, want the 3 failures retried and answered", n)
	}
}

func TestRunnerStopsWhenHeartbeatSaysLeaseLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		outcome luciusv1.CallbackOutcome
		err     error
		// ignoresCancel: the executor ignores ctx and finishes successfully
		// after the lease is lost; its work must be discarded all the same.
		ignoresCancel bool
	}{
		{"stale attempt", luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT, nil, false},
		{"lease mismatch", luciusv1.CallbackOutcome_CALLBACK_OUTCOME_LEASE_MISMATCH, nil, false},
		{"after terminal", luciusv1.CallbackOutcome_CALLBACK_OUTCOME_AFTER_TERMINAL, nil, false},
		{"step not found", 0, status.Error(codes.NotFound, "no such step"), false},
		{"executor ignoring cancellation", luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.orch.script(func(f *fakeOrchestrator) { f.heartbeatOutcome, f.heartbeatErr = tc.outcome, tc.err })
			cause := make(chan error, 1)
			e.start(worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
				if _, err := task.WriteArtifact(ctx, "text", "output.txt", "text/plain", []byte("partial")); err != nil {
					return worker.Result{}, err
				}
				select {
				case <-ctx.Done():
					cause <- context.Cause(ctx)
				case <-time.After(eventually):
					cause <- errors.New("executor context never ended")
				}
				if tc.ignoresCancel {
					return worker.Result{Output: map[string]any{"finished": "anyway"}}, nil
				}
				return worker.Result{}, ctx.Err()
			}))
			d := e.directive("file:///unused")
			d.LeaseTimeout = durationpb.New(3 * time.Second)
			d.FinalStep = true
			e.publish(d, msgID(d, ""), nil)

			select {
			case err := <-cause:
				if !errors.Is(err, worker.ErrLeaseLost) {
					t.Fatalf("executor context ended with %v, want worker.ErrLeaseLost", err)
				}
			case <-time.After(eventually):
				t.Fatal("executor never saw its context end")
			}
			e.assertSettled() // completed, not merely locked or abandoned
			e.stop()

			if _, results := e.orch.calls(); len(results) != 0 {
				t.Errorf("RESULTs = %v, want none for an attempt whose lease was lost", results)
			}
			if n := len(e.orch.heartbeatCalls()); n != 1 {
				t.Errorf("heartbeats = %d, want 1 (none after the lease was lost)", n)
			}
			if n := e.executions(d.GetJobId()); n != 0 {
				t.Errorf("worker_executions rows = %d, want 0 (nothing recorded as done)", n)
			}
			if effects := e.effects(d.GetJobId()); len(effects) != 0 {
				t.Errorf("worker_effects = %v, want none", effects)
			}
			if _, err := os.Stat(strings.TrimPrefix(d.GetOutputRef(), "file://")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("output_ref written by an attempt whose lease was lost: %v", err)
			}
		})
	}
}

func TestRunnerCommitsOneEffectPerStep(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var runs counter
	e.start(upperExecutor(&runs))
	first := e.directive(e.writeInput("in.txt", []byte("twice\n")))
	e.publish(first, msgID(first, ""), nil)
	e.waitFor("first RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
	// The orchestrator retried the step (its ACK timed out, or its lease
	// expired): attempt 2 runs and succeeds as well.
	second := proto.Clone(first).(*luciusv1.Directive)
	second.AttemptNo, second.LeaseId = 2, uuid.NewString()
	e.publish(second, msgID(second, ""), nil)
	e.waitFor("second RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 2 })
	e.stop()
	e.assertSettled()

	_, results := e.orch.calls()
	for i, res := range results {
		if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || res.GetAttemptNo() != int32(i+1) {
			t.Errorf("RESULT %d = attempt %d %v, want attempt %d SUCCEEDED", i+1, res.GetAttemptNo(), res.GetStatus(), i+1)
		}
	}
	if runs.get() != 2 || e.finishedExecutions(first.GetJobId()) != 2 {
		t.Errorf("runs %d, finished executions %d; want 2 each (both attempts ran)", runs.get(), e.finishedExecutions(first.GetJobId()))
	}
	effects := e.effects(first.GetJobId())
	want := effectRow{stepID: "ocr", attemptNo: 1, leaseID: first.GetLeaseId(), workerID: "worker-test-1"}
	if len(effects) != 1 || effects[0] != want {
		t.Errorf("worker_effects = %+v, want exactly %+v (the first attempt's)", effects, want)
	}
}

func TestRunnerInjectsFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		disabled   bool // no faults.Inject middleware
		attemptNo  int32
		fault      map[string]any
		wantStatus luciusv1.ResultStatus
		wantClass  luciusv1.FailureClass
		wantReason string
		wantRuns   int
		minTook    time.Duration
	}{
		{
			name: "retryable on an early attempt", attemptNo: 2,
			fault:      map[string]any{"step_type": "OCR", "kind": "retryable", "attempts": 2},
			wantStatus: luciusv1.ResultStatus_RESULT_STATUS_FAILED, wantClass: luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE,
			wantReason: "INJECTED_FAULT: injected retryable failure on attempt 2",
		},
		{
			name: "retryable runs normally after its attempts", attemptNo: 3,
			fault:      map[string]any{"step_type": "OCR", "kind": "retryable", "attempts": 2},
			wantStatus: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, wantRuns: 1,
		},
		{
			name: "permanent", attemptNo: 1,
			fault:      map[string]any{"step_type": "OCR", "kind": "permanent"},
			wantStatus: luciusv1.ResultStatus_RESULT_STATUS_FAILED, wantClass: luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE,
			wantReason: "INJECTED_FAULT: injected permanent failure",
		},
		{
			name: "sleep, then execute", attemptNo: 1,
			fault:      map[string]any{"step_type": "OCR", "kind": "sleep", "ms": 1200},
			wantStatus: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, wantRuns: 1, minTook: 1200 * time.Millisecond,
		},
		{
			name: "another step type is untouched", attemptNo: 1,
			fault:      map[string]any{"step_type": "EMBEDDING", "kind": "permanent"},
			wantStatus: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, wantRuns: 1,
		},
		{
			name: "unknown kind is ignored", attemptNo: 1,
			fault:      map[string]any{"step_type": "OCR", "kind": "explode"},
			wantStatus: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, wantRuns: 1,
		},
		{
			name: "off unless enabled", disabled: true, attemptNo: 1,
			fault:      map[string]any{"step_type": "OCR", "kind": "permanent"},
			wantStatus: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, wantRuns: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			if !tc.disabled {
				e.cfg.Middleware = []worker.Middleware{faults.Inject}
			}
			var runs counter
			e.start(upperExecutor(&runs))
			d := e.directive(e.writeInput("in.txt", []byte("x")))
			d.AttemptNo = tc.attemptNo
			payload, err := structpb.NewStruct(map[string]any{"fault": tc.fault, "language": "en"})
			if err != nil {
				t.Fatal(err)
			}
			d.Payload = payload
			e.publish(d, msgID(d, ""), nil)
			e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
			e.stop()
			e.assertSettled()

			_, results := e.orch.calls()
			res := results[0]
			if res.GetStatus() != tc.wantStatus || res.GetFailureClass() != tc.wantClass || !strings.HasPrefix(res.GetReason(), tc.wantReason) {
				t.Errorf("RESULT %v %v %q, want %v %v with reason prefix %q", res.GetStatus(), res.GetFailureClass(), res.GetReason(),
					tc.wantStatus, tc.wantClass, tc.wantReason)
			}
			if runs.get() != tc.wantRuns {
				t.Errorf("executor ran %d times, want %d", runs.get(), tc.wantRuns)
			}
			if took := res.GetFinishTime().AsTime().Sub(res.GetStartTime().AsTime()); took < tc.minTook {
				t.Errorf("attempt took %v, want at least %v", took, tc.minTook)
			}
			wantEffects := 0
			if tc.wantStatus == luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED {
				wantEffects = 1
			}
			if n := len(e.effects(d.GetJobId())); n != wantEffects {
				t.Errorf("worker_effects rows = %d, want %d (failed attempts commit no effect)", n, wantEffects)
			}
		})
	}
}

func TestRunnerInjectedSleepHonoursShutdown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.cfg.Middleware = []worker.Middleware{faults.Inject}
	e.cfg.ShutdownGrace = 100 * time.Millisecond
	var runs counter
	e.start(upperExecutor(&runs))
	d := e.directive(e.writeInput("in.txt", []byte("x")))
	payload, err := structpb.NewStruct(map[string]any{"fault": map[string]any{"step_type": "OCR", "kind": "sleep", "ms": 60000}})
	if err != nil {
		t.Fatal(err)
	}
	d.Payload = payload
	e.publish(d, msgID(d, ""), nil)
	e.waitFor("ACK", func() bool { acks, _ := e.orch.calls(); return len(acks) == 1 })
	began := time.Now()
	e.stop()
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("shutdown took %v: the injected sleep ignored cancellation", took)
	}
	if _, results := e.orch.calls(); len(results) != 0 || runs.get() != 0 {
		t.Errorf("RESULTs %d, runs %d; want none for an attempt interrupted in its injected sleep", len(results), runs.get())
	}
	if m := e.receiveOne(e.source()); m.DeliveryCount != 2 {
		t.Errorf("delivery count = %d, want 2 (abandoned for redelivery)", m.DeliveryCount)
	}
}

// An executor that reports Polling answers RESULT POLLING with its progress,
// commits no effect and writes no output_ref; the step's next directive (a
// poll) runs it again, and the attempt that finishes commits the effect.
func TestRunnerReportsPollingWithoutAnEffect(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var runs counter
	e.start(worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
		if runs.inc(); runs.get() == 1 {
			return worker.Result{Polling: true, Output: map[string]any{"percent": 40}}, nil
		}
		return worker.Result{Output: map[string]any{"percent": 100}}, nil
	}))
	first := e.directive(e.writeInput("in.txt", []byte("move\n")))
	first.FinalStep = true
	e.publish(first, msgID(first, ""), nil)
	e.waitFor("polling RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
	poll := proto.Clone(first).(*luciusv1.Directive)
	poll.AttemptNo, poll.LeaseId = 2, uuid.NewString()
	e.publish(poll, msgID(poll, ""), nil)
	e.waitFor("final RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 2 })
	e.stop()
	e.assertSettled()

	_, results := e.orch.calls()
	if results[0].GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_POLLING ||
		results[0].GetOutput().GetFields()["percent"].GetNumberValue() != 40 || len(results[0].GetArtifacts()) != 0 {
		t.Errorf("first RESULT = %v, want POLLING with its progress", results[0])
	}
	if results[1].GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED {
		t.Errorf("second RESULT = %v, want SUCCEEDED", results[1])
	}
	effects := e.effects(first.GetJobId())
	if len(effects) != 1 || effects[0].attemptNo != 2 {
		t.Errorf("worker_effects = %+v, want one, of attempt 2", effects)
	}
}

// A detached directive (too large for its bus message) runs with the whole
// directive the orchestrator keeps, fetched with the message's callback
// token; one the orchestrator does not know is completed without running.
func TestRunnerFetchesADetachedDirectiveBeforeRunningIt(t *testing.T) {
	t.Parallel()
	for _, known := range []bool{true, false} {
		t.Run(fmt.Sprintf("known=%t", known), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			var payloads []string
			var mu sync.Mutex
			var runs counter
			upper := upperExecutor(&runs)
			e.start(worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
				mu.Lock()
				payloads = append(payloads, task.Directive.GetPayload().GetFields()["marker"].GetStringValue())
				mu.Unlock()
				return upper(ctx, task)
			}))
			whole := e.directive(e.writeInput("in.txt", []byte("big\n")))
			whole.CallbackToken = "token-of-the-attempt"
			whole.Payload, _ = structpb.NewStruct(map[string]any{"marker": "whole"})
			stub := proto.CloneOf(whole)
			stub.Payload, stub.Detached = nil, true
			if known {
				e.orch.script(func(f *fakeOrchestrator) {
					f.detached = map[string]*luciusv1.Directive{whole.GetJobId(): whole}
				})
			}
			e.publish(stub, msgID(stub, ""), nil)
			e.waitFor("GetDirective", func() bool { return len(e.orch.getDirectiveCalls()) == 1 })
			if known {
				e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
			}
			e.assertSettled()
			e.stop()

			call := e.orch.getDirectiveCalls()[0]
			if call.GetJobId() != stub.GetJobId() || call.GetLeaseId() != stub.GetLeaseId() || call.GetAttemptNo() != 1 ||
				call.GetCallbackToken() != "token-of-the-attempt" {
				t.Errorf("GetDirective = %v", call)
			}
			acks, results := e.orch.calls()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case known && (len(acks) != 1 || len(results) != 1 || len(payloads) != 1 || payloads[0] != "whole"):
				t.Errorf("%d ACK, %d RESULT, executor saw payloads %q; want one run with the whole directive", len(acks), len(results), payloads)
			case known && results[0].GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED:
				t.Errorf("RESULT = %v", results[0])
			case !known && (len(acks) != 0 || len(results) != 0 || runs.get() != 0):
				t.Errorf("an unknown detached directive ran: %d ACK, %d RESULT, %d runs", len(acks), len(results), runs.get())
			}
		})
	}
}

// Prefetch is how many messages a subscription's receiver takes at once:
// with one execution slot and Prefetch 3, the worker holds all three
// directives (locked, renewed) while the first runs, and another receiver
// finds none; with Prefetch 1, one waits and the third is left for anyone.
func TestRunnerPrefetchHoldsThatManyMessagesPerSubscription(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ prefetch, left int }{{3, 0}, {1, 1}} {
		t.Run(fmt.Sprintf("prefetch=%d", tc.prefetch), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.cfg.Concurrency, e.cfg.Prefetch = 1, tc.prefetch
			// The subscriptions exist before the runner starts, so the three
			// directives are waiting when it first receives.
			if err := topology.DeclareService(t.Context(), e.bus, topology.Config{DirectiveLockDuration: testLockDuration}, e.cfg.Service); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				d := e.directive(e.writeInput(fmt.Sprintf("in%d.txt", i), []byte("held\n")))
				e.publish(d, msgID(d, ""), nil)
			}
			release := make(chan struct{})
			var started, runs counter
			upper := upperExecutor(&runs)
			e.start(worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
				started.inc()
				<-release
				return upper(ctx, task)
			}))
			e.waitFor("the first execution", func() bool { return started.get() == 1 })

			other, err := e.bus.NewReceiver(t.Context(), e.source())
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(t.Context(), time.Second)
			taken, _ := other.Receive(rctx, 3)
			cancel()
			for _, m := range taken {
				if err := other.Abandon(t.Context(), m); err != nil {
					t.Fatal(err)
				}
			}
			other.Close(t.Context()) //nolint:errcheck
			if len(taken) != tc.left {
				t.Errorf("another receiver took %d directives while the worker ran one, want %d", len(taken), tc.left)
			}
			close(release)
			e.waitFor("three RESULTs", func() bool { _, res := e.orch.calls(); return len(res) == 3 })
			e.stop()
			e.assertSettled()
		})
	}
}

// With an ACK linger, quick work sends its RESULT alone (the RESULT implies
// the ACK); longer work sends the ACK after the linger, while it runs, then
// its RESULT; and a lingering ACK answered "another attempt owns the step"
// stops the running execution: no RESULT, the message completed, nothing
// recorded as executed.
func TestRunnerAckLinger(t *testing.T) {
	t.Parallel()
	stale := luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT
	for _, tc := range []struct {
		name       string
		work       time.Duration
		ackOutcome luciusv1.CallbackOutcome // 0: APPLIED
		wantAcks   int
		wantResult bool
	}{
		{"quick work: RESULT alone", 0, 0, 0, true},
		{"longer work: ACK, then RESULT", 800 * time.Millisecond, 0, 1, true},
		{"longer work, stale ACK: stopped", 10 * time.Second, stale, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.cfg.AckLinger = 200 * time.Millisecond
			if tc.ackOutcome != 0 {
				e.orch.script(func(f *fakeOrchestrator) { f.ackOutcome = tc.ackOutcome })
			}
			var (
				runs  counter
				cause atomic.Value
			)
			upper := upperExecutor(&runs)
			e.start(worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
				select {
				case <-time.After(tc.work):
				case <-ctx.Done():
					cause.Store(context.Cause(ctx))
					return worker.Result{}, ctx.Err()
				}
				return upper(ctx, task)
			}))
			d := e.directive(e.writeInput("in.txt", []byte("linger\n")))
			e.publish(d, msgID(d, ""), nil)
			if tc.wantResult {
				e.waitFor("RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
			} else {
				e.waitFor("ACK", func() bool { acks, _ := e.orch.calls(); return len(acks) == 1 })
				e.waitFor("the execution stopped", func() bool { return cause.Load() != nil })
			}
			e.assertSettled()
			e.stop()

			acks, results := e.orch.calls()
			if len(acks) != tc.wantAcks || (len(results) == 1) != tc.wantResult {
				t.Fatalf("%d ACKs and %d RESULTs, want %d and a RESULT %v", len(acks), len(results), tc.wantAcks, tc.wantResult)
			}
			if tc.wantResult {
				if results[0].GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED {
					t.Errorf("RESULT %v %s", results[0].GetStatus(), results[0].GetReason())
				}
				return
			}
			if c, _ := cause.Load().(error); !errors.Is(c, worker.ErrLeaseLost) {
				t.Errorf("the execution was stopped with %v, want ErrLeaseLost", c)
			}
			if n := e.executions(d.GetJobId()); n != 0 {
				t.Errorf("worker_executions rows = %d, want 0 (the attempt was not this worker's)", n)
			}
		})
	}
}
