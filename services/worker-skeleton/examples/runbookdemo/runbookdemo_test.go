package runbookdemo

import (
	"context"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

func TestExecutorBehavesAsItsParamsSay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		outcome string
		attempt int32
		polling bool
		class   luciusv1.FailureClass // 0: no error
	}{
		{"", 1, false, 0},
		{"succeed", 1, false, 0},
		{"fail", 1, false, luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE},
		{"poll", 9, true, 0},
		{"poll:2", 1, true, 0},
		{"poll:2", 2, true, 0},
		{"poll:2", 3, false, 0},
		{"poll:x", 1, false, luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE},
		{"dance", 1, false, luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE},
	}
	for _, tt := range tests {
		params := map[string]any{"mailbox": "a@b.c"}
		if tt.outcome != "" {
			params["outcome"] = tt.outcome
		}
		payload, _ := structpb.NewStruct(params)
		task := &worker.Task{Directive: &luciusv1.Directive{StepType: "start_move", AttemptNo: tt.attempt, Payload: payload}}
		out, err := Executor{}.Execute(context.Background(), task)
		if tt.class != 0 {
			if class, _ := worker.Classify(err); err == nil || class != tt.class {
				t.Errorf("%q@%d: error %v, want class %s", tt.outcome, tt.attempt, err, tt.class)
			}
			continue
		}
		if err != nil || out.Polling != tt.polling || out.Output["dispatch"] != int(tt.attempt) {
			t.Errorf("%q@%d: %+v %v, want polling=%v", tt.outcome, tt.attempt, out, err, tt.polling)
		}
	}
}
