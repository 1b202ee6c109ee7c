package orchestrator

import (
	"math"
	"reflect"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

func TestCallbackRequestsBecomeTheEnginesInputs(t *testing.T) {
	t.Parallel()
	out, err := structpb.NewStruct(map[string]any{"pages": 3})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  *luciusv1.ResultRequest
		want engine.Result
	}{
		{"succeeded with output and artifacts",
			&luciusv1.ResultRequest{Status: luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, Output: out,
				Artifacts: []*luciusv1.ArtifactRef{{Name: "a", Uri: "file:///a", MediaType: "text/plain", SizeBytes: 2, Sha256: "ff"}}},
			engine.Result{Status: engine.ResultSucceeded, Output: []byte(`{"pages":3}`),
				Artifacts: []ledger.Artifact{{Name: "a", URI: "file:///a", MediaType: "text/plain", SizeBytes: 2, SHA256: "ff"}}}},
		{"failed retryable",
			&luciusv1.ResultRequest{Status: luciusv1.ResultStatus_RESULT_STATUS_FAILED, FailureClass: luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE,
				Reason: "busy"},
			engine.Result{Status: engine.ResultFailed, Retryable: true, Reason: "busy", Artifacts: []ledger.Artifact{}}},
		{"failed for good",
			&luciusv1.ResultRequest{Status: luciusv1.ResultStatus_RESULT_STATUS_FAILED, FailureClass: luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE},
			engine.Result{Status: engine.ResultFailed, Artifacts: []ledger.Artifact{}}},
		{"polling with an empty progress",
			&luciusv1.ResultRequest{Status: luciusv1.ResultStatus_RESULT_STATUS_POLLING, Output: &structpb.Struct{}},
			engine.Result{Status: engine.ResultPolling, Output: []byte(`{}`), Artifacts: []ledger.Artifact{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := resultFromProto(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			// protojson may space its output; compare the JSON's bytes without it.
			got.Output = compact(got.Output)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("%+v, want %+v", got, tt.want)
			}
		})
	}

	nan := &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewNumberValue(math.NaN())}}
	for field, convert := range map[string]func() error{
		"output": func() error { _, err := resultFromProto(&luciusv1.ResultRequest{Output: nan}); return err },
		"progress": func() error {
			_, err := heartbeatFromProto(&luciusv1.HeartbeatRequest{Progress: nan})
			return err
		},
	} {
		err := convert()
		var br *errdetails.BadRequest
		if st := status.Convert(err); st.Code() == codes.InvalidArgument {
			for _, d := range st.Details() {
				if b, ok := d.(*errdetails.BadRequest); ok {
					br = b
				}
			}
		}
		if br == nil || len(br.GetFieldViolations()) != 1 || br.GetFieldViolations()[0].GetField() != field {
			t.Errorf("a %s JSON cannot hold: %v, want INVALID_ARGUMENT naming %s", field, err, field)
		}
	}
	if hb, err := heartbeatFromProto(&luciusv1.HeartbeatRequest{}); err != nil || hb.Progress != nil {
		t.Errorf("a heartbeat without progress: %+v %v, want no progress", hb, err)
	}

	saved := time.Date(2026, 11, 3, 10, 0, 0, 5, time.UTC)
	req := &luciusv1.RecordCheckpointRequest{JobId: "j", StepId: "s", AttemptNo: 2, LeaseId: "l", CheckpointName: "n", Uri: "file:///c",
		SizeBytes: 7, Sha256: "ab", SaveTime: timestamppb.New(saved), WorkerId: "w", CorrelationId: "c"}
	if k := callbackKey(req); k != (engine.CallbackKey{JobID: "j", StepID: "s", AttemptNo: 2, LeaseID: "l", CorrelationID: "c", WorkerID: "w"}) {
		t.Errorf("key %+v", k)
	}
	if c := checkpointFromProto(req); c != (engine.Checkpoint{Name: "n", URI: "file:///c", SizeBytes: 7, SHA256: "ab", SavedAt: saved}) {
		t.Errorf("checkpoint %+v", c)
	}
}

func compact(b []byte) []byte {
	if b == nil {
		return nil
	}
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c != ' ' && c != '\n' {
			out = append(out, c)
		}
	}
	return out
}
