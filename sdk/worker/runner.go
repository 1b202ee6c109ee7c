package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"buf.build/go/protovalidate"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// Dead-letter reasons the runner uses.
const (
	// DeadLetterInvalidDirective: the body is not a usable lucius.v1.Directive.
	DeadLetterInvalidDirective = "InvalidDirective"
	// DeadLetterWrongService: the directive names another service.
	DeadLetterWrongService = "WrongService"
	// DeadLetterCallbackRejected: the orchestrator refused the ACK or RESULT
	// as malformed (INVALID_ARGUMENT and the like); repeating cannot help.
	DeadLetterCallbackRejected = "CallbackRejected"
)

// settleTimeout bounds settling a message and releasing a claim once the
// work context has ended.
const settleTimeout = 5 * time.Second

// Runner consumes a service's directives and runs them through an Executor
// under the directive contract (see the package documentation).
type Runner struct {
	bus       bus.Bus
	store     Store
	exec      Executor
	cfg       Config
	log       *slog.Logger
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	validator protovalidate.Validator
	callbacks *callbackClients
	// https and azure serve https:// and az:// refs for every task.
	https, azure blob.Store

	handled  metric.Int64Counter
	duration metric.Float64Histogram

	started atomic.Bool
	ready   atomic.Bool
	// shutdown is closed when Run's context ends: every Task's
	// ShuttingDown notice.
	shutdown chan struct{}
}

// NewRunner returns a runner receiving from b, recording executions in store
// and running exec (which may be nil when cfg.NoOp is set).
func NewRunner(b bus.Bus, store Store, exec Executor, cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var errs []error
	if b == nil {
		errs = append(errs, errors.New("bus is required"))
	}
	if store == nil {
		errs = append(errs, errors.New("store is required"))
	}
	if exec == nil && !cfg.NoOp {
		errs = append(errs, errors.New("executor is required unless NoOp is set"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("new runner: %w", err)
	}
	cfg = cfg.withDefaults()
	validator, err := protovalidate.New()
	if err != nil {
		return nil, fmt.Errorf("new runner: protovalidate: %w", err)
	}
	meter := cfg.MeterProvider.Meter("lucius/worker")
	handled, err := meter.Int64Counter("lucius_worker_directives_total",
		metric.WithDescription("Directive messages handled, by service and outcome."))
	if err != nil {
		return nil, fmt.Errorf("new runner: metric: %w", err)
	}
	duration, err := meter.Float64Histogram("lucius_worker_execution_seconds", metric.WithUnit("s"),
		metric.WithDescription("Time spent executing attempts, by service and result status."))
	if err != nil {
		return nil, fmt.Errorf("new runner: metric: %w", err)
	}
	azure, err := blob.NewAzure(cfg.Azure, cfg.Egress)
	if err != nil {
		return nil, fmt.Errorf("new runner: %w", err)
	}
	return &Runner{
		bus: b, store: store, exec: wrap(exec, cfg), cfg: cfg,
		https: blob.NewHTTPS(cfg.Egress), azure: azure,
		log:       cfg.Logger,
		tracer:    cfg.TracerProvider.Tracer("lucius/worker"),
		prop:      cfg.Propagator,
		validator: validator,
		callbacks: newCallbackClients(cfg.DialOptions),
		handled:   handled,
		duration:  duration,
		shutdown:  make(chan struct{}),
	}, nil
}

// WorkerID is the instance name the runner reports in callbacks.
func (r *Runner) WorkerID() string { return r.cfg.WorkerID }

// Ready reports whether the runner is receiving: it is nil from the moment
// every subscription has a receiver until Run's context ends.
func (r *Runner) Ready(context.Context) error {
	if !r.ready.Load() {
		return errors.New("worker: not receiving")
	}
	return nil
}

// Run declares the service's directive subscriptions, receives from all of
// them and handles each directive until ctx ends. Then it stops receiving,
// lets in-flight directives finish for up to Config.ShutdownGrace, interrupts
// the rest (their messages are abandoned, never completed) and returns nil. It
// returns an error only when it cannot start. Run may be called once.
func (r *Runner) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	defer func() {
		if err := r.callbacks.close(); err != nil {
			r.log.WarnContext(ctx, "close callback connections", telemetry.Err(err))
		}
	}()
	tcfg := topology.Config{Topology: r.cfg.Topology, DirectiveLockDuration: r.cfg.LockDuration, MaxDeliveryCount: r.cfg.MaxDeliveryCount}
	if err := topology.DeclareService(ctx, r.bus, tcfg, r.cfg.Service); err != nil {
		return fmt.Errorf("worker %s: declare subscriptions: %w", r.cfg.Service, err)
	}
	subs := topology.DirectiveSubscriptions(r.cfg.Topology, r.cfg.Service)
	receivers, err := r.openReceivers(ctx, subs)
	defer func() {
		for _, rcv := range receivers {
			if rcv != nil {
				rcv.Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing only stops local waiting
			}
		}
	}()
	if err != nil {
		return err
	}

	// In-flight work outlives ctx by up to ShutdownGrace.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	slots := make(chan struct{}, r.cfg.Concurrency)
	var loops, handlers sync.WaitGroup
	for i, rcv := range receivers {
		loops.Go(func() { r.receiveLoop(ctx, work, subs[i].Source(), rcv, slots, &handlers) })
	}
	r.ready.Store(true)
	r.log.InfoContext(ctx, "worker receiving", "platform_service", r.cfg.Service, "worker_id", r.cfg.WorkerID, "subscriptions", len(subs),
		"topology", string(r.cfg.Topology), "concurrency", r.cfg.Concurrency, "noop", r.cfg.NoOp, "middleware", len(r.cfg.Middleware))

	<-ctx.Done()
	r.ready.Store(false)
	close(r.shutdown) // Task.ShuttingDown: handlers may checkpoint and return ErrShuttingDown
	loops.Wait()
	r.log.InfoContext(work, "worker stopping; in-flight directives are told (Task.ShuttingDown) and may finish or checkpoint",
		"grace", r.cfg.ShutdownGrace)
	timer := time.AfterFunc(r.cfg.ShutdownGrace, stopWork)
	handlers.Wait()
	timer.Stop()
	r.log.InfoContext(work, "worker stopped")
	return nil
}

// shuttingDown reports whether Run's context has ended.
func (r *Runner) shuttingDown() bool {
	select {
	case <-r.shutdown:
		return true
	default:
		return false
	}
}

// openReceiversAtOnce bounds how many receivers a worker opens at once: on
// Service Bus opening one takes a round trip or two, and a service has a
// subscription on every directive topic (32).
const openReceiversAtOnce = 8

// openReceivers opens a receiver on every subscription, several at a time.
// On an error the ones opened are returned too, for the caller to close.
func (r *Runner) openReceivers(ctx context.Context, subs []topology.Subscription) ([]bus.Receiver, error) {
	receivers := make([]bus.Receiver, len(subs))
	errs := make([]error, len(subs))
	sem := make(chan struct{}, openReceiversAtOnce)
	var wg sync.WaitGroup
	for i, s := range subs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rcv, err := r.bus.NewReceiver(ctx, s.Source())
			if err != nil {
				errs[i] = fmt.Errorf("worker %s: receive from %s: %w", r.cfg.Service, s.Source(), err)
				return
			}
			receivers[i] = rcv
		})
	}
	wg.Wait()
	return receivers, errors.Join(errs...)
}

