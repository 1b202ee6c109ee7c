// Package faults injects failures into a worker's attempts for chaos tests:
// a test support Middleware, never part of the runtime. Inject reads the
// directive payload's "fault" object and, when its step_type is the
// attempt's, fails the attempt or stalls it before the handler runs:
//
//	{"fault": {"step_type": "OCR", "kind": "retryable", "attempts": 2}}  fail RETRYABLE on attempts 1 and 2
//	{"fault": {"step_type": "OCR", "kind": "permanent"}}                 fail NON_RETRYABLE
//	{"fault": {"step_type": "OCR", "kind": "sleep", "ms": 5000}}         sleep 5s, then execute
//
// The example worker (services/worker-skeleton) installs it when
// LUCIUS_WORKER_FAULTS=true, which the chaos run sets:
//
//	worker.Run(ctx, worker.WithMiddleware(faults.Inject))
package faults

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// CodeInjectedFault prefixes the reason of an injected failure, so a chaos test (and anyone reading the job) can tell it
// from a real one.
const CodeInjectedFault = "INJECTED_FAULT"

// Fault kinds of the payload's "fault" object.
const (
	faultRetryable = "retryable"
	faultPermanent = "permanent"
	faultSleep     = "sleep"
)

// maxFaultSleep bounds an injected sleep (one day): a typo must not park a
// worker slot for years.
const maxFaultSleep = 24 * time.Hour

// fault is a failure to inject into an attempt, read from the directive
// payload's "fault" object.
type fault struct {
	// kind is faultRetryable, faultPermanent or faultSleep.
	kind string
	// attempts limits the fault to attempt_no <= attempts; 0 means every
	// attempt (required, >= 1, for faultRetryable).
	attempts int
	// sleep is how long faultSleep waits before executing.
	sleep time.Duration
}

// parseFault reads the fault a directive's payload asks for. It returns ok
// false (and no error) when the payload has no "fault" or its step_type is
// not stepType, and an error for a fault it cannot apply (not an object, an
// unknown kind, a bad attempts or ms): such a fault is ignored.
//
//	{"fault": {"step_type": "OCR", "kind": "retryable", "attempts": 2}}  fail RETRYABLE on attempts 1 and 2
//	{"fault": {"step_type": "OCR", "kind": "permanent"}}                 fail NON_RETRYABLE
//	{"fault": {"step_type": "OCR", "kind": "sleep", "ms": 5000}}         sleep 5s, then execute
//
// permanent and sleep also take an optional "attempts" limit.
func parseFault(payload *structpb.Struct, stepType string) (f fault, ok bool, err error) {
	v, present := payload.GetFields()["fault"]
	if !present || v.AsInterface() == nil {
		return fault{}, false, nil
	}
	obj := v.GetStructValue()
	if obj == nil {
		return fault{}, false, fmt.Errorf("payload.fault: want an object, have %v", v.AsInterface())
	}
	fields := obj.GetFields()
	target, _ := fields["step_type"].AsInterface().(string)
	if target != stepType {
		return fault{}, false, nil
	}
	f.kind, _ = fields["kind"].AsInterface().(string)
	if f.attempts, err = faultInt(fields, "attempts", 1, math.MaxInt32); err != nil {
		return fault{}, false, err
	}
	switch f.kind {
	case faultRetryable:
		if f.attempts == 0 {
			return fault{}, false, errors.New("payload.fault: kind retryable needs attempts, an integer >= 1")
		}
	case faultPermanent:
	case faultSleep:
		if _, set := fields["ms"]; !set {
			return fault{}, false, errors.New("payload.fault: kind sleep needs ms, an integer >= 0")
		}
		ms, err := faultInt(fields, "ms", 0, int(maxFaultSleep/time.Millisecond))
		if err != nil {
			return fault{}, false, err
		}
		f.sleep = time.Duration(ms) * time.Millisecond
	default:
		return fault{}, false, fmt.Errorf("payload.fault: unknown kind %q (want %s, %s or %s)",
			blob.Clip(f.kind), faultRetryable, faultPermanent, faultSleep)
	}
	return f, true, nil
}

// faultInt reads an optional integer field of the fault object within
// [lo, hi]; 0 when absent.
func faultInt(fields map[string]*structpb.Value, name string, lo, hi int) (int, error) {
	v, present := fields[name]
	if !present {
		return 0, nil
	}
	n, isNum := v.AsInterface().(float64)
	if !isNum || n != math.Trunc(n) || n < float64(lo) || n > float64(hi) {
		return 0, fmt.Errorf("payload.fault.%s: want an integer in [%d, %d], have %v", name, lo, hi, v.AsInterface())
	}
	return int(n), nil
}

// applies reports whether f applies to attempt attemptNo.
func (f fault) applies(attemptNo int) bool {
	return f.attempts == 0 || attemptNo <= f.attempts
}

// inject applies f to attempt attemptNo: it returns the injected failure, or
// sleeps (until ctx ends at the latest) and returns nil. The caller checks
// ctx afterwards.
func (f fault) inject(ctx context.Context, attemptNo int) error {
	if !f.applies(attemptNo) {
		return nil
	}
	switch f.kind {
	case faultRetryable:
		return worker.RetryableCode(CodeInjectedFault,
			fmt.Errorf("injected retryable failure on attempt %d (fault.attempts = %d)", attemptNo, f.attempts))
	case faultPermanent:
		return worker.PermanentCode(CodeInjectedFault, fmt.Errorf("injected permanent failure on attempt %d", attemptNo))
	case faultSleep:
		loop.Sleep(ctx, f.sleep)
	}
	return nil
}

// Inject is the Middleware that applies the fault the directive's payload
// asks for before next runs: it returns the injected failure, or sleeps (until
// the attempt's context ends) and runs next. A fault it cannot apply is
// ignored with a warning.
func Inject(next worker.Executor) worker.Executor {
	return worker.HandlerFunc(func(ctx context.Context, task *worker.Task) (worker.Result, error) {
		d := task.Directive
		log := task.Logger()
		f, ok, err := parseFault(d.GetPayload(), d.GetStepType())
		if err != nil {
			log.WarnContext(ctx, "ignoring the payload's fault", telemetry.Err(err))
			return next.Execute(ctx, task)
		}
		attemptNo := int(d.GetAttemptNo())
		if !ok || !f.applies(attemptNo) {
			return next.Execute(ctx, task)
		}
		log.WarnContext(ctx, "injecting a fault", "fault_kind", f.kind, "fault_attempts", f.attempts, "fault_sleep", f.sleep)
		if err := f.inject(ctx, attemptNo); err != nil {
			return worker.Result{}, err
		}
		if err := context.Cause(ctx); err != nil {
			return worker.Result{}, err // shut down or lease lost while sleeping
		}
		return next.Execute(ctx, task)
	})
}
