package worker

import (
	"context"
	"errors"
	"fmt"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// Reason codes prefix the reason of a failed RESULT ("CODE: message"), so an
// operator or a dashboard can group failures without parsing free text.
// Reading and writing refs through a Task fails with these and package
// blob's codes (blob.CodeInvalidRef, blob.CodeRefHostNotAllowed,
// blob.CodeContainerNotFound, blob.CodeStorageUnavailable, ...), as an
// *Error classified by package blob.
const (
	// CodeInvalidInput: the input or the payload cannot be processed as given.
	CodeInvalidInput = blob.CodeInvalidInput
	// CodeInputNotFound: input_ref names nothing.
	CodeInputNotFound = blob.CodeInputNotFound
	// CodeUnsupportedRef: a reference uses a scheme this worker cannot read or write.
	CodeUnsupportedRef = blob.CodeUnsupportedRef
	// CodeRefOutsideFileRoots: a reference names a file outside the file
	// roots (Config.FileRoots) and the job's workspace, directly, through
	// "..", or through a symbolic link.
	CodeRefOutsideFileRoots = blob.CodeRefOutsideFileRoots
	// CodeUnknownHandler: the directive's step_type names a handler the
	// service's Handlers do not serve.
	CodeUnknownHandler = "UNKNOWN_HANDLER"
	// CodeInvalidResult: the executor produced a RESULT the contract rejects.
	CodeInvalidResult = "INVALID_RESULT"
	// CodeTimeout: the task ran longer than Config.TaskTimeout.
	CodeTimeout = "TIMEOUT"
	// CodePanic: the executor panicked.
	CodePanic = "PANIC"
	// CodeTransient: a failure worth another attempt.
	CodeTransient = "TRANSIENT"
	// CodePermanent: a failure that will happen again.
	CodePermanent = "PERMANENT"
	// CodeUnclassified: an error no one classified; treated as retryable.
	CodeUnclassified = "UNCLASSIFIED"
)

// maxReasonBytes is the contract's limit on ResultRequest.reason.
const maxReasonBytes = 4096

// Error is an error with a failure class and a reason code.
type Error struct {
	// Class is RETRYABLE or NON_RETRYABLE.
	Class luciusv1.FailureClass
	// Code is a short machine-readable reason, e.g. INVALID_INPUT.
	Code string
	Err  error
}

// Error returns the wrapped error's message; Classify prefixes the code.
func (e *Error) Error() string {
	if e.Err == nil {
		return e.Code
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// refError gives a failure of package blob the task API's error type,
// keeping its code and retryability (and the blob error in the chain).
func refError(err error) error {
	var be *blob.Error
	if !errors.As(err, &be) {
		return err
	}
	class := luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE
	if be.Retryable {
		class = luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE
	}
	return &Error{Class: class, Code: be.Code, Err: err}
}

// Permanent marks err as NON_RETRYABLE: another attempt would fail the same way
// (bad input, unsupported format, missing required payload). The step fails
// for good at once. Permanent(nil) is nil.
func Permanent(err error) error { return PermanentCode(CodePermanent, err) }

// PermanentCode is Permanent with a reason code such as CodeInvalidInput.
func PermanentCode(code string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Class: luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE, Code: code, Err: err}
}

// Permanentf formats a NON_RETRYABLE error with code CodeInvalidInput.
func Permanentf(format string, args ...any) error {
	return PermanentCode(CodeInvalidInput, fmt.Errorf(format, args...))
}

// Retryable marks err as RETRYABLE: a later attempt may succeed (a dependency
// was down, a quota was exhausted). The orchestrator retries the step after a
// backoff while attempts remain. Retryable(nil) is nil.
func Retryable(err error) error { return RetryableCode(CodeTransient, err) }

// RetryableCode is Retryable with a reason code.
func RetryableCode(code string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Class: luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE, Code: code, Err: err}
}

// IsPermanent reports whether Classify puts err in NON_RETRYABLE.
func IsPermanent(err error) bool {
	class, _ := Classify(err)
	return class == luciusv1.FailureClass_FAILURE_CLASS_NON_RETRYABLE
}

// Classify maps an executor's error to the RESULT's failure_class and reason.
// The outermost *Error in the chain decides. An unclassified error is
// RETRYABLE (code UNCLASSIFIED): the orchestrator caps attempts (3 by
// default), so wrongly retrying a deterministic failure costs at most two
// extra attempts, while wrongly failing a transient one loses the job.
// context.DeadlineExceeded counts as unclassified, hence retryable.
func Classify(err error) (luciusv1.FailureClass, string) {
	if err == nil {
		return luciusv1.FailureClass_FAILURE_CLASS_UNSPECIFIED, ""
	}
	var e *Error
	if errors.As(err, &e) && e.Class != luciusv1.FailureClass_FAILURE_CLASS_UNSPECIFIED {
		return e.Class, blob.TruncateUTF8(e.Code+": "+err.Error(), maxReasonBytes)
	}
	code := CodeUnclassified
	if errors.Is(err, context.DeadlineExceeded) {
		code = CodeTimeout
	}
	return luciusv1.FailureClass_FAILURE_CLASS_RETRYABLE, blob.TruncateUTF8(code+": "+err.Error(), maxReasonBytes)
}