// receiveLoop receives from one subscription while ctx lasts, Prefetch
// messages at a time. A received message waits for an execution slot with
// its lock renewed, so at most Prefetch messages per subscription wait and
// at most Concurrency execute. Handlers run on work, which outlives ctx;
// messages still waiting when ctx ends are abandoned straight back.
func (r *Runner) receiveLoop(ctx, work context.Context, src bus.Source, rcv bus.Receiver, slots chan struct{}, handlers *sync.WaitGroup) {
	var held heldLocks
	bus.Consume(ctx, rcv, bus.ConsumeOptions{
		Batch:    r.cfg.Prefetch,
		Slots:    slots,
		Handlers: handlers,
		Backoff:  r.cfg.Backoff.Delay,
		OnError: func(ctx context.Context, err error, retryIn time.Duration) {
			r.log.WarnContext(ctx, "receive directives", "source", src.Path(), "retry_in", retryIn, telemetry.Err(err))
		},
		OnReceive: func(msgs []*bus.Received) {
			for _, m := range msgs {
				held.put(m, r.keepLock(work, rcv, m))
			}
		},
		OnDropped: func(m *bus.Received) { r.abandon(work, rcv, m, held.take(m), r.log) },
	}, func(_ context.Context, m *bus.Received) {
		r.handle(work, src, rcv, m, held.take(m))
	})
}

// delivery is one received message on its way through the contract.
type delivery struct {
	rcv      bus.Receiver
	m        *bus.Received
	keeper   *lockKeeper
	pickedUp time.Time
	d        *luciusv1.Directive
	key      Key
	log      *slog.Logger
	span     trace.Span
	// ackClient is set when the ACK lingers (Config.AckLinger).
	ackClient luciusv1.CallbackServiceClient
}

