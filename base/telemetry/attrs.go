package telemetry

import "log/slog"

// Log attribute keys: one vocabulary across every service, so a job can be
// followed through all of their logs.
const (
	KeyService       = "service"
	KeyInstance      = "instance"
	KeyJobID         = "job_id"
	KeyStepID        = "step_id"
	KeyAttemptNo     = "attempt_no"
	KeyLeaseID       = "lease_id"
	KeyTenantID      = "tenant_id"
	KeyRequestType   = "request_type"
	KeyCorrelationID = "correlation_id"
	KeyOwnerID       = "owner_id"
	KeyOwnerEpoch    = "owner_epoch"
	KeyTopic         = "topic"
	KeyMessageID     = "message_id"
	KeyTraceID       = "trace_id"
	KeySpanID        = "span_id"
	KeyOutcome       = "outcome"
	KeyError         = "err"
)

// JobID is the job_id attribute.
func JobID(id string) slog.Attr { return slog.String(KeyJobID, id) }

// StepID is the step_id attribute.
func StepID(id string) slog.Attr { return slog.String(KeyStepID, id) }

// AttemptNo is the attempt_no attribute.
func AttemptNo(n int) slog.Attr { return slog.Int(KeyAttemptNo, n) }

// TenantID is the tenant_id attribute.
func TenantID(id string) slog.Attr { return slog.String(KeyTenantID, id) }

// Err is the err attribute.
func Err(err error) slog.Attr { return slog.Any(KeyError, err) }
