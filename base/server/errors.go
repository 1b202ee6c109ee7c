package server

import (
	"fmt"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the ErrorInfo domain of every Lucius error (AIP-193).
const ErrorDomain = "lucius"

// Reasons of ErrorInfo that clients can switch on.
const (
	ReasonInvalidArgument      = "INVALID_ARGUMENT"
	ReasonUnknownRequestType   = "UNKNOWN_REQUEST_TYPE"
	ReasonUnsupportedSchema    = "UNSUPPORTED_SCHEMA_VERSION"
	ReasonInvalidPayload       = "INVALID_PAYLOAD"
	ReasonInvalidRef           = "INVALID_REF"
	ReasonBurstWithoutDocID    = "BURST_REQUIRES_DOC_ID"
	ReasonBurstForbidden       = "BURST_FORBIDDEN"
	ReasonIdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED"
	ReasonJobNotFound          = "JOB_NOT_FOUND"
	ReasonStepNotFound         = "STEP_NOT_FOUND"
	ReasonDeadLetterNotFound   = "DEAD_LETTER_NOT_FOUND"
	// ReasonDirectiveNotFound: CallbackService.GetDirective found no detached
	// directive for the attempt (sent whole, or another lease).
	ReasonDirectiveNotFound = "DIRECTIVE_NOT_FOUND"
	// Assets (AssetService, and commands naming an asset).
	ReasonAssetNotFound        = "ASSET_NOT_FOUND"
	ReasonAssetDeleted         = "ASSET_DELETED"
	ReasonRevisionNotSucceeded = "REVISION_NOT_SUCCEEDED"
	ReasonModeForbidden        = "MODE_FORBIDDEN"
	ReasonTenantLimit          = "TENANT_LIMIT_REACHED"
	ReasonLaneLimit            = "LANE_LIMIT_REACHED"
	ReasonGlobalLimit          = "GLOBAL_LIMIT_REACHED"
	ReasonConfigRevision       = "CONFIG_REVISION_MISMATCH"
	ReasonTenantConfigNotFound = "TENANT_CONFIG_NOT_FOUND"
	ReasonJobNotReplayable     = "JOB_NOT_REPLAYABLE"
	ReasonInvalidPageToken     = "INVALID_PAGE_TOKEN"
	// ReasonWorkPaused: an operator paused the work a command asks for, refusing submits.
	ReasonWorkPaused = "WORK_PAUSED"
	// ReasonPauseNotFound: a resume names nothing paused.
	ReasonPauseNotFound = "PAUSE_NOT_FOUND"
	// ReasonWatchBehind: a WatchJob stream fell too far behind and was ended; resume it.
	ReasonWatchBehind = "WATCH_BEHIND"
	// ReasonServiceNotServed: a worker announced a service its identity does not serve.
	ReasonServiceNotServed = "SERVICE_NOT_SERVED"
	// ReasonHandlerOwnedByAnotherService: a worker announced a handler another service runs.
	ReasonHandlerOwnedByAnotherService = "HANDLER_OWNED_BY_ANOTHER_SERVICE"
	// ReasonCSRFTokenInvalid: a change sent with a console session cookie
	// lacks the X-CSRF-Token header matching its session.
	ReasonCSRFTokenInvalid = "CSRF_TOKEN_INVALID"
	// ReasonSessionNotAllowed: a console session asked for what only the
	// principal's own token may do (mint a login ticket).
	ReasonSessionNotAllowed = "SESSION_NOT_ALLOWED"
	ReasonUnavailable       = "UNAVAILABLE"
	ReasonInternal          = "INTERNAL"
)

// Violation is one invalid field, with the reason code of what is wrong.
type Violation struct {
	Field       string
	Description string
	Reason      string
}

// Error builds a status with an ErrorInfo reason (and metadata pairs k1, v1, ...).
func Error(code codes.Code, reason, msg string, metadata ...string) *status.Status {
	info := &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: map[string]string{}}
	for i := 0; i+1 < len(metadata); i += 2 {
		info.Metadata[metadata[i]] = metadata[i+1]
	}
	st, err := status.New(code, msg).WithDetails(info)
	if err != nil {
		return status.New(code, msg)
	}
	return st
}

// ResourceExhausted builds a RESOURCE_EXHAUSTED status (HTTP 429) with an
// ErrorInfo reason and a RetryInfo saying when to try again (REST clients get
// it as Retry-After).
func ResourceExhausted(reason, msg string, retryAfter time.Duration, metadata ...string) *status.Status {
	st := Error(codes.ResourceExhausted, reason, msg, metadata...)
	if withRetry, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)}); err == nil {
		return withRetry
	}
	return st
}

// InvalidArgument builds an INVALID_ARGUMENT status (HTTP 400) with field
// violations. The ErrorInfo reason is the first violation's (or
// INVALID_ARGUMENT); the message names the first violation.
func InvalidArgument(violations ...Violation) *status.Status {
	reason, msg := ReasonInvalidArgument, "invalid request"
	if len(violations) > 0 {
		if violations[0].Reason != "" {
			reason = violations[0].Reason
		}
		msg = "invalid request: " + violations[0].Field + ": " + violations[0].Description
		if len(violations) > 1 {
			msg += fmt.Sprintf(" (and %d more)", len(violations)-1)
		}
	}
	br := &errdetails.BadRequest{}
	for _, v := range violations {
		r := v.Reason
		if r == "" {
			r = ReasonInvalidArgument
		}
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: v.Field, Description: v.Description, Reason: r})
	}
	info := &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}
	st, err := status.New(codes.InvalidArgument, msg).WithDetails(info, br)
	if err != nil {
		return status.New(codes.InvalidArgument, msg)
	}
	return st
}

// ValidationStatus turns protovalidate's violations into INVALID_ARGUMENT.
func ValidationStatus(err *protovalidate.ValidationError) *status.Status {
	var vs []Violation
	for _, v := range err.Violations {
		field := protovalidate.FieldPathString(v.Proto.GetField())
		if field == "" {
			field = protovalidate.FieldPathString(v.Proto.GetRule())
		}
		vs = append(vs, Violation{Field: field, Description: v.Proto.GetMessage(), Reason: ReasonInvalidArgument})
	}
	return InvalidArgument(vs...)
}
