package apistatus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

func TestErrorMapsEachDomainErrorToOneCodeReasonAndMetadata(t *testing.T) {
	t.Parallel()
	job := &NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND, Message: "job j not found", Metadata: []string{"job_id", "j"}}
	step := &NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_STEP_NOT_FOUND, Message: "job j has no step s",
		Metadata: []string{"job_id", "j", "step_id", "s"}}
	gateway := Call{NotFound: job, Unavailable: "the ledger is unavailable; retry", Log: "get job", LogAttrs: []any{telemetry.JobID("j")}}
	callback := Call{NotFound: job, UnknownStep: step, Cancelled: "callback cancelled or timed out; retry",
		Unavailable: "the callback could not be applied; retry", Log: "apply callback"}
	bare := Call{Unavailable: "the ledger is unavailable; retry", Log: "list workers"}
	unavailable := luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE
	tests := []struct {
		name     string
		err      error
		call     Call
		code     codes.Code
		reason   luciusv1.ErrorReason
		msg      string
		metadata map[string]string
		logged   bool
	}{
		{"ledger not found", fmt.Errorf("get: %w", ledger.ErrNotFound), gateway, codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND,
			"job j not found", map[string]string{"job_id": "j"}, false},
		{"config not found", config.ErrNotFound, gateway, codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND,
			"job j not found", map[string]string{"job_id": "j"}, false},
		{"runbook not found", runbook.ErrNotFound, gateway, codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND,
			"job j not found", map[string]string{"job_id": "j"}, false},
		{"not found where none is expected", ledger.ErrNotFound, bare, codes.Unavailable, unavailable,
			"the ledger is unavailable; retry", map[string]string{}, true},
		{"unknown step", fmt.Errorf("job j has no step: %w", engine.ErrUnknownStep), callback, codes.NotFound,
			luciusv1.ErrorReason_ERROR_REASON_STEP_NOT_FOUND, "job j has no step s", map[string]string{"job_id": "j", "step_id": "s"}, false},
		{"unknown step where none is expected", engine.ErrUnknownStep, gateway, codes.Unavailable, unavailable,
			"the ledger is unavailable; retry", map[string]string{}, true},
		{"revision mismatch", config.ErrRevisionMismatch, bare, codes.Aborted, luciusv1.ErrorReason_ERROR_REASON_CONFIG_REVISION_MISMATCH,
			config.ErrRevisionMismatch.Error() + "; read it again and retry", map[string]string{}, false},
		{"runbook version exists", runbook.ErrVersionExists, bare, codes.AlreadyExists, luciusv1.ErrorReason_ERROR_REASON_RUNBOOK_VERSION_EXISTS,
			"this runbook version is stored with different content; versions are immutable, apply the next version", map[string]string{}, false},
		{"invalid members", fmt.Errorf("%w:\nrow 1: batch_time is missing", runbook.ErrInvalidMembers), bare, codes.InvalidArgument,
			luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS, "invalid request: members[1].batch_time: batch_time is missing", nil, false},
		{"cancelled", context.Canceled, gateway, codes.DeadlineExceeded, unavailable, DefaultCancelled, map[string]string{}, false},
		{"timed out", fmt.Errorf("read: %w", context.DeadlineExceeded), bare, codes.DeadlineExceeded, unavailable, DefaultCancelled,
			map[string]string{}, false},
		{"callback cancelled", context.Canceled, callback, codes.DeadlineExceeded, unavailable, "callback cancelled or timed out; retry",
			map[string]string{}, false},
		{"anything else", errors.New("connection refused"), gateway, codes.Unavailable, unavailable, "the ledger is unavailable; retry",
			map[string]string{}, true},
		{"anything else in a callback", errors.New("connection refused"), callback, codes.Unavailable, unavailable,
			"the callback could not be applied; retry", map[string]string{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			err := Error(context.Background(), slog.New(slog.NewJSONHandler(&logs, nil)), tt.err, tt.call)
			st := status.Convert(err)
			if st.Code() != tt.code || server.ReasonOf(err) != tt.reason || st.Message() != tt.msg {
				t.Fatalf("%v: %v %v %q, want %v %v %q", tt.err, st.Code(), server.ReasonOf(err), st.Message(), tt.code, tt.reason, tt.msg)
			}
			if md := metadata(st); !maps.Equal(md, tt.metadata) {
				t.Errorf("metadata %v, want %v", md, tt.metadata)
			}
			if logged := logs.Len() > 0; logged != tt.logged {
				t.Fatalf("logged %t (%q), want %t", logged, logs.String(), tt.logged)
			}
			if !tt.logged {
				return
			}
			var line map[string]any
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			if line["level"] != "ERROR" || line["msg"] != tt.call.Log || line[telemetry.KeyError] != tt.err.Error() {
				t.Errorf("log line %v, want an ERROR %q with the error", line, tt.call.Log)
			}
			if tt.call.Log == "get job" && line[telemetry.KeyJobID] != "j" {
				t.Errorf("log line %v lacks the call's attributes", line)
			}
		})
	}
}

// The attributes a Call logs with are its own: logging them again adds
// nothing to the caller's slice.
func TestErrorLeavesTheCallsLogAttributesAlone(t *testing.T) {
	t.Parallel()
	attrs := make([]any, 1, 4)
	attrs[0] = telemetry.JobID("j")
	log := slog.New(slog.DiscardHandler)
	for range 2 {
		_ = Error(context.Background(), log, errors.New("down"), Call{Log: "x", LogAttrs: attrs})
	}
	if len(attrs) != 1 || attrs[:2][1] != nil {
		t.Fatalf("the call's attributes changed: %v", attrs[:cap(attrs)])
	}
}

// metadata is the ErrorInfo metadata of st; nil when it has no ErrorInfo
// or the ErrorInfo none.
func metadata(st *status.Status) map[string]string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetMetadata()
		}
	}
	return nil
}
