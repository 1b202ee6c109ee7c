package phased_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/workertest"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/phased"
)

func newTask(t *testing.T, d *luciusv1.Directive, shutdown <-chan struct{}) *worker.Task {
	t.Helper()
	task, err := worker.NewTask(d, worker.TaskConfig{FileRoots: []string{os.TempDir()}, ShuttingDown: shutdown})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// output is the handler's output, decoded.
type output struct {
	Phases       int            `json:"phases"`
	Digest       string         `json:"digest"`
	Run          int            `json:"run"`
	ResumedAfter int            `json:"resumed_after"`
	Done         []phased.Phase `json:"done"`
}

func decode(t *testing.T, out worker.Result) output {
	t.Helper()
	raw, err := json.Marshal(out.Output)
	if err != nil {
		t.Fatal(err)
	}
	var o output
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// Told to shut down before its first phase, the handler stops with
// ErrShuttingDown and saves nothing; the next execution then starts from
// the first phase. Left alone, it runs every phase in one execution.
func TestPhasedStopsAtTheShutdownNotice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name     string
		shutdown bool
	}{
		{"uninterrupted", false},
		{"shut down before the first phase", true},
	}
	for _, tt := range tests {
		d := workertest.Directive(t, phased.Handler, nil, map[string]any{"phases": 3, "phase_ms": 0})
		notice := make(chan struct{})
		if tt.shutdown {
			close(notice)
		}
		task := newTask(t, d, notice)
		out, err := phased.Executor{}.Execute(ctx, task)
		if tt.shutdown {
			if !errors.Is(err, worker.ErrShuttingDown) {
				t.Fatalf("%s: execution = %v, want ErrShuttingDown", tt.name, err)
			}
			if _, found, _ := task.Checkpoint(ctx, phased.CheckpointName); found {
				t.Fatalf("%s: a checkpoint was saved without a phase done", tt.name)
			}
			d.AttemptNo = 2
			if out, err = (phased.Executor{}).Execute(ctx, newTask(t, d, nil)); err != nil {
				t.Fatalf("%s: next execution: %v", tt.name, err)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		o := decode(t, out)
		want := []phased.Phase{{Phase: 1, Run: 1, AttemptNo: int(d.AttemptNo)}, {Phase: 2, Run: 1, AttemptNo: int(d.AttemptNo)},
			{Phase: 3, Run: 1, AttemptNo: int(d.AttemptNo)}}
		if len(o.Done) != 3 || o.Done[0] != want[0] || o.Done[2] != want[2] || o.ResumedAfter != 0 || o.Digest != phased.Digest(3) {
			t.Fatalf("%s: output %+v", tt.name, o)
		}
	}
}

// A checkpoint saved by an earlier execution is where a later one starts:
// the phases it records are not run again, and the digest is that of a run
// that never stopped.
func TestPhasedSkipsPhasesAnEarlierExecutionCheckpointed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := workertest.Directive(t, phased.Handler, nil, map[string]any{"phases": 4, "phase_ms": 0})
	// An earlier execution (attempt 1) got through two phases.
	first := newTask(t, d, nil)
	ckpt := phased.Progress{Run: 1, Digest: phased.Digest(2), Done: []phased.Phase{{Phase: 1, Run: 1, AttemptNo: 1}, {Phase: 2, Run: 1, AttemptNo: 1}}}
	data, _ := json.Marshal(ckpt)
	if err := first.SaveCheckpoint(ctx, phased.CheckpointName, data); err != nil {
		t.Fatal(err)
	}
	d.AttemptNo = 2
	out, err := phased.Executor{}.Execute(ctx, newTask(t, d, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []phased.Phase{{Phase: 1, Run: 1, AttemptNo: 1}, {Phase: 2, Run: 1, AttemptNo: 1}, {Phase: 3, Run: 2, AttemptNo: 2},
		{Phase: 4, Run: 2, AttemptNo: 2}}
	o := decode(t, out)
	if len(o.Done) != len(want) {
		t.Fatalf("done %+v", o.Done)
	}
	for i, w := range want {
		if o.Done[i] != w {
			t.Fatalf("phase %d: %+v, want %+v", i+1, o.Done[i], w)
		}
	}
	if o.Run != 2 || o.ResumedAfter != 2 || o.Digest != phased.Digest(4) {
		t.Fatalf("output %+v", o)
	}
}

func TestPhasedRejectsBadPayloads(t *testing.T) {
	t.Parallel()
	for _, payload := range []map[string]any{{"phases": 0}, {"phases": 101}, {"phase_ms": -1}, {"phases": "four"}} {
		d := workertest.Directive(t, phased.Handler, nil, payload)
		_, _, err := workertest.Execute(t, phased.Executor{}, d)
		if class, _ := worker.Classify(err); class != luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE {
			t.Errorf("payload %v: %v (%s), want a permanent failure", payload, err, class)
		}
	}
}

// The contract kit, checkpoint resume included: PHASED saves a checkpoint
// after each phase and stops at the shutdown notice.
func TestPhasedMeetsTheWorkerContract(t *testing.T) {
	t.Parallel()
	workertest.CheckContract(t, phased.Handler, phased.Executor{}, []byte("phases"))
}
