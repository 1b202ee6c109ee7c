package server

import (
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"

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

// Violation is one invalid field, with the reason code of what is wrong
// (UNSPECIFIED: INVALID_ARGUMENT).
type Violation struct {
	Field       string
	Description string
	Reason      luciusv1.ErrorReason
}

// Error builds a status with an ErrorInfo reason (and metadata pairs k1, v1, ...).
func Error(code codes.Code, reason luciusv1.ErrorReason, msg string, metadata ...string) *status.Status {
	info := &errdetails.ErrorInfo{Reason: Reason(reason), Domain: ErrorDomain, Metadata: map[string]string{}}
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
func ResourceExhausted(reason luciusv1.ErrorReason, msg string, retryAfter time.Duration, metadata ...string) *status.Status {
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
	reason, msg := luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, "invalid request"
	if len(violations) > 0 {
		if violations[0].Reason != luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
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
		if r == luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			r = luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT
		}
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: v.Field, Description: v.Description, Reason: Reason(r)})
	}
	info := &errdetails.ErrorInfo{Reason: Reason(reason), Domain: ErrorDomain}
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
		vs = append(vs, Violation{Field: field, Description: v.Proto.GetMessage(), Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT})
	}
	return InvalidArgument(vs...)
}
