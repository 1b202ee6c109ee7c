package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

// named returns an executor reporting which handler ran.
func named(name string) worker.Executor {
	return worker.HandlerFunc(func(context.Context, *worker.Task) (worker.Result, error) {
		return worker.Result{Output: map[string]any{"handler": name}}, nil
	})
}

func TestHandlersDispatchOnStepType(t *testing.T) {
	t.Parallel()
	boom := worker.Retryable(errors.New("model server busy"))
	h := worker.Handlers{
		"raster_validate": named("raster_validate"),
		"raster_cog_fa":   named("raster_cog_fa"),
		"flaky": worker.HandlerFunc(func(context.Context, *worker.Task) (worker.Result, error) {
			return worker.Result{}, boom
		}),
		"unset": nil,
	}
	for _, tc := range []struct {
		stepType    string
		wantHandler string
		wantErr     string
	}{
		{"raster_validate", "raster_validate", ""},
		{"raster_cog_fa", "raster_cog_fa", ""},
		{"RASTER_VALIDATE", "", `UNKNOWN_HANDLER: handler "RASTER_VALIDATE" is not served by service "embedding" (known handlers: flaky, raster_cog_fa, raster_validate)`},
		{"tile_process", "", `UNKNOWN_HANDLER: handler "tile_process" is not served by service "embedding" (known handlers: flaky, raster_cog_fa, raster_validate)`},
		{"unset", "", `UNKNOWN_HANDLER: handler "unset" is not served`},
		{"flaky", "", "TRANSIENT: model server busy"},
	} {
		t.Run(tc.stepType, func(t *testing.T) {
			t.Parallel()
			task, _ := newTask(t, nil)
			task.Directive.StepType = tc.stepType
			out, err := h.Execute(context.Background(), task)
			if tc.wantErr == "" {
				if err != nil || out.Output["handler"] != tc.wantHandler {
					t.Fatalf("Execute = %v, %v; want handler %s", out, err, tc.wantHandler)
				}
				return
			}
			class, reason := worker.Classify(err)
			if !strings.HasPrefix(reason, tc.wantErr) {
				t.Fatalf("reason = %q, want prefix %q", reason, tc.wantErr)
			}
			wantClass := luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE
			if tc.stepType == "flaky" {
				wantClass = luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE
				if !errors.Is(err, boom) {
					t.Errorf("err = %v, want the handler's error unwrapped", err)
				}
			}
			if class != wantClass {
				t.Errorf("class = %v, want %v", class, wantClass)
			}
		})
	}
}

func TestHandlersEmpty(t *testing.T) {
	t.Parallel()
	task, _ := newTask(t, nil)
	task.Directive.Service = ""
	_, err := worker.Handlers(nil).Execute(context.Background(), task)
	if _, reason := worker.Classify(err); !worker.IsPermanent(err) ||
		reason != `UNKNOWN_HANDLER: handler "EMBEDDING" is not served by this service (known handlers: none)` {
		t.Errorf("Execute on empty Handlers = %q", reason)
	}
	if names := (worker.Handlers{"b": named("b"), "a": named("a"), "nil": nil}).Names(); strings.Join(names, ",") != "a,b" {
		t.Errorf("Names = %v", names)
	}
}

// One service serves several workflow handlers: Handlers dispatches on the
// directive's step_type (the workflow task's handler name).
func ExampleHandlers() {
	validate := func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		return worker.Result{Output: map[string]any{"blob_url": t.Directive.GetInputRef()}}, nil
	}
	convert := func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		return worker.Result{Output: map[string]any{"converted": true}}, nil
	}
	exec := worker.Handlers{
		"raster_validate": worker.HandlerFunc(validate),
		"raster_cog_fa":   worker.HandlerFunc(convert),
	}
	// worker.NewRunner(b, store, exec, worker.Config{Service: "raster"}) serves both.

	jobID := strings.Repeat("ab", 32)
	for _, stepType := range []string{"raster_validate", "raster_cog_fa", "raster_reproject"} {
		task, err := worker.NewTask(&luciusv1.Directive{
			JobId: jobID, StepId: "validate", StepType: stepType, Service: "raster", AttemptNo: 1,
			LeaseId: "8d1e4a6c-2b3f-4c5d-9e8f-7a6b5c4d3e2f", InputRef: "file:///data/in.tif",
			WorkspaceRef: "file:///tmp/lucius/acme/" + jobID + "/",
			CallbackUrls: &luciusv1.CallbackEndpoints{GrpcTarget: "127.0.0.1:9091"},
		}, worker.TaskConfig{})
		if err != nil {
			fmt.Println(err)
			return
		}
		out, err := exec.Execute(context.Background(), task)
		if err != nil {
			_, reason := worker.Classify(err)
			fmt.Println(stepType, "->", reason)
			continue
		}
		fmt.Println(stepType, "->", out.Output)
	}
	// Output:
	// raster_validate -> map[blob_url:file:///data/in.tif]
	// raster_cog_fa -> map[converted:true]
	// raster_reproject -> UNKNOWN_HANDLER: handler "raster_reproject" is not served by service "raster" (known handlers: raster_cog_fa, raster_validate)
}
