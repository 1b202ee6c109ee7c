package sbbus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/lucius-platform/lucius/base/sbtest"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustel"
	"github.com/lucius-platform/lucius/bus/bustel/busteltest"
	"github.com/lucius-platform/lucius/bus/sbbus"
)

// newTelemetryBus returns a Bus on broker reporting to rec, reading the
// depth gauges afresh every depthInterval.
func newTelemetryBus(t *testing.T, broker *sbtest.Broker, rec *busteltest.Recorder, depthInterval time.Duration) *sbbus.Bus {
	t.Helper()
	return newBus(t, broker, sbbus.Config{
		MeterProvider:  rec.MeterProvider,
		TracerProvider: rec.TracerProvider,
		Propagator:     propagation.TraceContext{},
		DepthInterval:  depthInterval,
	})
}

var entity = busteltest.Entity

// Every operation of the adapter is counted per entity: sends, deliveries,
// settlements by outcome, renewals, lost locks (found by the adapter or by
// Service Bus) and the application's dead letters; the depth gauges report
// each queue's, subscription's and dead-letter queue's active messages, the
// messages scheduled to a queue or a topic, and the oldest active message's
// age, from the runtime properties and a peek.
func TestMetricsCountEveryOperationPerEntity(t *testing.T) {
	broker := sbtest.Start(t)
	ctx := t.Context()
	rec := busteltest.NewRecorder()
	b := newTelemetryBus(t, broker, rec, time.Nanosecond)
	for name, opts := range map[string]bus.QueueOptions{
		"work":  {MaxDeliveryCount: 2},
		"short": {LockDuration: 300 * time.Millisecond},
		"idle":  {},
	} {
		if err := b.EnsureQueue(ctx, name, opts); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.EnsureTopic(ctx, "events", bus.TopicOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureSubscription(ctx, "events", "all", bus.SubscriptionOptions{}); err != nil {
		t.Fatal(err)
	}
	send := func(entity string, msgs ...bus.Message) {
		t.Helper()
		s, err := b.NewSender(ctx, entity)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx) //nolint:errcheck
		if err := s.Send(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Hour)
	send("work", bus.Message{ID: "a"}, bus.Message{ID: "b"}, bus.Message{ID: "c"}, bus.Message{ID: "d"},
		bus.Message{ID: "later", ScheduledAt: later})
	send("short", bus.Message{ID: "e"})
	send("events", bus.Message{ID: "f"}, bus.Message{ID: "g", ScheduledAt: later})

	r := mustReceiver(t, b, bus.QueueSource("work"))
	byID := map[string]*bus.Received{}
	for _, m := range receiveN(t, r, 4) {
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
	if err := r.Abandon(ctx, again[0]); err != nil { // used up: Service Bus dead-letters it
		t.Fatal(err)
	}
	// "d" stays locked, "later" scheduled.

	rs := mustReceiver(t, b, bus.QueueSource("short"))
	e := receiveN(t, rs, 1)[0]
	time.Sleep(time.Until(e.LockedUntil) + 200*time.Millisecond)
	if _, err := rs.RenewLock(ctx, e); !errors.Is(err, bus.ErrLockLost) {
		t.Fatalf("renew after the lock expired: %v, want ErrLockLost", err)
	}

	m, err := rec.Collect()
	if err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	for _, tt := range []struct {
		metric string
		attrs  []attribute.KeyValue
		want   float64
	}{
		{bustel.MetricSent, []attribute.KeyValue{entity("work")}, 5},
		{bustel.MetricSent, []attribute.KeyValue{entity("short")}, 1},
		{bustel.MetricSent, []attribute.KeyValue{entity("events")}, 2},
		{bustel.MetricReceived, []attribute.KeyValue{entity("work")}, 5},
		{bustel.MetricReceived, []attribute.KeyValue{entity("short")}, 1},
		{bustel.MetricSettled, []attribute.KeyValue{entity("work"), attribute.String("outcome", "complete")}, 1},
		{bustel.MetricSettled, []attribute.KeyValue{entity("work"), attribute.String("outcome", "abandon")}, 2},
		{bustel.MetricSettled, []attribute.KeyValue{entity("work"), attribute.String("outcome", "deadletter")}, 1},
		{bustel.MetricRenewals, []attribute.KeyValue{entity("work")}, 1},
		{bustel.MetricLocksLost, []attribute.KeyValue{entity("work"), attribute.String("operation", "complete")}, 1},
		{bustel.MetricLocksLost, []attribute.KeyValue{entity("short"), attribute.String("operation", "renew")}, 1},
		{bustel.MetricDeadLettered, []attribute.KeyValue{entity("work"), attribute.String("reason", "application")}, 1},
		{bustel.MetricDepth, []attribute.KeyValue{entity("work"), attribute.String("state", "active")}, 1},
		{bustel.MetricDepth, []attribute.KeyValue{entity("work"), attribute.String("state", "scheduled")}, 1},
		{bustel.MetricDepth, []attribute.KeyValue{entity("work/$deadletterqueue"), attribute.String("state", "active")}, 2},
		{bustel.MetricDepth, []attribute.KeyValue{entity("short"), attribute.String("state", "active")}, 1},
		{bustel.MetricDepth, []attribute.KeyValue{entity("events/subscriptions/all"), attribute.String("state", "active")}, 1},
		{bustel.MetricDepth, []attribute.KeyValue{entity("events"), attribute.String("state", "scheduled")}, 1},
		{bustel.MetricDepth, []attribute.KeyValue{entity("idle"), attribute.String("state", "active")}, 0},
		{bustel.MetricDepth, []attribute.KeyValue{entity("idle/$deadletterqueue"), attribute.String("state", "active")}, 0},
		{bustel.MetricOldestAge, []attribute.KeyValue{entity("idle")}, 0},
	} {
		if got, ok := m.Value(tt.metric, tt.attrs...); got != tt.want || !ok {
			t.Errorf("%s%v = %v (reported: %v), want %v", tt.metric, tt.attrs, got, ok, tt.want)
		}
	}
	for _, path := range []string{"work", "work/$deadletterqueue", "short", "events/subscriptions/all"} {
		if age, _ := m.Value(bustel.MetricOldestAge, entity(path)); age <= 0 || age > 60 {
			t.Errorf("%s{%s} = %v, want the age of its oldest message (0 < age <= 60s)", bustel.MetricOldestAge, path, age)
		}
	}
}

// A reading of the depth gauges is reused for DepthInterval: collections in
// between do not ask Service Bus again.
func TestDepthReadingIsReusedForTheInterval(t *testing.T) {
	broker := sbtest.Start(t)
	ctx := t.Context()
	rec := busteltest.NewRecorder()
	b := newTelemetryBus(t, broker, rec, time.Hour)
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	depth := func() float64 {
		t.Helper()
		v, ok := rec.Value(t, bustel.MetricDepth, entity("q"), attribute.String("state", "active"))
		if !ok {
			t.Fatalf("no %s for q", bustel.MetricDepth)
		}
		return v
	}
	if got := depth(); got != 0 {
		t.Fatalf("depth of the new queue %v, want 0", got)
	}
	s, err := b.NewSender(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, bus.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	if got := depth(); got != 0 {
		t.Errorf("depth within the interval %v, want the first reading, 0", got)
	}
}

// A negative DepthInterval turns the depth gauges off; the counters stay.
func TestNegativeDepthIntervalReportsNoDepth(t *testing.T) {
	broker := sbtest.Start(t)
	ctx := t.Context()
	rec := busteltest.NewRecorder()
	b := newTelemetryBus(t, broker, rec, -1)
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := b.NewSender(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, bus.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	if v, ok := rec.Value(t, bustel.MetricDepth, entity("q")); ok {
		t.Errorf("%s{q} = %v with DepthInterval -1, want no point", bustel.MetricDepth, v)
	}
	if v, _ := rec.Value(t, bustel.MetricSent, entity("q")); v != 1 {
		t.Errorf("%s{q} = %v, want 1", bustel.MetricSent, v)
	}
}

// Sends and receives are spans carrying trace context in the application
// properties, as on every transport.
func TestSendAndReceiveSpansCarryTraceContext(t *testing.T) {
	broker := sbtest.Start(t)
	rec := busteltest.NewRecorder()
	busteltest.TestSendAndReceiveSpans(t, newTelemetryBus(t, broker, rec, 0), rec, "q")
}

func mustReceiver(t *testing.T, b bus.Bus, src bus.Source) bus.Receiver {
	t.Helper()
	r, err := b.NewReceiver(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) }) //nolint:errcheck
	return r
}

// receiveN receives until it has n messages (or fails the test).
func receiveN(t *testing.T, r bus.Receiver, n int) []*bus.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
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
