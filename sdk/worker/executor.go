package worker

import (
	"context"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// Executor does the work of one step attempt. It is the only part of the
// skeleton a fork replaces.
//
// Execute reads its input through the Task, writes its artifacts with
// Task.WriteArtifact and returns an Result (RESULT SUCCEEDED) or an error
// (RESULT FAILED; classify it with Permanent or Retryable, see Classify). It
// must honour ctx: ctx ends at Config.TaskTimeout (a RETRYABLE TIMEOUT
// failure) or when the worker shuts down (no RESULT; the directive is
// redelivered). Execute may run again for the same attempt after a crash, so
// it must be safe to repeat; artifact writes are atomic replacements.
type Executor interface {
	Execute(ctx context.Context, task *Task) (Result, error)
}

// HandlerFunc is a handler: the work of one step attempt as a function. It is
// an Executor; register it by name with Handle (or in a Handlers map).
type HandlerFunc func(ctx context.Context, task *Task) (Result, error)

// Execute calls f.
func (f HandlerFunc) Execute(ctx context.Context, task *Task) (Result, error) { return f(ctx, task) }

// Result is what a successful attempt reports.
type Result struct {
	// Output is small structured output (counts, scores, checksums) that later
	// steps and the job's API can read. Values must be JSON-like: nil, bool,
	// numbers, string, []any, map[string]any.
	Output map[string]any
	// Artifacts are reported in the RESULT. Nil means every artifact written
	// through Task.WriteArtifact, in write order. The first is the primary
	// artifact: the next step's input_ref, and on the final step the content
	// copied to output_ref.
	Artifacts []*luciusv1.ArtifactRef
	// Polling says the work goes on elsewhere (a long external operation you
	// started and will check): the RESULT is POLLING, Output carries the
	// progress, and Lucius sends a new directive for the step when it is time
	// to check again (runbook poll steps). Such an attempt records no effect
	// and writes no output_ref.
	Polling bool
}

// Middleware wraps an Executor with behaviour every handler shares (logging,
// metrics, test-only fault injection: package workertest/faults).
// Config.Middleware lists them outermost first; they wrap the no-op executor
// too when Config.NoOp is set.
type Middleware func(next Executor) Executor

// noOp is the executor of Config.NoOp: success at once, no artifacts.
type noOp struct{}

func (noOp) Execute(context.Context, *Task) (Result, error) {
	return Result{Output: map[string]any{"noop": true}, Artifacts: []*luciusv1.ArtifactRef{}}, nil
}