// handle runs one message through the contract, a step at a time. Every
// path ends in exactly one of: complete, dead-letter, abandon, or leave (the
// lock expires).
func (r *Runner) handle(ctx context.Context, src bus.Source, rcv bus.Receiver, m *bus.Received, keeper *lockKeeper) {
	dl := &delivery{rcv: rcv, m: m, keeper: keeper, pickedUp: time.Now(), log: r.log}
	d, parseErr := ParseDirective(m.Body)
	ctx = r.startSpan(ctx, src, dl, d)
	defer dl.span.End()
	if !r.admit(ctx, dl, d, parseErr) {
		return
	}
	if !r.claim(ctx, dl) {
		return
	}
	if !r.acknowledge(ctx, dl) {
		return
	}
	result, ok := r.run(ctx, dl)
	if !ok {
		return
	}
	r.report(ctx, dl, result)
}

// startSpan continues the dispatching transaction's trace (from the
// message's properties, or the directive's traceparent) in a consumer span.
func (r *Runner) startSpan(ctx context.Context, src bus.Source, dl *delivery, d *luciusv1.Directive) context.Context {
	ctx = r.prop.Extract(ctx, bus.PropertiesCarrier(dl.m.Properties))
	if !trace.SpanContextFromContext(ctx).IsValid() && d.GetTraceparent() != "" {
		ctx = r.prop.Extract(ctx, propagation.MapCarrier{"traceparent": d.GetTraceparent()})
	}
	ctx, dl.span = r.tracer.Start(ctx, r.cfg.Service+" process", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "lucius-bus"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", src.Path()),
			attribute.String("messaging.message.id", dl.m.ID),
			attribute.Int("messaging.message.delivery_count", dl.m.DeliveryCount),
		))
	return ctx
}

// admit dead-letters a message that is no directive of this service, and
// otherwise names the attempt in the span and the log.
func (r *Runner) admit(ctx context.Context, dl *delivery, d *luciusv1.Directive, parseErr error) bool {
	if parseErr != nil {
		r.count(ctx, "invalid")
		dl.span.SetStatus(codes.Error, "invalid directive")
		dl.log.ErrorContext(ctx, "invalid directive; dead-lettering", telemetry.KeyMessageID, dl.m.ID, telemetry.Err(parseErr))
		r.deadLetter(ctx, dl.rcv, dl.m, dl.keeper, dl.log, DeadLetterInvalidDirective, parseErr.Error())
		return false
	}
	dl.d, dl.key = d, KeyOf(d)
	key := dl.key
	dl.span.SetAttributes(attribute.String(telemetry.KeyJobID, key.JobID), attribute.String(telemetry.KeyStepID, key.StepID),
		attribute.Int(telemetry.KeyAttemptNo, key.AttemptNo), attribute.String(telemetry.KeyLeaseID, key.LeaseID))
	dl.log = dl.log.With(telemetry.JobID(key.JobID), telemetry.StepID(key.StepID), telemetry.AttemptNo(key.AttemptNo),
		slog.String(telemetry.KeyLeaseID, key.LeaseID), telemetry.TenantID(d.GetTenantId()))
	if d.GetService() != "" && d.GetService() != r.cfg.Service {
		r.count(ctx, "invalid")
		dl.log.ErrorContext(ctx, "directive for another service; dead-lettering", "directive_service", d.GetService())
		r.deadLetter(ctx, dl.rcv, dl.m, dl.keeper, dl.log, DeadLetterWrongService,
			fmt.Sprintf("directive is for service %q, this worker runs %q", d.GetService(), r.cfg.Service))
		return false
	}
	return true
}

// claim takes the attempt in the idempotency store. An attempt already
// executed has its stored RESULT sent again; one executing elsewhere is left
// alone. The claim is then extended with every lock renewal.
func (r *Runner) claim(ctx context.Context, dl *delivery) bool {
	claim, err := r.store.Claim(ctx, Claim{Key: dl.key, Service: r.cfg.Service, WorkerID: r.cfg.WorkerID, Until: dl.keeper.lockedUntil()})
	if err != nil {
		r.count(ctx, "error")
		dl.span.SetStatus(codes.Error, "claim")
		dl.log.ErrorContext(ctx, "claim attempt; leaving the message for redelivery", telemetry.Err(err))
		r.leave(dl.keeper)
		return false
	}
	switch claim.State {
	case ClaimDone:
		r.count(ctx, "duplicate")
		dl.log.InfoContext(ctx, "attempt already executed; re-sending its stored RESULT",
			"status", claim.Result.GetStatus().String(), "delivery_count", dl.m.DeliveryCount)
		r.deliverResult(ctx, dl.rcv, dl.m, dl.keeper, dl.d, claim.Result, dl.log)
		return false
	case ClaimBusy:
		r.count(ctx, "busy")
		dl.log.InfoContext(ctx, "attempt is executing elsewhere; leaving this copy until its lock expires")
		r.leave(dl.keeper)
		return false
	}
	if claim.TookOver {
		dl.log.WarnContext(ctx, "taking over an interrupted execution of this attempt", "delivery_count", dl.m.DeliveryCount)
	}
	key, log := dl.key, dl.log
	dl.keeper.onRenew(func(ctx context.Context, until time.Time) {
		if err := r.store.Extend(ctx, key, r.cfg.WorkerID, until); err != nil {
			log.WarnContext(ctx, "extend execution claim", telemetry.Err(err))
		}
	})
	return true
}

