package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/lucius-platform/lucius/base/telemetry"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// Bounds of the heartbeat interval (a third of the directive's lease_timeout).
const (
	// MinHeartbeatInterval keeps a very short lease from turning heartbeats
	// into a busy loop.
	MinHeartbeatInterval = time.Second
	// MaxHeartbeatInterval keeps a very long lease from going unrefreshed
	// (and the progress unreported) for hours.
	MaxHeartbeatInterval = 5 * time.Minute
)

// ErrLeaseLost is the cause (context.Cause) of an executor's context ended
// because a heartbeat was answered STALE_ATTEMPT, LEASE_MISMATCH,
// AFTER_TERMINAL or NOT_FOUND: another attempt owns the step, or the job is
// over. The attempt's work is discarded; no RESULT is sent.
var ErrLeaseLost = errors.New("worker: attempt lease lost")

// HeartbeatInterval is how often an executing attempt whose directive has
// lease_timeout leaseTimeout heartbeats: a third of the lease, so two
// heartbeats in a row may fail before it expires, bounded to
// [MinHeartbeatInterval, MaxHeartbeatInterval]. It is 0 (no heartbeats) when
// leaseTimeout is not positive: an orchestrator that sets no lease_timeout
// does not expect heartbeats.
func HeartbeatInterval(leaseTimeout time.Duration) time.Duration {
	if leaseTimeout <= 0 {
		return 0
	}
	return min(max(leaseTimeout/3, MinHeartbeatInterval), MaxHeartbeatInterval)
}

// heartbeats keeps one executing attempt's lease alive. Its loop ends when
// stopped, when the work context ends, or when the lease is lost, which
// cancels the execution context with ErrLeaseLost.
type heartbeats struct {
	stopLoop   context.CancelFunc
	cancelExec context.CancelCauseFunc
	done       chan struct{}
	lost       atomic.Bool
	// token is the attempt's latest callback token: each applied Heartbeat
	// answers with one that expires with the extended lease.
	token atomic.Pointer[string]
}

// callbackToken is the token the attempt's RESULT must carry.
func (h *heartbeats) callbackToken() string { return *h.token.Load() }

// startHeartbeats returns the context the attempt executes in, derived from
// ctx, and starts heartbeating every HeartbeatInterval(lease_timeout) while
// it runs. Each Heartbeat carries the task's latest progress (task may be
// nil) and is retried with backoff on transport errors; only an answer
// saying the lease is lost stops the work. The caller must call stop.
func (r *Runner) startHeartbeats(ctx context.Context, d *luciusv1.Directive, task *Task, log *slog.Logger) (context.Context, *heartbeats) {
	execCtx, cancelExec := context.WithCancelCause(ctx)
	loopCtx, stopLoop := context.WithCancel(execCtx)
	h := &heartbeats{stopLoop: stopLoop, cancelExec: cancelExec, done: make(chan struct{})}
	initial := d.GetCallbackToken()
	h.token.Store(&initial)
	interval := HeartbeatInterval(d.GetLeaseTimeout().AsDuration())
	if interval == 0 {
		close(h.done)
		return execCtx, h
	}
	go func() {
		defer close(h.done)
		r.heartbeatLoop(loopCtx, d, task, &h.token, interval, log, h.loseLease)
	}()
	return execCtx, h
}

// loseLease stops the attempt as a heartbeat answered "lease lost" would:
// the execution context ends with ErrLeaseLost.
func (h *heartbeats) loseLease() {
	h.lost.Store(true)
	h.cancelExec(ErrLeaseLost)
}

// stop ends the heartbeats, waits for the loop to exit, releases the
// execution context and reports whether the lease was lost.
func (h *heartbeats) stop() (lost bool) {
	h.stopLoop()
	<-h.done
	h.cancelExec(context.Canceled)
	return h.lost.Load()
}

// heartbeatLoop sends a Heartbeat every interval until ctx ends, the lease
// is lost (onLost is called) or the orchestrator rejects heartbeats.
func (r *Runner) heartbeatLoop(ctx context.Context, d *luciusv1.Directive, task *Task, token *atomic.Pointer[string],
	interval time.Duration, log *slog.Logger, onLost func()) {
	client, err := r.callbacks.client(d.GetCallbackUrls().GetGrpcTarget())
	if err != nil {
		// The ACK used the same target, so this does not happen in practice.
		log.WarnContext(ctx, "callback target unusable; not heartbeating", telemetry.Err(err))
		return
	}
	key := KeyOf(d)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for beat := 1; ; beat++ {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		var resp *luciusv1.HeartbeatResponse
		verdict, err := callRetrying(ctx, r.cfg.Backoff, r.cfg.CallTimeout, time.Time{},
			func(n int, err error, wait time.Duration) {
				log.WarnContext(ctx, "heartbeat failed; retrying", "heartbeat", beat, "retry", n, "retry_in", wait, telemetry.Err(err))
			},
			func(ctx context.Context) error {
				// Rebuilt per call, so a retry carries the latest progress.
				req := &luciusv1.HeartbeatRequest{JobId: key.JobID, StepId: key.StepID, AttemptNo: int32(key.AttemptNo),
					LeaseId: key.LeaseID, Progress: task.progressStruct(), WorkerId: r.cfg.WorkerID, CallbackToken: *token.Load(),
					CorrelationId: d.GetCorrelationId()}
				var err error
				resp, err = client.Heartbeat(ctx, req)
				return err
			})
		outcome := resp.GetOutcome()
		switch {
		case ctx.Err() != nil:
			return
		case verdict == verdictNotFound:
			log.WarnContext(ctx, "heartbeat: orchestrator does not know this step; stopping the attempt", telemetry.Err(err))
			onLost()
			return
		case verdict == verdictRejected:
			// E.g. UNIMPLEMENTED from an orchestrator without heartbeats: the
			// work goes on, its lease unrefreshed.
			log.WarnContext(ctx, "heartbeat rejected; no more heartbeats for this attempt", telemetry.Err(err))
			return
		case stopOutcome(outcome):
			log.WarnContext(ctx, "heartbeat says the lease is lost (another attempt owns the step, or the job ended); stopping the attempt",
				telemetry.KeyOutcome, outcome.String())
			onLost()
			return
		}
		if fresh := resp.GetCallbackToken(); fresh != "" {
			token.Store(&fresh)
		}
		attrs := []any{"heartbeat", beat, telemetry.KeyOutcome, outcome.String(), "step_status", resp.GetStepStatus().String(),
			"with_progress", task.progressStruct() != nil}
		if exp := resp.GetLeaseExpireTime(); exp != nil {
			attrs = append(attrs, "lease_expire_time", exp.AsTime())
		}
		log.DebugContext(ctx, "heartbeat", attrs...)
		timer.Reset(interval)
	}
}
