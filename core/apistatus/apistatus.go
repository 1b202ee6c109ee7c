// Package apistatus maps the control plane's domain errors to the gRPC
// status and ErrorInfo reason an API answers, in one place for every
// service (AIP-193): the gateway's APIs and the orchestrator's callbacks
// answer a missing job, a stale configuration revision or an unavailable
// ledger alike. Refusals that need a request to word them (a deleted asset,
// a job that cannot be replayed) stay beside their handler.
package apistatus

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"google.golang.org/grpc/codes"

	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/runbook"
)

// NotFound is what a NOT_FOUND answer names: its reason, message and
// ErrorInfo metadata pairs (k1, v1, ...).
type NotFound struct {
	Reason   luciusv1.ErrorReason
	Message  string
	Metadata []string
}

// Call describes the call an error failed, for Error: what its NOT_FOUND
// answers name, and the words of its other answers and of its log line.
type Call struct {
	// NotFound answers a store's ErrNotFound (ledger, config, runbook). Nil:
	// a missing row is no caller's fault and falls through to UNAVAILABLE.
	NotFound *NotFound
	// UnknownStep answers engine.ErrUnknownStep (a callback names a step its
	// job lacks); nil falls through to UNAVAILABLE.
	UnknownStep *NotFound
	// Cancelled is the message of a cancelled or timed-out call's answer
	// (default DefaultCancelled).
	Cancelled string
	// Unavailable is the message of the UNAVAILABLE answer to anything
	// else, e.g. "the ledger is unavailable; retry".
	Unavailable string
	// Log and LogAttrs are the message and attributes of the error line an
	// UNAVAILABLE answer logs, e.g. "get job", telemetry.JobID(id).
	Log      string
	LogAttrs []any
}

// DefaultCancelled is a cancelled or timed-out call's message when Call
// gives none.
const DefaultCancelled = "request cancelled or timed out"

// Error is the API status of err, a failure of the call c describes:
//
//   - a store's ErrNotFound (ledger, config, runbook): NOT_FOUND as
//     c.NotFound names it;
//   - engine.ErrUnknownStep: NOT_FOUND as c.UnknownStep names it;
//   - config.ErrRevisionMismatch: ABORTED CONFIG_REVISION_MISMATCH;
//   - runbook.ErrVersionExists: ALREADY_EXISTS RUNBOOK_VERSION_EXISTS;
//   - runbook.ErrInvalidMembers: INVALID_ARGUMENT INVALID_MEMBERS, a field
//     violation per refused row;
//   - a cancelled or timed-out call: DEADLINE_EXCEEDED UNAVAILABLE;
//   - anything else (and a NOT_FOUND c does not name): UNAVAILABLE, logged
//     on log as c.Log with c.LogAttrs and the error.
func Error(ctx context.Context, log *slog.Logger, err error, c Call) error {
	switch {
	case c.NotFound != nil && (errors.Is(err, ledger.ErrNotFound) || errors.Is(err, config.ErrNotFound) || errors.Is(err, runbook.ErrNotFound)):
		return c.NotFound.err()
	case c.UnknownStep != nil && errors.Is(err, engine.ErrUnknownStep):
		return c.UnknownStep.err()
	case errors.Is(err, config.ErrRevisionMismatch):
		return server.Error(codes.Aborted, luciusv1.ErrorReason_ERROR_REASON_CONFIG_REVISION_MISMATCH, err.Error()+"; read it again and retry").Err()
	case errors.Is(err, runbook.ErrVersionExists):
		return server.Error(codes.AlreadyExists, luciusv1.ErrorReason_ERROR_REASON_RUNBOOK_VERSION_EXISTS,
			"this runbook version is stored with different content; versions are immutable, apply the next version").Err()
	case errors.Is(err, runbook.ErrInvalidMembers):
		return invalidMembers(err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		msg := c.Cancelled
		if msg == "" {
			msg = DefaultCancelled
		}
		return server.Error(codes.DeadlineExceeded, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE, msg).Err()
	}
	log.ErrorContext(ctx, c.Log, append(slices.Clip(c.LogAttrs), telemetry.Err(err))...)
	return server.Error(codes.Unavailable, luciusv1.ErrorReason_ERROR_REASON_UNAVAILABLE, c.Unavailable).Err()
}

func (n *NotFound) err() error {
	return server.Error(codes.NotFound, n.Reason, n.Message, n.Metadata...).Err()
}