// acknowledge fetches a detached directive whole, then ACKs the attempt —
// or, with Config.AckLinger, leaves the ACK to run (lingering) beside the
// execution: an attempt done within the linger sends its RESULT alone, which
// implies the ACK (one callback and one orchestrator commit less per step).
func (r *Runner) acknowledge(ctx context.Context, dl *delivery) bool {
	if dl.d.GetDetached() {
		whole, stop := r.attach(ctx, dl.rcv, dl.m, dl.keeper, dl.d, dl.log)
		if stop {
			return false
		}
		dl.d = whole
	}
	client, ok := r.callbackClient(ctx, dl.rcv, dl.m, dl.keeper, dl.d, dl.log)
	if !ok {
		return false
	}
	if r.cfg.AckLinger > 0 {
		dl.ackClient = client
		return true
	}
	v, outcome, err := r.sendAck(ctx, dl, client)
	return !r.settleAck(ctx, dl, v, outcome, err)
}

// lingerAck sends the ACK if the execution is still running after
// Config.AckLinger. Its answer stopping the attempt cancels the execution
// (as a lost lease does) and is kept for wait. wait reports the verdict:
// ackProceed when the ACK was not needed.
func (r *Runner) lingerAck(ctx context.Context, dl *delivery, beats *heartbeats) (wait func() (ackVerdict, luciusv1.CallbackOutcome, error)) {
	var (
		v       ackVerdict
		outcome luciusv1.CallbackOutcome
		err     error
		done    = make(chan struct{})
	)
	timer := time.AfterFunc(r.cfg.AckLinger, func() {
		defer close(done)
		if v, outcome, err = r.sendAck(ctx, dl, dl.ackClient); v.refused() {
			beats.loseLease()
		}
	})
	return func() (ackVerdict, luciusv1.CallbackOutcome, error) {
		if timer.Stop() {
			dl.log.DebugContext(ctx, "done within the ACK linger: the RESULT implies the ACK")
			return ackProceed, 0, nil
		}
		<-done
		return v, outcome, err
	}
}

// run executes the attempt under heartbeats and builds its RESULT. An
// attempt whose lease was lost, or that the shutdown interrupted, is settled
// here without a RESULT (ok false).
func (r *Runner) run(ctx context.Context, dl *delivery) (result *luciusv1.ResultRequest, ok bool) {
	var (
		task    *Task
		taskErr error
	)
	if r.cfg.NoOp {
		task = &Task{Directive: dl.d, log: dl.log, shutdown: r.shutdown} // no workspace: the no-op touches no ref
	} else {
		task, taskErr = NewTask(dl.d, TaskConfig{Logger: r.cfg.Logger, MaxInputBytes: r.cfg.MaxInputBytes, FileRoots: r.cfg.FileRoots,
			HTTPS: r.https, Azure: r.azure, TracerProvider: r.cfg.TracerProvider, ShuttingDown: r.shutdown})
	}
	execCtx, beats := r.startHeartbeats(ctx, dl.d, task, dl.log)
	if task != nil {
		task.setCheckpointReporter(r.checkpointReporter(dl.d, beats, dl.log))
	}
	ackWait := func() (ackVerdict, luciusv1.CallbackOutcome, error) { return ackProceed, 0, nil }
	if dl.ackClient != nil {
		ackWait = r.lingerAck(ctx, dl, beats)
	}
	result, interrupted := r.execute(execCtx, dl.d, task, taskErr, dl.log)
	task.cleanup()
	v, outcome, ackErr := ackWait()
	lost := beats.stop()
	if result != nil {
		result.CallbackToken = beats.callbackToken()
	}
	switch {
	case v.refused():
		// The lingering ACK stopped the attempt: settled as its answer says.
		r.settleAck(ctx, dl, v, outcome, ackErr)
		return nil, false
	case lost:
		r.dropLostAttempt(ctx, dl.rcv, dl.m, dl.keeper, dl.key, dl.log)
		return nil, false
	case interrupted:
		r.release(ctx, dl, task)
		return nil, false
	}
	if result.GetStatus() == luciusv1.ResultStatus_RESULT_STATUS_FAILED {
		dl.span.SetStatus(codes.Error, result.GetReason())
	}
	return result, true
}

