// Package runbookdemo is an example worker pool for runbooks (seed 003): it
// serves any function name, and each step's params say how it behaves, so a
// runbook can exercise every path of the protocol without real systems:
//
//	outcome: succeed (the default) | fail | poll:N | poll
//
// poll:N answers "still in progress" (RESULT POLLING) until the step has been
// polled N times, then succeeds; poll never finishes (its poll timeout ends
// it). The output echoes the params and says which dispatch answered. A real
// pool registers its functions in a worker.Handlers and returns
// worker.Result{Polling: true} while its external operation runs.
package runbookdemo

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/lucius-platform/lucius/sdk/worker"
)

// Service is the worker pool name runbooks use for these steps (worker_id).
const Service = "demo"

// Executor runs every function of the demo pool.
type Executor struct{}

var _ worker.Executor = Executor{}

// Execute behaves as payload.outcome says.
func (Executor) Execute(ctx context.Context, t *worker.Task) (worker.Result, error) {
	outcome, err := t.PayloadString("outcome", "succeed")
	if err != nil {
		return worker.Result{}, worker.Permanent(err)
	}
	// Each poll of a step is a new attempt of its job: the attempt number
	// counts the dispatches so far.
	dispatch := int(t.Directive.GetAttemptNo())
	out := worker.Result{Output: map[string]any{"function": t.Directive.GetStepType(), "dispatch": dispatch, "params": t.Payload()}}
	switch {
	case outcome == "succeed":
		return out, nil
	case outcome == "fail":
		return worker.Result{}, worker.Permanent(fmt.Errorf("%s failed as its params asked", t.Directive.GetStepType()))
	case outcome == "poll":
		out.Polling = true
		return out, nil
	case strings.HasPrefix(outcome, "poll:"):
		n, err := strconv.Atoi(strings.TrimPrefix(outcome, "poll:"))
		if err != nil || n < 0 {
			return worker.Result{}, worker.Permanent(fmt.Errorf("outcome %q: want poll:N with N >= 0", outcome))
		}
		out.Polling = dispatch <= n
		return out, nil
	}
	return worker.Result{}, worker.Permanent(fmt.Errorf("outcome %q: want succeed, fail, poll or poll:N", outcome))
}
