package pgbus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustel"
	"github.com/lucius-platform/lucius/bus/bustel/busteltest"
	"github.com/lucius-platform/lucius/bus/pgbus"
)

// telemetryBus is a Bus reporting to its own meter and tracer providers.
type telemetryBus struct {
	*pgbus.Bus
	rec *busteltest.Recorder
}

func newTelemetryBus(t *testing.T) telemetryBus {
	t.Helper()
	rec := busteltest.NewRecorder()
	b := newBus(t, newPool(t), pgbus.Config{
		MeterProvider:  rec.MeterProvider,
		TracerProvider: rec.TracerProvider,
		Propagator:     propagation.TraceContext{},
	})
	return telemetryBus{Bus: b, rec: rec}
}

// value returns the sum or gauge value of metric name at the point whose
// attributes include attrs (0 when there is none).
func (tb telemetryBus) value(t *testing.T, name string, attrs ...attribute.KeyValue) float64 {
	t.Helper()
	v, _ := tb.rec.Value(t, name, attrs...)
	return v
}

var entity = busteltest.Entity

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
	tb := newTelemetryBus(t)
	busteltest.TestSendAndReceiveSpans(t, tb.Bus, tb.rec, "q")
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
