// Package bustel holds the telemetry every bus transport reports the same way:
// the lucius_bus_* metrics per entity and the send and receive spans, whose
// trace context travels in the messages' application properties
// (bus.PropertiesCarrier). A transport counts its operations through an
// Instruments and supplies only what it alone can read: the depth of its
// queues and subscriptions (a DepthFunc).
package bustel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lucius-platform/lucius/bus"
)

// Metrics of the bus, all with the attribute entity: the path sent to or
// received from ("queue", "topic", "topic/subscriptions/sub", with
// "/$deadletterqueue" for a dead-letter queue).
const (
	MetricSent         = "lucius_bus_messages_sent_total"         // messages sent (after the commit of pgbus's SendInTx)
	MetricReceived     = "lucius_bus_messages_received_total"     // messages delivered by Receive
	MetricSettled      = "lucius_bus_messages_settled_total"      // settlements, by outcome: complete, abandon, deadletter
	MetricRenewals     = "lucius_bus_lock_renewals_total"         // successful RenewLock calls
	MetricLocksLost    = "lucius_bus_locks_lost_total"            // settlements and renewals that failed with ErrLockLost, by operation
	MetricDeadLettered = "lucius_bus_messages_deadlettered_total" // messages moved to a dead-letter queue, by reason
	MetricExpired      = "lucius_bus_messages_expired_total"      // messages past their TTL dropped (not dead-lettered)
	MetricDepth        = "lucius_bus_queue_depth"                 // messages of each queue, subscription and dead-letter queue, by state: active, scheduled
	MetricOldestAge    = "lucius_bus_oldest_message_age_seconds"  // age of the oldest active message of each of them (0: none)
)

// ReasonApplication is the reason attribute of MetricDeadLettered for a
// receiver's DeadLetter call, whatever reason the caller gave (callers'
// reasons are unbounded, so they stay out of the attribute). The bus's own
// reasons are bus.ReasonMaxDeliveryCountExceeded and bus.ReasonTTLExpired.
const ReasonApplication = "application"

// Op is a receiver operation: the outcome attribute of MetricSettled (all
// but Renew) and the operation attribute of MetricLocksLost.
type Op string

// Receiver operations.
const (
	Complete   Op = "complete"
	Abandon    Op = "abandon"
	DeadLetter Op = "deadletter"
	Renew      Op = "renew"
)

// DepthTimeout bounds one call of a DepthFunc.
const DepthTimeout = 5 * time.Second

// Depth is one entity's reading for MetricDepth and MetricOldestAge.
type Depth struct {
	// Entity is the path, with "/$deadletterqueue" for a dead-letter queue.
	Entity string
	// Active counts the messages that are deliverable or locked; Scheduled
	// those whose scheduled enqueue time has not come.
	Active, Scheduled int64
	// OldestAge is the age of the oldest active message; 0 when there is
	// none, negative when the transport could not tell (then MetricOldestAge
	// has no point for the entity).
	OldestAge time.Duration
}

// DepthFunc reads the depth of every queue, subscription and dead-letter
// queue the transport reports, when a metric reader collects. It runs with
// a context bounded by DepthTimeout; the depths it returns are reported even
// with an error (a partial reading).
type DepthFunc func(ctx context.Context) ([]Depth, error)

// Config configures Instruments. Zero values take the defaults noted.
type Config struct {
	// System is the attribute messaging.system of the spans: the
	// OpenTelemetry name of the transport ("servicebus" for Azure Service
	// Bus) or Lucius's own ("lucius_pgbus").
	System string
	// MeterProvider and TracerProvider receive the metrics and spans.
	// Default: the OpenTelemetry globals.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Propagator writes trace context into the application properties of
	// messages sent and reads it from those received. Default: the
	// OpenTelemetry global.
	Propagator propagation.TextMapPropagator
	// Depth reads the depth gauges. nil: the Instruments report none.
	Depth DepthFunc
}

