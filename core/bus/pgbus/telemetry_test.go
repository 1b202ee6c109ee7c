package pgbus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lucius-platform/lucius/core/bus"
	"github.com/lucius-platform/lucius/core/bus/bustel"
	"github.com/lucius-platform/lucius/core/bus/pgbus"
)

// telemetryBus is a Bus reporting to its own meter and tracer providers.
type telemetryBus struct {
	*pgbus.Bus
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

func newTelemetryBus(t *testing.T) telemetryBus {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	b := newBus(t, newPool(t), pgbus.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		Propagator:     propagation.TraceContext{},
	})
	return telemetryBus{Bus: b, reader: reader, spans: spans}
}

// value returns the sum or gauge value of metric name at the point whose
// attributes include attrs (0 when there is none).
func (tb telemetryBus) value(t *testing.T, name string, attrs ...attribute.KeyValue) float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tb.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	matches := func(set attribute.Set) bool {
		for _, kv := range attrs {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						return float64(p.Value)
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						return float64(p.Value)
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						return p.Value
					}
				}
			}
		}
	}
	return 0
}

func entity(path string) attribute.KeyValue { return attribute.String("entity", path) }

// Every operation of the bus is counted per entity: sends, deliveries,
// settlements by outcome, renewals, lost locks, dead letters by reason
// (the bus's own and the application's) and expired messages dropped; the
// depth gauges count each queue's and dead-letter queue's messages, active
// and scheduled, and the age of the oldest active one.
func TestMetricsCountEveryOperationPerEntity(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tb := newTelemetryBus(t)
	for name, opts := range map[string]bus.QueueOptions{
		"work":    {MaxDeliveryCount: 2},
		"expires": {DeadLetterOnExpiration: true},
		"drops":   {},
		"idle":    {},
	} {
		if err := tb.EnsureQueue(ctx, name, opts); err != nil {
			t.Fatal(err)
		}
	}
	send := func(entity string, msgs ...bus.Message) {
		t.Helper()
		s, err := tb.NewSender(ctx, entity)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx) //nolint:errcheck
		if err := s.Send(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	send("work", bus.Message{ID: "a"}, bus.Message{ID: "b"}, bus.Message{ID: "c"}, bus.Message{ID: "d"},
		bus.Message{ID: "later", ScheduledAt: time.Now().Add(time.Hour)})
	send("expires", bus.Message{ID: "e", TTL: time.Millisecond})
	send("drops", bus.Message{ID: "f", TTL: time.Millisecond})

	r := mustReceiver(t, tb.Bus, bus.QueueSource("work"))
	msgs := receiveN(t, r, 4)
	byID := map[string]*bus.Received{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	if _, err := r.RenewLock(ctx, byID["a"]); err != nil {
		t.Fatal(err)
	}
	if err := r.Complete(ctx, byID["a"]); err != nil {
		t.Fatal(err)
	}
	if err := r.Complete(ctx, byID["a"]); !errors.Is(err, bus.ErrLockLost) {
		t.Fatalf("second complete: %v, want ErrLockLost", err)
	}
	if err := r.DeadLetter(ctx, byID["b"], "Poison", "bad body"); err != nil {
		t.Fatal(err)
	}
	if err := r.Abandon(ctx, byID["c"]); err != nil { // delivered again: its second and last delivery
		t.Fatal(err)
	}
	again := receiveN(t, r, 1)
	if err := r.Abandon(ctx, again[0]); err != nil { // used up: dead-lettered
		t.Fatal(err)
	}
	// "d" stays locked, "later" scheduled.

	time.Sleep(5 * time.Millisecond) // "e" and "f" expire
	for _, q := range []string{"expires", "drops"} {
		rq := mustReceiver(t, tb.Bus, bus.QueueSource(q))
		wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		got, err := rq.Receive(wait, 10)
		cancel()
		if len(got) != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive from %s: %v, %v; want nothing (expired)", q, got, err)
		}
	}

	for _, tt := range []struct {
		metric string
		attrs  []attribute.KeyValue
		want   float64
	}{
		{bustel.MetricSent, []attribute.KeyValue{entity("work")}, 5},
		{bustel.MetricSent, []attribute.KeyValue{entity("expires")}, 1},
		{bustel.MetricReceived, []attribute.KeyValue{entity("work")}, 5},
		{bustel.MetricSettled, []attribute.KeyValue{entity("work"), attribute.String("outcome", "complete")}, 1},
		{bustel.MetricSettled, []attribute.KeyValue{entity("work"), attribute.String("outcome", "abandon")}, 2},
		{bustel.MetricSettled, []attribute.KeyValue{entity("work"), attribute.String("outcome", "deadletter")}, 1},
		{bustel.MetricRenewals, []attribute.KeyValue{entity("work")}, 1},
		{bustel.MetricLocksLost, []attribute.KeyValue{entity("work"), attribute.String("operation", "complete")}, 1},
		{bustel.MetricDeadLettered, []attribute.KeyValue{entity("work"), attribute.String("reason", "application")}, 1},
		{bustel.MetricDeadLettered, []attribute.KeyValue{entity("work"), attribute.String("reason", bus.ReasonMaxDeliveryCountExceeded)}, 1},
		{bustel.MetricDeadLettered, []attribute.KeyValue{entity("expires"), attribute.String("reason", bus.ReasonTTLExpired)}, 1},
		{bustel.MetricExpired, []attribute.KeyValue{entity("drops")}, 1},
		{bustel.MetricDepth, []attribute.KeyValue{entity("work"), attribute.String("state", "active")}, 1},
		{bustel.MetricDepth, []attribute.KeyValue{entity("work"), attribute.String("state", "scheduled")}, 1},
		{bustel.MetricDepth, []attribute.KeyValue{entity("work/$deadletterqueue"), attribute.String("state", "active")}, 2},
		{bustel.MetricDepth, []attribute.KeyValue{entity("expires/$deadletterqueue"), attribute.String("state", "active")}, 1},
		{bustel.MetricDepth, []attribute.KeyValue{entity("drops"), attribute.String("state", "active")}, 0},
		{bustel.MetricDepth, []attribute.KeyValue{entity("idle"), attribute.String("state", "active")}, 0},
		{bustel.MetricOldestAge, []attribute.KeyValue{entity("idle")}, 0},
	} {
		if got := tb.value(t, tt.metric, tt.attrs...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.metric, tt.attrs, got, tt.want)
		}
	}
	if age := tb.value(t, bustel.MetricOldestAge, entity("work")); age <= 0 || age > 60 {
		t.Errorf("%s{work} = %v, want the age of the locked message (0 < age <= 60s)", bustel.MetricOldestAge, age)
	}
}