// release hands an attempt the shutdown interrupted back to the bus at
// once, its claim freed, so another worker resumes it (from its last
// checkpoint, if it saved one).
func (r *Runner) release(ctx context.Context, dl *delivery, task *Task) {
	r.count(ctx, "interrupted")
	saved, last := task.checkpointsSaved()
	dl.log.WarnContext(ctx, "execution interrupted by shutdown; releasing the attempt for redelivery",
		"checkpoints_saved", saved, "last_checkpoint", last)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	if err := r.store.Release(cctx, dl.key, r.cfg.WorkerID); err != nil {
		dl.log.WarnContext(cctx, "release execution claim", telemetry.Err(err))
	}
	cancel()
	r.abandon(ctx, dl.rcv, dl.m, dl.keeper, dl.log)
}

// report records the RESULT (and a successful step's effect), then sends it.
func (r *Runner) report(ctx context.Context, dl *delivery, result *luciusv1.ResultRequest) {
	// Record before sending: once recorded, a redelivery re-sends this RESULT
	// instead of running the work again. A successful attempt's record
	// commits the step's effect too, once, by the first attempt that gets
	// here; a later attempt's is a no-op and its RESULT is sent all the same
	// (the orchestrator decides which RESULT counts).
	var effect *Effect
	if result.GetStatus() == luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED {
		effect = &Effect{Key: dl.key, Service: r.cfg.Service, WorkerID: r.cfg.WorkerID}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.CallTimeout)
	inserted, err := r.store.Finish(cctx, dl.key, r.cfg.WorkerID, result, effect)
	cancel()
	if err == nil && effect != nil && !inserted {
		dl.log.InfoContext(ctx, "an earlier attempt already committed the step's effect; reporting this attempt's RESULT anyway")
	}
	if err != nil {
		r.count(ctx, "error")
		if errors.Is(err, ErrClaimLost) {
			dl.log.WarnContext(ctx, "lost the execution claim to another worker; its execution reports", telemetry.Err(err))
		} else {
			dl.log.ErrorContext(ctx, "record RESULT; leaving the message for redelivery", telemetry.Err(err))
		}
		r.leave(dl.keeper)
		return
	}
	r.deliverResult(ctx, dl.rcv, dl.m, dl.keeper, dl.d, result, dl.log)
}

// dropLostAttempt ends an attempt whose lease a heartbeat reported lost:
// its work is discarded, nothing is recorded as done, no RESULT is sent, and
// the message is completed (the attempt is over; another one owns the step,
// or the job ended).
func (r *Runner) dropLostAttempt(ctx context.Context, rcv bus.Receiver, m *bus.Received, keeper *lockKeeper, key Key, log *slog.Logger) {
	r.count(ctx, "stale")
	log.WarnContext(ctx, "attempt lease lost during execution; discarding its work without RESULT")
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	if err := r.store.Forget(cctx, key, r.cfg.WorkerID); err != nil {
		log.WarnContext(cctx, "forget execution claim", telemetry.Err(err))
	}
	cancel()
	r.complete(ctx, rcv, m, keeper, log)
}

// forget drops the execution claim of an attempt that will not run here.
func (r *Runner) forget(ctx context.Context, key Key, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := r.store.Forget(cctx, key, r.cfg.WorkerID); err != nil {
		log.WarnContext(cctx, "forget execution claim", telemetry.Err(err))
	}
}

// callbackClient returns the CallbackService client of d's callback target;
// when the target is unusable (grpc.NewClient fails only on a target it
// cannot parse) it forgets the claim, dead-letters the message and reports false.
func (r *Runner) callbackClient(ctx context.Context, rcv bus.Receiver, m *bus.Received, keeper *lockKeeper,
	d *luciusv1.Directive, log *slog.Logger) (luciusv1.CallbackServiceClient, bool) {
	client, err := r.callbacks.client(d.GetCallbackUrls().GetGrpcTarget())
	if err != nil {
		r.count(ctx, "rejected")
		log.ErrorContext(ctx, "callback target unusable; dead-lettering", telemetry.Err(err))
		r.forget(ctx, KeyOf(d), log)
		r.deadLetter(ctx, rcv, m, keeper, log, DeadLetterCallbackRejected, err.Error())
		return nil, false
	}
	return client, true
}

// ackVerdict is what an ACK's answer means for the attempt.
type ackVerdict int

const (
	ackProceed     ackVerdict = iota // applied, or unanswered after retries (a RESULT implies the ACK)
	ackInterrupted                   // the worker is shutting down
	ackNotFound                      // the orchestrator does not know the step
	ackRejected                      // refused as invalid
	ackStale                         // another attempt owns the step, or the job ended
)

// refused reports whether the answer means the attempt is not this
// worker's to run (a shutdown is not an answer: it ends the run anyway).
func (v ackVerdict) refused() bool { return v == ackNotFound || v == ackRejected || v == ackStale }

