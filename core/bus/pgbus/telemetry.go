package pgbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lucius-platform/lucius/core/bus"
)

// Metrics of the bus, all with the attribute entity: the path sent to or
// received from ("queue", "topic", "topic/subscriptions/sub", with
// "/$deadletterqueue" for a dead-letter queue).
const (
	MetricSent         = "lucius_bus_messages_sent_total"         // messages sent (after the commit of SendInTx)
	MetricReceived     = "lucius_bus_messages_received_total"     // messages delivered by Receive
	MetricSettled      = "lucius_bus_messages_settled_total"      // settlements, by outcome: complete, abandon, deadletter
	MetricRenewals     = "lucius_bus_lock_renewals_total"         // successful RenewLock calls
	MetricLocksLost    = "lucius_bus_locks_lost_total"            // settlements and renewals that failed with ErrLockLost, by operation
	MetricDeadLettered = "lucius_bus_messages_deadlettered_total" // messages moved to a dead-letter queue, by reason
	MetricExpired      = "lucius_bus_messages_expired_total"      // messages past their TTL dropped (not dead-lettered)
	MetricDepth        = "lucius_bus_queue_depth"                 // messages of each queue, subscription and dead-letter queue, by state: active, scheduled
	MetricOldestAge    = "lucius_bus_oldest_message_age_seconds"  // age of the oldest active message of each of them (0: none)
)

// Values of the attribute reason of MetricDeadLettered besides the bus's own
// (bus.ReasonMaxDeliveryCountExceeded, bus.ReasonTTLExpired): a receiver's
// DeadLetter call, whatever its reason (kept out of the attribute: callers'
// reasons are unbounded).
const reasonApplication = "application"

// depthTimeout bounds the query behind the depth gauges.
const depthTimeout = 5 * time.Second

// instruments are the Bus's metrics and tracer.
type instruments struct {
	tracer       trace.Tracer
	prop         propagation.TextMapPropagator
	sent         metric.Int64Counter
	received     metric.Int64Counter
	settled      metric.Int64Counter
	renewals     metric.Int64Counter
	locksLost    metric.Int64Counter
	deadLettered metric.Int64Counter
	expired      metric.Int64Counter
	depth        metric.Registration
}

func newInstruments(b *Bus, cfg Config) (*instruments, error) {
	meter := cfg.MeterProvider.Meter("lucius/bus")
	in := &instruments{tracer: cfg.TracerProvider.Tracer("lucius/bus"), prop: cfg.Propagator}
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	in.sent = counter(MetricSent, "Messages sent to the PostgreSQL bus, by entity.")
	in.received = counter(MetricReceived, "Messages received from the PostgreSQL bus, by entity.")
	in.settled = counter(MetricSettled, "Messages settled, by entity and outcome (complete, abandon, deadletter).")
	in.renewals = counter(MetricRenewals, "Message locks renewed, by entity.")
	in.locksLost = counter(MetricLocksLost, "Settlements and lock renewals refused because the lock was lost, by entity and operation.")
	in.deadLettered = counter(MetricDeadLettered, "Messages moved to a dead-letter queue, by entity and reason.")
	in.expired = counter(MetricExpired, "Messages past their time to live dropped, by entity.")
	depth, err := meter.Int64ObservableGauge(MetricDepth,
		metric.WithDescription("Messages in each queue, subscription and dead-letter queue, by state (active, scheduled)."))
	errs = append(errs, err)
	age, err := meter.Float64ObservableGauge(MetricOldestAge, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest active message of each queue, subscription and dead-letter queue."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("pgbus: metrics: %w", err)
	}
	in.depth, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		return b.observeDepth(ctx, o, depth, age)
	}, depth, age)
	if err != nil {
		return nil, fmt.Errorf("pgbus: metrics: %w", err)
	}
	return in, nil
}

// observeDepth reports every receivable path's depth and oldest message age.
// Every process on the database reports the same values; aggregate with max.
func (b *Bus) observeDepth(ctx context.Context, o metric.Observer, depth metric.Int64ObservableGauge, age metric.Float64ObservableGauge) error {
	if b.closed() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, depthTimeout)
	defer cancel()
	rows, err := b.pool.Query(ctx, qDepth)
	if err != nil {
		return fmt.Errorf("pgbus: queue depth: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			path              string
			active, scheduled int64
			oldest            float64
		)
		if err := rows.Scan(&path, &active, &scheduled, &oldest); err != nil {
			return fmt.Errorf("pgbus: queue depth: %w", err)
		}
		entity := attribute.String("entity", path)
		o.ObserveInt64(depth, active, metric.WithAttributes(entity, attribute.String("state", "active")))
		o.ObserveInt64(depth, scheduled, metric.WithAttributes(entity, attribute.String("state", "scheduled")))
		o.ObserveFloat64(age, oldest, metric.WithAttributes(entity))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgbus: queue depth: %w", err)
	}
	return nil
}

func entityAttr(path string) metric.AddOption {
	return metric.WithAttributes(attribute.String("entity", path))
}

// settledOK counts a settlement; lockLost counts a lost lock.
func (in *instruments) settledOK(ctx context.Context, path, outcome string) {
	in.settled.Add(ctx, 1, metric.WithAttributes(attribute.String("entity", path), attribute.String("outcome", outcome)))
}

func (in *instruments) lockLost(ctx context.Context, path, operation string, err error) {
	if errors.Is(err, bus.ErrLockLost) {
		in.locksLost.Add(ctx, 1, metric.WithAttributes(attribute.String("entity", path), attribute.String("operation", operation)))
	}
}

func (in *instruments) deadLetteredN(ctx context.Context, path, reason string, n int64) {
	if n > 0 {
		in.deadLettered.Add(ctx, n, metric.WithAttributes(attribute.String("entity", path), attribute.String("reason", reason)))
	}
}

// startSend starts the span of a send and puts its trace context in the
// application properties of every message that carries none yet: a message
// written by a traced producer (the engine's outbox rows) keeps its
// producer's context, so its consumer continues the producer's trace.
// Properties maps are copied, never changed in place.
func (in *instruments) startSend(ctx context.Context, entity string, msgs []bus.Message) (context.Context, trace.Span, []bus.Message) {
	ctx, span := in.tracer.Start(ctx, "send "+entity, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(messagingAttrs("send", entity, len(msgs))...))
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

// endSpan records err on span and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// receivedFrom records a claim that delivered msgs: the counter, and a span from
// the claim's start linked to the trace context each message carries.
func (in *instruments) receivedFrom(ctx context.Context, path string, start time.Time, msgs []*bus.Received) {
	in.received.Add(ctx, int64(len(msgs)), entityAttr(path))
	links := make([]trace.Link, 0, len(msgs))
	for _, m := range msgs {
		mctx := in.prop.Extract(context.Background(), bus.PropertiesCarrier(m.Properties))
		if sc := trace.SpanContextFromContext(mctx); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	_, span := in.tracer.Start(ctx, "receive "+path, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(start), trace.WithLinks(links...),
		trace.WithAttributes(messagingAttrs("receive", path, len(msgs))...))
	span.End()
}

func messagingAttrs(operation, entity string, n int) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "lucius_pgbus"),
		attribute.String("messaging.operation.name", operation),
		attribute.String("messaging.destination.name", entity),
		attribute.Int("messaging.batch.message_count", n),
	}
}