// Sends and receives are spans; a send puts its span's trace context in the
// properties of messages carrying none (the receive span links to it), and
// leaves the producer's context of a message that has one.
func TestSendAndReceiveSpansCarryTraceContext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tb := newTelemetryBus(t)
	if err := tb.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	producer := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled})
	carried := bus.PropertiesCarrier{"kind": "x"}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), producer), carried)

	s, err := tb.NewSender(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	plain := map[string]string{"kind": "y"}
	if err := s.Send(ctx, bus.Message{ID: "plain", Properties: plain}, bus.Message{ID: "carried", Properties: carried}); err != nil {
		t.Fatal(err)
	}
	if len(plain) != 1 {
		t.Fatalf("send changed the caller's properties: %v", plain)
	}
	msgs := receiveN(t, mustReceiver(t, tb.Bus, bus.QueueSource("q")), 2)

	var sendSpan, receiveSpan sdktrace.ReadOnlySpan
	for _, sp := range tb.spans.Ended() {
		switch sp.Name() {
		case "send q":
			sendSpan = sp
		case "receive q":
			receiveSpan = sp
		}
	}
	if sendSpan == nil || receiveSpan == nil {
		t.Fatalf("spans %v; want send q and receive q", tb.spans.Ended())
	}
	if sendSpan.SpanKind() != trace.SpanKindProducer || receiveSpan.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("span kinds %v, %v; want producer, consumer", sendSpan.SpanKind(), receiveSpan.SpanKind())
	}
	for _, m := range msgs {
		got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), bus.PropertiesCarrier(m.Properties)))
		want := sendSpan.SpanContext()
		if m.ID == "carried" {
			want = producer
		}
		if got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() {
			t.Errorf("message %s carries trace %s span %s, want %s %s", m.ID, got.TraceID(), got.SpanID(), want.TraceID(), want.SpanID())
		}
		if m.Properties["kind"] == "" {
			t.Errorf("message %s lost its own properties: %v", m.ID, m.Properties)
		}
	}
	if n := len(receiveSpan.Links()); n != 2 {
		t.Errorf("receive span has %d links, want one per message", n)
	}
}

// receiveN receives until it has n messages (or fails the test).
func receiveN(t *testing.T, r bus.Receiver, n int) []*bus.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	var got []*bus.Received
	for len(got) < n {
		msgs, err := r.Receive(ctx, n-len(got))
		if err != nil {
			t.Fatalf("received %d of %d messages: %v", len(got), n, err)
		}
		got = append(got, msgs...)
	}
	return got
}