// sendAck sends the attempt's ACK, retrying, and says what the answer means.
// It settles nothing, so it may run beside the execution (Config.AckLinger).
func (r *Runner) sendAck(ctx context.Context, dl *delivery, client luciusv1.CallbackServiceClient) (ackVerdict, luciusv1.CallbackOutcome, error) {
	key := dl.key
	req := &luciusv1.AckRequest{JobId: key.JobID, StepId: key.StepID, AttemptNo: int32(key.AttemptNo), LeaseId: key.LeaseID,
		AckTime: timestamppb.New(dl.pickedUp), WorkerId: r.cfg.WorkerID, CallbackToken: dl.d.GetCallbackToken(),
		CorrelationId: dl.d.GetCorrelationId()}
	var outcome luciusv1.CallbackOutcome
	verdict, err := callRetrying(ctx, r.cfg.Backoff, r.cfg.CallTimeout, time.Now().Add(r.cfg.AckRetryTimeout),
		func(n int, err error, wait time.Duration) {
			dl.log.WarnContext(ctx, "ACK failed; retrying", "retry", n, "retry_in", wait, telemetry.Err(err))
		},
		func(ctx context.Context) error {
			resp, err := client.Ack(ctx, req)
			outcome = resp.GetOutcome()
			return err
		})
	switch {
	case ctx.Err() != nil:
		return ackInterrupted, outcome, err
	case errors.Is(err, errGaveUp):
		dl.log.WarnContext(ctx, "ACK unanswered; executing anyway (a RESULT implies the ACK)", telemetry.Err(err))
		return ackProceed, outcome, err
	case verdict == verdictNotFound:
		return ackNotFound, outcome, err
	case verdict == verdictRejected:
		return ackRejected, outcome, err
	case stopOutcome(outcome):
		return ackStale, outcome, err
	}
	dl.log.DebugContext(ctx, "acknowledged", telemetry.KeyOutcome, outcome.String())
	return ackProceed, outcome, nil
}

// settleAck settles the message of an attempt its ACK stopped, before or
// instead of its execution, and reports whether it did (false: proceed).
func (r *Runner) settleAck(ctx context.Context, dl *delivery, v ackVerdict, outcome luciusv1.CallbackOutcome, err error) bool {
	switch v {
	case ackInterrupted:
		r.count(ctx, "interrupted")
		r.forget(ctx, dl.key, dl.log)
		r.abandon(ctx, dl.rcv, dl.m, dl.keeper, dl.log)
	case ackNotFound:
		r.count(ctx, "stale")
		dl.log.WarnContext(ctx, "orchestrator does not know this step; completing without executing", telemetry.Err(err))
		r.forget(ctx, dl.key, dl.log)
		r.complete(ctx, dl.rcv, dl.m, dl.keeper, dl.log)
	case ackRejected:
		r.count(ctx, "rejected")
		dl.log.ErrorContext(ctx, "ACK rejected; dead-lettering", telemetry.Err(err))
		r.forget(ctx, dl.key, dl.log)
		r.deadLetter(ctx, dl.rcv, dl.m, dl.keeper, dl.log, DeadLetterCallbackRejected, "ACK rejected: "+err.Error())
	case ackStale:
		r.count(ctx, "stale")
		dl.log.InfoContext(ctx, "ACK says another attempt owns the step; completing without executing", telemetry.KeyOutcome, outcome.String())
		r.forget(ctx, dl.key, dl.log)
		r.complete(ctx, dl.rcv, dl.m, dl.keeper, dl.log)
	default:
		return false
	}
	return true
}

