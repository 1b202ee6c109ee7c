// Package busteltest checks what a bus transport reports through package
// bustel. A Recorder holds meter and tracer providers to build the Bus with
// and reads back what it recorded; TestSendAndReceiveSpans is the trace
// check every transport passes:
//
//	rec := busteltest.NewRecorder()
//	b := newBus(t, Config{MeterProvider: rec.MeterProvider, TracerProvider: rec.TracerProvider,
//		Propagator: propagation.TraceContext{}})
//	busteltest.TestSendAndReceiveSpans(t, b, rec, "q")
package busteltest

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lucius-platform/lucius/bus"
)

// eventually bounds a wait for messages that must arrive.
const eventually = 15 * time.Second

// Recorder records a Bus's metrics and spans. Build the Bus with its
// MeterProvider and TracerProvider, and propagation.TraceContext{}.
type Recorder struct {
	MeterProvider  *sdkmetric.MeterProvider
	TracerProvider *sdktrace.TracerProvider
	Reader         *sdkmetric.ManualReader
	Spans          *tracetest.SpanRecorder
}

// NewRecorder returns a Recorder with its own providers.
func NewRecorder() *Recorder {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	return &Recorder{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		Reader:         reader,
		Spans:          spans,
	}
}

// Entity is the attribute entity of the bus's metrics.
func Entity(path string) attribute.KeyValue { return attribute.String("entity", path) }

// Metrics are what a collection gathered.
type Metrics metricdata.ResourceMetrics

// Collect collects the metrics, running the depth callback. err is the
// callback's; the metrics are collected anyway, as an exporter does.
func (r *Recorder) Collect() (Metrics, error) {
	var rm metricdata.ResourceMetrics
	err := r.Reader.Collect(context.Background(), &rm)
	return Metrics(rm), err
}

// Value collects the metrics and returns their Value, failing t if the
// collection reports an error.
func (r *Recorder) Value(t testing.TB, name string, attrs ...attribute.KeyValue) (v float64, ok bool) {
	t.Helper()
	m, err := r.Collect()
	if err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	return m.Value(name, attrs...)
}

// Value returns the sum or gauge value of metric name at the point whose
// attributes include attrs; ok is false when there is no such point.
func (m Metrics) Value(name string, attrs ...attribute.KeyValue) (v float64, ok bool) {
	matches := func(set attribute.Set) bool {
		for _, kv := range attrs {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range m.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						return float64(p.Value), true
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						return float64(p.Value), true
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						return p.Value, true
					}
				}
			}
		}
	}
	return 0, false
}

// TestSendAndReceiveSpans checks, on queue (which it declares), that sends
// and receives are spans: a send puts its span's trace context in the
// properties of messages carrying none (the receive span links to it) and
// leaves the producer's context of a message that has one.
func TestSendAndReceiveSpans(t *testing.T, b bus.Bus, rec *Recorder, queue string) {
	t.Helper()
	ctx := t.Context()
	if err := b.EnsureQueue(ctx, queue, bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	producer := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled})
	carried := bus.PropertiesCarrier{"kind": "x"}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), producer), carried)

	s, err := b.NewSender(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx) //nolint:errcheck
	plain := map[string]string{"kind": "y"}
	if err := s.Send(ctx, bus.Message{ID: "plain", Properties: plain}, bus.Message{ID: "carried", Properties: carried}); err != nil {
		t.Fatal(err)
	}
	if len(plain) != 1 {
		t.Fatalf("send changed the caller's properties: %v", plain)
	}
	r, err := b.NewReceiver(ctx, bus.QueueSource(queue))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx) //nolint:errcheck
	msgs := receiveN(t, r, 2)

	var sendSpan sdktrace.ReadOnlySpan
	var receiveSpans []sdktrace.ReadOnlySpan
	for _, sp := range rec.Spans.Ended() {
		switch sp.Name() {
		case "send " + queue:
			sendSpan = sp
		case "receive " + queue:
			receiveSpans = append(receiveSpans, sp)
		}
	}
	if sendSpan == nil || len(receiveSpans) == 0 {
		t.Fatalf("spans %v; want send %s and receive %s", rec.Spans.Ended(), queue, queue)
	}
	if sendSpan.SpanKind() != trace.SpanKindProducer {
		t.Errorf("send span kind %v, want producer", sendSpan.SpanKind())
	}
	var linked []trace.SpanID
	for _, sp := range receiveSpans {
		if sp.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("receive span kind %v, want consumer", sp.SpanKind())
		}
		for _, l := range sp.Links() {
			linked = append(linked, l.SpanContext.SpanID())
		}
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
	// One link per message, to the context it carries, however many
	// receives delivered them.
	if len(linked) != 2 || !slices.Contains(linked, sendSpan.SpanContext().SpanID()) || !slices.Contains(linked, producer.SpanID()) {
		t.Errorf("receive spans link to spans %v, want %s (the send) and %s (the producer)", linked, sendSpan.SpanContext().SpanID(), producer.SpanID())
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
