package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// attach fetches the whole directive of a detached bus message (one too large
// for the bus: Directive.detached) with CallbackService.GetDirective. It
// settles the message itself and reports stop when the attempt cannot run:
// the orchestrator does not know it (complete), refuses the request
// (dead-letter), or does not answer in time (abandon, for redelivery).
func (r *Runner) attach(ctx context.Context, rcv bus.Receiver, m *bus.Received, keeper *lockKeeper,
	stub *luciusv1.Directive, log *slog.Logger) (*luciusv1.Directive, bool) {
	key := KeyOf(stub)
	forget := func() { r.forget(ctx, key, log) }
	client, ok := r.callbackClient(ctx, rcv, m, keeper, stub, log)
	if !ok {
		return nil, true
	}
	req := &luciusv1.GetDirectiveRequest{JobId: key.JobID, StepId: key.StepID, AttemptNo: int32(key.AttemptNo),
		LeaseId: key.LeaseID, CallbackToken: stub.GetCallbackToken()}
	var whole *luciusv1.Directive
	verdict, err := callRetrying(ctx, r.cfg.Backoff, r.cfg.CallTimeout, time.Now().Add(r.cfg.AckRetryTimeout),
		func(n int, err error, wait time.Duration) {
			log.WarnContext(ctx, "GetDirective failed; retrying", "retry", n, "retry_in", wait, telemetry.Err(err))
		},
		func(ctx context.Context) error {
			resp, err := client.GetDirective(ctx, req)
			whole = resp.GetDirective()
			return err
		})
	if err == nil {
		err = sameAttempt(stub, whole)
	}
	switch {
	case ctx.Err() != nil || errors.Is(err, errGaveUp):
		r.count(ctx, "interrupted")
		log.WarnContext(ctx, "detached directive not fetched; releasing the message for redelivery", telemetry.Err(err))
		forget()
		r.abandon(ctx, rcv, m, keeper, log)
		return nil, true
	case verdict == verdictNotFound:
		r.count(ctx, "stale")
		log.WarnContext(ctx, "orchestrator has no detached directive for this attempt; completing without executing", telemetry.Err(err))
		forget()
		r.complete(ctx, rcv, m, keeper, log)
		return nil, true
	case err != nil:
		r.count(ctx, "rejected")
		log.ErrorContext(ctx, "detached directive refused; dead-lettering", telemetry.Err(err))
		forget()
		r.deadLetter(ctx, rcv, m, keeper, log, DeadLetterCallbackRejected, "GetDirective: "+err.Error())
		return nil, true
	}
	log.DebugContext(ctx, "detached directive fetched", "upstream_artifacts", len(whole.GetUpstreamArtifacts()))
	return whole, false
}

// sameAttempt checks that a fetched directive is the stub's attempt and valid.
func sameAttempt(stub, whole *luciusv1.Directive) error {
	if err := ValidateDirective(whole); err != nil {
		return err
	}
	if KeyOf(whole) != KeyOf(stub) || whole.GetService() != stub.GetService() {
		return fmt.Errorf("%w: fetched directive is %v, the message's %v", ErrInvalidDirective, KeyOf(whole), KeyOf(stub))
	}
	return nil
}