// Instruments are a bus's metrics and tracer. Its methods are safe for
// concurrent use.
type Instruments struct {
	system       string
	tracer       trace.Tracer
	prop         propagation.TextMapPropagator
	sent         metric.Int64Counter
	received     metric.Int64Counter
	settled      metric.Int64Counter
	renewals     metric.Int64Counter
	locksLost    metric.Int64Counter
	deadLettered metric.Int64Counter
	expired      metric.Int64Counter
	depth        metric.Registration // nil without a DepthFunc
}

// New creates the instruments and registers cfg.Depth as the callback of
// the depth gauges; Close unregisters it.
func New(cfg Config) (*Instruments, error) {
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = otel.GetTextMapPropagator()
	}
	meter := cfg.MeterProvider.Meter("lucius/bus")
	in := &Instruments{system: cfg.System, tracer: cfg.TracerProvider.Tracer("lucius/bus"), prop: cfg.Propagator}
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	in.sent = counter(MetricSent, "Messages sent, by entity.")
	in.received = counter(MetricReceived, "Messages received, by entity.")
	in.settled = counter(MetricSettled, "Messages settled, by entity and outcome (complete, abandon, deadletter).")
	in.renewals = counter(MetricRenewals, "Message locks renewed, by entity.")
	in.locksLost = counter(MetricLocksLost, "Settlements and lock renewals refused because the lock was lost, by entity and operation.")
	in.deadLettered = counter(MetricDeadLettered, "Messages moved to a dead-letter queue, by entity and reason.")
	in.expired = counter(MetricExpired, "Messages past their time to live dropped, by entity.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bus metrics: %w", err)
	}
	if cfg.Depth == nil {
		return in, nil
	}
	depth, err := meter.Int64ObservableGauge(MetricDepth,
		metric.WithDescription("Messages in each queue, subscription and dead-letter queue, by state (active, scheduled)."))
	errs = append(errs, err)
	age, err := meter.Float64ObservableGauge(MetricOldestAge, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest active message of each queue, subscription and dead-letter queue."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bus metrics: %w", err)
	}
	in.depth, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, DepthTimeout)
		defer cancel()
		depths, err := cfg.Depth(ctx)
		for _, d := range depths {
			entity := attribute.String("entity", d.Entity)
			o.ObserveInt64(depth, d.Active, metric.WithAttributes(entity, attribute.String("state", "active")))
			o.ObserveInt64(depth, d.Scheduled, metric.WithAttributes(entity, attribute.String("state", "scheduled")))
			if d.OldestAge >= 0 {
				o.ObserveFloat64(age, d.OldestAge.Seconds(), metric.WithAttributes(entity))
			}
		}
		if err != nil {
			return fmt.Errorf("bus queue depth: %w", err)
		}
		return nil
	}, depth, age)
	if err != nil {
		return nil, fmt.Errorf("bus metrics: %w", err)
	}
	return in, nil
}

// Close unregisters the depth callback. The counters keep working.
func (in *Instruments) Close() error {
	if in.depth == nil {
		return nil
	}
	return in.depth.Unregister()
}

func entityAttr(entity string) metric.AddOption {
	return metric.WithAttributes(attribute.String("entity", entity))
}

// Sent counts n messages sent to entity.
func (in *Instruments) Sent(ctx context.Context, entity string, n int) {
	if n > 0 {
		in.sent.Add(ctx, int64(n), entityAttr(entity))
	}
}

// Settled counts a settlement that succeeded.
func (in *Instruments) Settled(ctx context.Context, entity string, outcome Op) {
	in.settled.Add(ctx, 1, metric.WithAttributes(attribute.String("entity", entity), attribute.String("outcome", string(outcome))))
}

