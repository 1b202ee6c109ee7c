package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/apistatus"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

func TestAPIErrorMapsEachDomainErrorToOneCodeAndReason(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	job := &apistatus.NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND, Message: "job j not found", Metadata: []string{"job_id", "j"}}
	tests := []struct {
		name    string
		err     error
		missing *apistatus.NotFound
		code    codes.Code
		reason  luciusv1.ErrorReason
	}{
		{"ledger not found", fmt.Errorf("get: %w", ledger.ErrNotFound), job, codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND},
		{"config not found", config.ErrNotFound, job, codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND},
		{"runbook not found", runbook.ErrNotFound, job, codes.NotFound, luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND},
		{"not found where none is expected", ledger.ErrNotFound, nil, codes.Unavailable, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE},
		{"revision mismatch", config.ErrRevisionMismatch, nil, codes.Aborted, luciusv1.ErrorReason_ERROR_REASON_CONFIG_REVISION_MISMATCH},
		{"runbook version exists", runbook.ErrVersionExists, nil, codes.AlreadyExists, luciusv1.ErrorReason_ERROR_REASON_RUNBOOK_VERSION_EXISTS},
		{"invalid members", fmt.Errorf("%w: row 1: bad", runbook.ErrInvalidMembers), nil, codes.InvalidArgument, luciusv1.ErrorReason_ERROR_REASON_INVALID_MEMBERS},
		{"cancelled", context.Canceled, job, codes.DeadlineExceeded, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE},
		{"timed out", context.DeadlineExceeded, nil, codes.DeadlineExceeded, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE},
		{"anything else", fmt.Errorf("connection refused"), job, codes.Unavailable, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := apiError(context.Background(), log, "ledger", "test", tt.err, tt.missing)
			if status.Code(err) != tt.code || server.ReasonOf(err) != tt.reason {
				t.Fatalf("%v: %v (%v), want %v %v", tt.err, status.Code(err), server.ReasonOf(err), tt.code, tt.reason)
			}
		})
	}
}
