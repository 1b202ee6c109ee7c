package worker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

// phasedExecutor resumes from its "progress" checkpoint when there is one
// and succeeds, reporting where it resumed; otherwise it checkpoints phase
// 1, tells started, and waits: at the shutdown notice it checkpoints phase
// 2 and stops with ErrShuttingDown.
func phasedExecutor(runs *counter, started chan<- struct{}) worker.HandlerFunc {
	return func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		runs.inc()
		data, found, err := t.Checkpoint(ctx, "progress")
		if err != nil {
			return worker.Result{}, err
		}
		if found {
			return worker.Result{Output: map[string]any{"resumed_from": string(data)}}, nil
		}
		if err := t.SaveCheckpoint(ctx, "progress", []byte("phase 1")); err != nil {
			return worker.Result{}, err
		}
		started <- struct{}{}
		select {
		case <-t.ShuttingDown():
			if err := t.SaveCheckpoint(ctx, "progress", []byte("phase 2")); err != nil {
				return worker.Result{}, err
			}
			return worker.Result{}, fmt.Errorf("stopped after phase 2: %w", worker.ErrShuttingDown)
		case <-ctx.Done():
			return worker.Result{}, ctx.Err()
		}
	}
}

// SIGTERM within the grace: the executor hears the notice, saves a
// checkpoint and stops; the runner sends no RESULT, releases the attempt and
// abandons its message without waiting out the grace, and the redelivery
// runs the attempt again (it is not a duplicate), resuming from the
// checkpoint. Each saved checkpoint is reported as a RecordCheckpoint call.
func TestRunnerShutdownLetsTheExecutorCheckpointThenReleasesTheAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// Far longer than env.stop waits: a runner that sat out the grace fails the test.
	e.cfg.ShutdownGrace = 10 * eventually
	runs, started := &counter{}, make(chan struct{}, 1)
	exec := phasedExecutor(runs, started)
	e.start(exec)
	d := e.directive("file:///unused")
	e.publishUntilStarted(d, started)
	e.stop()

	if _, results := e.orch.calls(); len(results) != 0 {
		t.Fatalf("an attempt stopped at shutdown sent RESULT: %v", results)
	}
	calls := e.orch.checkpointCalls()
	if len(calls) != 2 {
		t.Fatalf("%d RecordCheckpoint calls, want 2 (phase 1, phase 2)", len(calls))
	}
	ckpt := filepath.Join(e.workspace, "lucius", "acme", d.GetJobId(), "checkpoints", "ocr", "progress")
	for _, c := range calls {
		if c.GetJobId() != d.GetJobId() || c.GetStepId() != "ocr" || c.GetAttemptNo() != 1 || c.GetLeaseId() != d.GetLeaseId() ||
			c.GetCheckpointName() != "progress" || c.GetUri() != "file://"+ckpt || c.GetCallbackToken() != d.GetCallbackToken() ||
			c.GetCorrelationId() != "corr-1" || c.GetWorkerId() != "worker-test-1" {
			t.Fatalf("RecordCheckpoint %v", c)
		}
	}
	if last := calls[1]; last.GetSizeBytes() != int64(len("phase 2")) || last.GetSha256() != sha256Hex([]byte("phase 2")) {
		t.Fatalf("last checkpoint reported as %d bytes, sha256 %s", last.GetSizeBytes(), last.GetSha256())
	}
	if raw, err := os.ReadFile(ckpt); err != nil || string(raw) != "phase 2" {
		t.Fatalf("checkpoint file: %q, %v", raw, err)
	}
	if n := e.finishedExecutions(d.GetJobId()); n != 0 {
		t.Fatalf("%d executions recorded as done after the shutdown", n)
	}

	// Another worker takes the redelivered message over and resumes.
	e.cfg.WorkerID = "worker-test-2"
	e.start(exec)
	e.waitFor("the resumed attempt's RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 1 })
	_, results := e.orch.calls()
	res := results[0]
	if res.GetStatus() != luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED || res.GetAttemptNo() != 1 ||
		res.GetOutput().AsMap()["resumed_from"] != "phase 2" || res.GetWorkerId() != "worker-test-2" {
		t.Fatalf("resumed RESULT %v", res)
	}
	if runs.get() != 2 {
		t.Fatalf("executor ran %d times, want 2 (interrupted, resumed)", runs.get())
	}
	e.waitFor("the message settled", func() bool { return e.finishedExecutions(d.GetJobId()) == 1 })
	e.assertSettled()

	// A true duplicate of the finished attempt still does not run again.
	e.publish(d, msgID(d, "dup"), nil)
	e.waitFor("the duplicate's re-sent RESULT", func() bool { _, res := e.orch.calls(); return len(res) == 2 })
	if runs.get() != 2 {
		t.Fatalf("a duplicate ran the executor again (%d runs)", runs.get())
	}
}

// A checkpoint answered "this attempt no longer owns the step" stops the
// attempt as a lost lease does: SaveCheckpoint fails with ErrLeaseLost, the
// context ends, no RESULT is sent and nothing is recorded as done.
func TestRunnerStopsWhenACheckpointSaysTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.orch.script(func(f *fakeOrchestrator) {
		f.checkpointOutcome = luciusv1.CallbackOutcome_CALLBACK_OUTCOME_STALE_ATTEMPT
	})
	saveErr := make(chan error, 1)
	e.start(worker.HandlerFunc(func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		err := t.SaveCheckpoint(ctx, "progress", []byte("phase 1"))
		saveErr <- err
		if err != nil {
			return worker.Result{}, err
		}
		return worker.Result{}, nil
	}))
	d := e.directive("file:///unused")
	e.publish(d, msgID(d, ""), nil)
	var err error
	select {
	case err = <-saveErr:
	case <-time.After(eventually):
		t.Fatal("executor never saved")
	}
	if !errors.Is(err, worker.ErrLeaseLost) {
		t.Fatalf("SaveCheckpoint = %v, want ErrLeaseLost", err)
	}
	e.waitFor("the message settled", func() bool { return e.executions(d.GetJobId()) == 0 })
	e.assertSettled()
	if _, results := e.orch.calls(); len(results) != 0 {
		t.Fatalf("a lost attempt sent RESULT: %v", results)
	}
}