// Receiving starts entity's lost-lock counts at 0, one per operation, when a
// receiver opens: a counter that appears at 1 is invisible to increase() and
// rate(), so the first lost lock would raise no alert.
func (in *Instruments) Receiving(ctx context.Context, entity string) {
	for _, op := range []Op{Complete, Abandon, DeadLetter, Renew} {
		in.locksLost.Add(ctx, 0, metric.WithAttributes(attribute.String("entity", entity), attribute.String("operation", string(op))))
	}
}

// Renewed counts a lock renewal that succeeded.
func (in *Instruments) Renewed(ctx context.Context, entity string) {
	in.renewals.Add(ctx, 1, entityAttr(entity))
}

// LockLost counts op's failure if err is bus.ErrLockLost; other errors are
// not counted.
func (in *Instruments) LockLost(ctx context.Context, entity string, op Op, err error) {
	if errors.Is(err, bus.ErrLockLost) {
		in.locksLost.Add(ctx, 1, metric.WithAttributes(attribute.String("entity", entity), attribute.String("operation", string(op))))
	}
}

// DeadLettered counts n messages of entity moved to its dead-letter queue.
func (in *Instruments) DeadLettered(ctx context.Context, entity, reason string, n int64) {
	if n > 0 {
		in.deadLettered.Add(ctx, n, metric.WithAttributes(attribute.String("entity", entity), attribute.String("reason", reason)))
	}
}

// Expired counts n messages of entity dropped past their time to live.
func (in *Instruments) Expired(ctx context.Context, entity string, n int64) {
	if n > 0 {
		in.expired.Add(ctx, n, entityAttr(entity))
	}
}

// StartSend starts the span of a send and puts its trace context in the
// application properties of every message that carries none yet: a message
// written by a traced producer (the engine's outbox rows) keeps its
// producer's context, so its consumer continues the producer's trace.
// Properties maps are copied, never changed in place. End the span with
// EndSpan.
func (in *Instruments) StartSend(ctx context.Context, entity string, msgs []bus.Message) (context.Context, trace.Span, []bus.Message) {
	ctx, span := in.tracer.Start(ctx, "send "+entity, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(in.messagingAttrs("send", entity, len(msgs))...))
	carrier := bus.PropertiesCarrier{}
	in.prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return ctx, span, msgs
	}
	var out []bus.Message
	for i, m := range msgs {
		if carries(m.Properties, carrier) {
			continue
		}
		if out == nil {
			out = append([]bus.Message(nil), msgs...)
		}
		props := make(map[string]string, len(m.Properties)+len(carrier))
		for k, v := range carrier {
			props[k] = v
		}
		for k, v := range m.Properties {
			props[k] = v
		}
		out[i].Properties = props
	}
	if out == nil {
		return ctx, span, msgs
	}
	return ctx, span, out
}

// carries reports whether props hold trace context already (any of the keys
// the propagator writes).
func carries(props map[string]string, carrier bus.PropertiesCarrier) bool {
	for k := range carrier {
		if _, ok := props[k]; ok {
			return true
		}
	}
	return false
}

// EndSpan records err on span and ends it.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Received records a receive from entity that delivered msgs: the counter,
// and a span from start linked to the trace context each message carries.
func (in *Instruments) Received(ctx context.Context, entity string, start time.Time, msgs []*bus.Received) {
	in.received.Add(ctx, int64(len(msgs)), entityAttr(entity))
	links := make([]trace.Link, 0, len(msgs))
	for _, m := range msgs {
		mctx := in.prop.Extract(context.Background(), bus.PropertiesCarrier(m.Properties))
		if sc := trace.SpanContextFromContext(mctx); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	_, span := in.tracer.Start(ctx, "receive "+entity, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(start), trace.WithLinks(links...),
		trace.WithAttributes(in.messagingAttrs("receive", entity, len(msgs))...))
	span.End()
}

func (in *Instruments) messagingAttrs(operation, entity string, n int) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", in.system),
		attribute.String("messaging.operation.name", operation),
		attribute.String("messaging.destination.name", entity),
		attribute.Int("messaging.batch.message_count", n),
	}
}
