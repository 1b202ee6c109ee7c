package orchestrator

import (
	"encoding/json"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// The engine speaks in its own types; these turn the worker callbacks' wire
// requests into them, here at the service's edge.

// callbackRequest is what every worker callback request carries: the
// attempt it speaks for and the worker that calls.
type callbackRequest interface {
	GetJobId() string
	GetStepId() string
	GetAttemptNo() int32
	GetLeaseId() string
	GetCorrelationId() string
	GetWorkerId() string
}

func callbackKey(req callbackRequest) engine.CallbackKey {
	return engine.CallbackKey{JobID: req.GetJobId(), StepID: req.GetStepId(), AttemptNo: int(req.GetAttemptNo()),
		LeaseID: req.GetLeaseId(), CorrelationID: req.GetCorrelationId(), WorkerID: req.GetWorkerId()}
}

var resultStatuses = map[luciusv1.ResultStatus]engine.ResultStatus{
	luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED: engine.ResultSucceeded,
	luciusv1.ResultStatus_RESULT_STATUS_FAILED:    engine.ResultFailed,
	luciusv1.ResultStatus_RESULT_STATUS_POLLING:   engine.ResultPolling,
}

// resultFromProto is a RESULT's report. Its output fails to convert only when
// it holds what JSON cannot (a NaN or infinite number): INVALID_ARGUMENT,
// which a worker does not retry.
func resultFromProto(req *luciusv1.ResultRequest) (engine.Result, error) {
	output, err := object("output", req.GetOutput())
	if err != nil {
		return engine.Result{}, err
	}
	return engine.Result{Status: resultStatuses[req.GetStatus()],
		Retryable: req.GetFailureClass() == luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE,
		Reason:    req.GetReason(), Output: output, Artifacts: artifactsFromProto(req.GetArtifacts())}, nil
}

func heartbeatFromProto(req *luciusv1.HeartbeatRequest) (engine.Heartbeat, error) {
	progress, err := object("progress", req.GetProgress())
	return engine.Heartbeat{Progress: progress}, err
}

func checkpointFromProto(req *luciusv1.RecordCheckpointRequest) engine.Checkpoint {
	c := engine.Checkpoint{Name: req.GetCheckpointName(), URI: req.GetUri(), SizeBytes: req.GetSizeBytes(), SHA256: req.GetSha256()}
	if t := req.GetSaveTime(); t != nil {
		c.SavedAt = t.AsTime()
	}
	return c
}

// object is s, the request's field, as JSON; nil for a nil s.
func object(field string, s *structpb.Struct) (json.RawMessage, error) {
	if s == nil {
		return nil, nil
	}
	b, err := protojson.Marshal(s)
	if err != nil {
		return nil, server.InvalidArgument(server.Violation{Field: field,
			Description: "holds a value JSON cannot carry (a NaN or infinite number): " + err.Error()}).Err()
	}
	return b, nil
}

func artifactsFromProto(refs []*luciusv1.ArtifactRef) []ledger.Artifact {
	out := make([]ledger.Artifact, len(refs))
	for i, r := range refs {
		out[i] = ledger.Artifact{Name: r.GetName(), URI: r.GetUri(), MediaType: r.GetMediaType(),
			SizeBytes: r.GetSizeBytes(), SHA256: r.GetSha256()}
	}
	return out
}
