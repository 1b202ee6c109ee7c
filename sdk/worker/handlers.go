package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Handlers is how one service serves several handlers. A DAG workflow names a
// handler per task (e.g. raster_validate, raster_cog_fa), and its directive
// carries that name as step_type; every handler a service owns arrives on the
// service's one set of subscriptions. Handlers maps each name to its Executor
// and is itself the service's Executor:
//
//	exec := worker.Handlers{
//		"raster_validate": worker.HandlerFunc(validate),
//		"raster_cog_fa":   worker.HandlerFunc(cogFA),
//	}
//	runner, err := worker.NewRunner(b, store, exec, worker.Config{Service: "raster"})
//
// Names match step_type exactly (case-sensitive). A directive for a name the
// map lacks fails permanently with code UNKNOWN_HANDLER and a reason naming
// the handler and the known ones: the orchestrator routed the step to a
// service that does not implement it, which no retry can fix.
//
// Handlers does not wrap the handler's errors, so their reasons and
// classification reach the RESULT unchanged. A service with one step type can
// keep using a plain Executor.
type Handlers map[string]Executor

var _ Executor = Handlers(nil)

// Execute runs the Executor registered for the directive's step_type.
func (h Handlers) Execute(ctx context.Context, task *Task) (Result, error) {
	name := task.Directive.GetStepType()
	exec, ok := h[name]
	if !ok || exec == nil {
		known := "none"
		if names := h.Names(); len(names) > 0 {
			known = strings.Join(names, ", ")
		}
		service := task.Directive.GetService()
		if service == "" {
			service = "this service"
		} else {
			service = fmt.Sprintf("service %q", service)
		}
		return Result{}, PermanentCode(CodeUnknownHandler,
			fmt.Errorf("handler %q is not served by %s (known handlers: %s)", clip(name), service, known))
	}
	return exec.Execute(ctx, task)
}

// Names lists the handlers that have an Executor, sorted.
func (h Handlers) Names() []string {
	names := make([]string, 0, len(h))
	for n, exec := range h {
		if exec != nil {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}