// execute runs the executor on task (or the no-op, where task is nil; taskErr
// is NewTask's error) and builds the RESULT. It reports interrupted when ctx
// ended before the executor finished: the worker shut down, or a heartbeat
// found the lease lost (ctx's cause is then ErrLeaseLost).
func (r *Runner) execute(ctx context.Context, d *luciusv1.Directive, task *Task, taskErr error, log *slog.Logger) (*luciusv1.ResultRequest, bool) {
	started := time.Now()
	var (
		out Result
		err error
	)
	if r.cfg.ExecutionDelay > 0 {
		loop.Sleep(ctx, r.cfg.ExecutionDelay)
		if ctx.Err() != nil {
			return nil, true
		}
	}
	{
		if taskErr != nil {
			err = PermanentCode(CodeInvalidInput, taskErr)
		} else {
			tctx, cancel := context.WithTimeout(ctx, r.cfg.TaskTimeout)
			out, err = r.safeExecute(tctx, task, log)
			timedOut := errors.Is(tctx.Err(), context.DeadlineExceeded)
			cancel()
			if err != nil && (ctx.Err() != nil || (errors.Is(err, ErrShuttingDown) && r.shuttingDown())) {
				// Cut short by the grace running out, or stopped by the
				// executor at the shutdown notice: released, no RESULT.
				return nil, true
			}
			if err != nil && timedOut {
				err = RetryableCode(CodeTimeout, fmt.Errorf("task ran longer than %v: %w", r.cfg.TaskTimeout, err))
			}
			if out.Artifacts == nil {
				out.Artifacts = task.Artifacts()
			}
		}
		if errors.Is(context.Cause(ctx), ErrLeaseLost) {
			// The executor finished regardless; another attempt owns the
			// step, so output_ref is not this attempt's to write.
			return nil, true
		}
		if err == nil && d.GetFinalStep() && !out.Polling && d.GetOutputRef() != "" && !r.cfg.NoOp {
			if len(out.Artifacts) == 0 {
				log.WarnContext(ctx, "final step produced no artifact; output_ref not written")
			} else if final, ferr := task.writeFinalOutput(ctx, d.GetOutputRef(), out.Artifacts[0]); ferr != nil {
				err = fmt.Errorf("write output_ref: %w", ferr)
			} else {
				out.Artifacts = append(append([]*luciusv1.ArtifactRef(nil), out.Artifacts...), final)
			}
		}
	}
	res := r.newResult(d, started)
	if err == nil {
		res.Status, res.Artifacts = luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED, out.Artifacts
		if out.Polling {
			res.Status = luciusv1.ResultStatus_RESULT_STATUS_POLLING
		}
		res.FinishTime = timestamppb.Now()
		if out.Output != nil {
			s, serr := structpb.NewStruct(out.Output)
			if serr != nil {
				err = PermanentCode(CodeInvalidResult, fmt.Errorf("output is not JSON-like: %w", serr))
			} else if task != nil {
				// Over the inline limit, the output travels as a claim check.
				var spilled *luciusv1.ArtifactRef
				if s, spilled, err = task.spillOutput(ctx, s, r.cfg.InlineOutputLimit); spilled != nil {
					res.Artifacts = append(append([]*luciusv1.ArtifactRef(nil), res.Artifacts...), spilled)
				}
			}
			res.Output = s
		}
	}
	if err == nil {
		if verr := r.validator.Validate(res); verr != nil {
			err = PermanentCode(CodeInvalidResult, fmt.Errorf("RESULT breaks the contract: %w", verr))
		}
	}
	if err != nil {
		class, reason := Classify(err)
		res = r.newResult(d, started)
		res.Status, res.FailureClass, res.Reason = luciusv1.ResultStatus_RESULT_STATUS_FAILED, class, reason
		res.FinishTime = timestamppb.Now()
	}
	elapsed := res.GetFinishTime().AsTime().Sub(started)
	r.duration.Record(ctx, elapsed.Seconds(), metric.WithAttributes(attribute.String("service", r.cfg.Service),
		attribute.String("status", res.GetStatus().String())))
	if err != nil {
		log.WarnContext(ctx, "attempt failed", "failure_class", res.GetFailureClass().String(), "reason", res.GetReason(),
			"duration_ms", elapsed.Milliseconds())
	} else {
		log.InfoContext(ctx, "attempt succeeded", "artifacts", len(res.GetArtifacts()), "duration_ms", elapsed.Milliseconds())
	}
	return res, false
}

// wrap returns what the runner executes: the executor (the no-op when
// cfg.NoOp is set) inside cfg.Middleware, the first outermost.
func wrap(exec Executor, cfg Config) Executor {
	if cfg.NoOp {
		exec = noOp{}
	}
	for i := len(cfg.Middleware) - 1; i >= 0; i-- {
		exec = cfg.Middleware[i](exec)
	}
	return exec
}

// safeExecute turns an executor panic into a NON_RETRYABLE failure: a panic
// is a bug that the same input will hit again.
func (r *Runner) safeExecute(ctx context.Context, task *Task, log *slog.Logger) (out Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.ErrorContext(ctx, "executor panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			out, err = Result{}, PermanentCode(CodePanic, fmt.Errorf("executor panicked: %v", p))
		}
	}()
	return r.exec.Execute(ctx, task)
}

func (r *Runner) newResult(d *luciusv1.Directive, started time.Time) *luciusv1.ResultRequest {
	return &luciusv1.ResultRequest{JobId: d.GetJobId(), StepId: d.GetStepId(), AttemptNo: d.GetAttemptNo(),
		LeaseId: d.GetLeaseId(), StartTime: timestamppb.New(started), WorkerId: r.cfg.WorkerID, CallbackToken: d.GetCallbackToken(),
		CorrelationId: d.GetCorrelationId()}
}

