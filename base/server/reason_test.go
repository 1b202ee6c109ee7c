package server

import (
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

func TestEveryReasonRoundTripsThroughItsWireString(t *testing.T) {
	t.Parallel()
	for n, name := range luciusv1.ErrorReason_name {
		r := luciusv1.ErrorReason(n)
		if r == luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			continue
		}
		wire := Reason(r)
		if wire == name || wire == "" {
			t.Errorf("%s: wire string %q keeps the prefix or is empty", name, wire)
		}
		if got := ParseReason(wire); got != r {
			t.Errorf("ParseReason(%q) = %v, want %v", wire, got, r)
		}
		if got := ReasonOf(Error(codes.Internal, r, "x").Err()); got != r {
			t.Errorf("ReasonOf(Error(%v)) = %v", r, got)
		}
	}
}

// The wire strings are a contract: clients compared them before the enum.
func TestReasonKeepsTheWireStringsClientsKnow(t *testing.T) {
	t.Parallel()
	for r, want := range map[luciusv1.ErrorReason]string{
		luciusv1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND:              "JOB_NOT_FOUND",
		luciusv1.ErrorReason_ERROR_REASON_CALLBACK_TOKEN_INVALID:     "CALLBACK_TOKEN_INVALID",
		luciusv1.ErrorReason_ERROR_REASON_REF_CONTAINER_NOT_ALLOWED:  "REF_CONTAINER_NOT_ALLOWED",
		luciusv1.ErrorReason_ERROR_REASON_UNSUPPORTED_SCHEMA_VERSION: "UNSUPPORTED_SCHEMA_VERSION",
		luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT:           "INVALID_ARGUMENT",
	} {
		if got := Reason(r); got != want {
			t.Errorf("Reason(%v) = %q, want %q", r, got, want)
		}
	}
}

func TestReasonOfUnknownOrForeignErrorsIsUnspecified(t *testing.T) {
	t.Parallel()
	for name, err := range map[string]error{
		"plain error":     errors.New("boom"),
		"no details":      status.Error(codes.NotFound, "x"),
		"unknown reason":  errorWithInfo("SOMETHING_NEW", ErrorDomain),
		"other domain":    errorWithInfo("JOB_NOT_FOUND", "example.com"),
		"prefixed string": errorWithInfo("ERROR_REASON_JOB_NOT_FOUND", ErrorDomain),
		"nil":             nil,
	} {
		if got := ReasonOf(err); got != luciusv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			t.Errorf("%s: ReasonOf = %v, want UNSPECIFIED", name, got)
		}
	}
}

func errorWithInfo(reason, domain string) error {
	st, err := status.New(codes.NotFound, "x").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: domain})
	if err != nil {
		panic(err)
	}
	return st.Err()
}
