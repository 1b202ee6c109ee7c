package main

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes: what a script needs to tell apart.
const (
	exitOK          = 0 // done; with --wait, the job SUCCEEDED
	exitError       = 1 // the server refused or failed the call (its status is printed)
	exitUsage       = 2 // bad flags or arguments, or a bad configuration file
	exitUnreachable = 3 // no answer from the server (down, wrong address, timed out)
	exitFailed      = 4 // with --wait: the job ended FAILED_FINAL
	exitCancelled   = 5 // with --wait: the job ended CANCELLED
	exitNotFound    = 6 // the job, dead letter, workflow… does not exist (or is another tenant's)
	exitDenied      = 7 // not authenticated, or not allowed
	// exitInterrupted is a command stopped by Ctrl-C (or SIGTERM) before it
	// finished, as a shell reports a process killed by SIGINT; a tenant
	// watch, which runs until stopped, ends with 0 instead.
	exitInterrupted = 130
)

// codedError carries an exit code with an error.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &codedError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// exitCode is the code an error ends the command with.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ce *codedError
	if errors.As(err, &ce) {
		return ce.code
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return exitUnreachable
		case codes.NotFound:
			return exitNotFound
		case codes.Unauthenticated, codes.PermissionDenied:
			return exitDenied
		case codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists, codes.ResourceExhausted, codes.OutOfRange:
			return exitError
		}
	}
	return exitError
}