// deliverResult sends RESULT until the orchestrator answers, then completes
// the message. It never completes a message whose RESULT was not answered.
func (r *Runner) deliverResult(ctx context.Context, rcv bus.Receiver, m *bus.Received, keeper *lockKeeper,
	d *luciusv1.Directive, res *luciusv1.ResultRequest, log *slog.Logger) {
	client, err := r.callbacks.client(d.GetCallbackUrls().GetGrpcTarget())
	if err != nil {
		r.count(ctx, "rejected")
		log.ErrorContext(ctx, "callback target unusable; dead-lettering", telemetry.Err(err))
		r.deadLetter(ctx, rcv, m, keeper, log, DeadLetterCallbackRejected, err.Error())
		return
	}
	var outcome luciusv1.CallbackOutcome
	verdict, err := callRetrying(ctx, r.cfg.Backoff, r.cfg.CallTimeout, time.Time{},
		func(n int, err error, wait time.Duration) {
			log.WarnContext(ctx, "RESULT failed; retrying", "retry", n, "retry_in", wait, telemetry.Err(err))
		},
		func(ctx context.Context) error {
			resp, err := client.Result(ctx, res)
			outcome = resp.GetOutcome()
			return err
		})
	switch {
	case ctx.Err() != nil:
		r.count(ctx, "interrupted")
		log.WarnContext(ctx, "shutting down before RESULT was answered; abandoning the message (its redelivery re-sends the RESULT)")
		r.abandon(ctx, rcv, m, keeper, log)
	case verdict == verdictRejected:
		r.count(ctx, "rejected")
		log.ErrorContext(ctx, "RESULT rejected; dead-lettering", telemetry.Err(err))
		r.deadLetter(ctx, rcv, m, keeper, log, DeadLetterCallbackRejected, "RESULT rejected: "+err.Error())
	case verdict == verdictNotFound:
		r.count(ctx, "stale")
		log.WarnContext(ctx, "orchestrator does not know this step; completing", telemetry.Err(err))
		r.complete(ctx, rcv, m, keeper, log)
	default:
		switch {
		case stopOutcome(outcome):
			r.count(ctx, "stale")
			log.InfoContext(ctx, "RESULT recorded but not applied: another attempt owns the step", telemetry.KeyOutcome, outcome.String())
		case res.GetStatus() == luciusv1.ResultStatus_RESULT_STATUS_SUCCEEDED:
			r.count(ctx, "succeeded")
			log.DebugContext(ctx, "RESULT delivered", telemetry.KeyOutcome, outcome.String())
		case res.GetStatus() == luciusv1.ResultStatus_RESULT_STATUS_POLLING:
			r.count(ctx, "polling")
			log.DebugContext(ctx, "RESULT delivered", telemetry.KeyOutcome, outcome.String())
		default:
			r.count(ctx, "failed")
			log.DebugContext(ctx, "RESULT delivered", telemetry.KeyOutcome, outcome.String())
		}
		r.complete(ctx, rcv, m, keeper, log)
	}
}

func (r *Runner) count(ctx context.Context, outcome string) {
	r.handled.Add(ctx, 1, metric.WithAttributes(attribute.String("service", r.cfg.Service), attribute.String("outcome", outcome)))
}

// Settlement. Each stops the lock keeper first so no renewal races it, and
// uses a context that survives shutdown for a few seconds.

func (r *Runner) complete(ctx context.Context, rcv bus.Receiver, m *bus.Received, keeper *lockKeeper, log *slog.Logger) {
	keeper.stop()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := rcv.Complete(cctx, m); err != nil {
		// The work is recorded; a redelivery re-sends the stored RESULT.
		log.WarnContext(cctx, "complete directive message", telemetry.Err(err))
	}
}

func (r *Runner) abandon(ctx context.Context, rcv bus.Receiver, m *bus.Received, keeper *lockKeeper, log *slog.Logger) {
	keeper.stop()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := rcv.Abandon(cctx, m); err != nil && !errors.Is(err, bus.ErrLockLost) {
		log.WarnContext(cctx, "abandon directive message; it returns when its lock expires", telemetry.Err(err))
	}
}

func (r *Runner) deadLetter(ctx context.Context, rcv bus.Receiver, m *bus.Received, keeper *lockKeeper, log *slog.Logger, reason, description string) {
	keeper.stop()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := rcv.DeadLetter(cctx, m, reason, blob.TruncateUTF8(description, maxReasonBytes)); err != nil {
		log.WarnContext(cctx, "dead-letter directive message", "reason", reason, telemetry.Err(err))
	}
}

// leave stops renewing the lock without settling: the message is delivered
// again when its lock expires (infrastructure errors, where an immediate
// redelivery would only burn delivery attempts).
func (r *Runner) leave(keeper *lockKeeper) { keeper.stop() }
