package gateway

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"

	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

// notFound describes what a NOT_FOUND answer names: its reason, message
// and ErrorInfo metadata pairs.
type notFound struct {
	reason   luciusv1.ErrorReason
	msg      string
	metadata []string
}

// apiError maps the stores' errors to API statuses (code and ErrorInfo
// reason), for every service of the gateway in this one place:
//
//   - a store's ErrNotFound (ledger, config, runbook): NOT_FOUND as missing
//     describes it; with missing nil a missing row is no caller's fault and
//     falls through to UNAVAILABLE;
//   - config.ErrRevisionMismatch: ABORTED CONFIG_REVISION_MISMATCH;
//   - runbook.ErrVersionExists: ALREADY_EXISTS RUNBOOK_VERSION_EXISTS;
//   - runbook.ErrInvalidMembers: INVALID_ARGUMENT INVALID_MEMBERS per row;
//   - a cancelled or timed-out call: DEADLINE_EXCEEDED UNAVAILABLE;
//   - anything else, logged as what: UNAVAILABLE ("the <store> is
//     unavailable; retry").
//
// Refusals that need the request to word them (a deleted asset, a job that
// cannot be replayed, nothing paused) stay beside their handler.
func apiError(ctx context.Context, log *slog.Logger, store, what string, err error, missing *notFound, attrs ...any) error {
	switch {
	case missing != nil && (errors.Is(err, ledger.ErrNotFound) || errors.Is(err, config.ErrNotFound) || errors.Is(err, runbook.ErrNotFound)):
		return server.Error(codes.NotFound, missing.reason, missing.msg, missing.metadata...).Err()
	case errors.Is(err, config.ErrRevisionMismatch):
		return server.Error(codes.Aborted, luciusv1.ErrorReason_ERROR_REASON_CONFIG_REVISION_MISMATCH, err.Error()+"; read it again and retry").Err()
	case errors.Is(err, runbook.ErrVersionExists):
		return server.Error(codes.AlreadyExists, luciusv1.ErrorReason_ERROR_REASON_RUNBOOK_VERSION_EXISTS,
			"this runbook version is stored with different content; versions are immutable, apply the next version").Err()
	case errors.Is(err, runbook.ErrInvalidMembers):
		return invalidMembers(err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return server.Error(codes.DeadlineExceeded, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE, "request cancelled or timed out").Err()
	}
	log.ErrorContext(ctx, what, append(attrs, telemetry.Err(err))...)
	return server.Error(codes.Unavailable, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE, "the "+store+" is unavailable; retry").Err()
}

// ledgerError answers a ledger failure that is no caller's fault: a
// cancelled or timed-out request, or an unavailable ledger (logged).
func ledgerError(ctx context.Context, log *slog.Logger, what string, err error, attrs ...any) error {
	return apiError(ctx, log, "ledger", what, err, nil, attrs...)
}
