package bustel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/lucius-platform/lucius/bus/bustel"
	"github.com/lucius-platform/lucius/bus/bustel/busteltest"
)

// The depth gauges report what the DepthFunc read, also alongside an error
// (a partial reading), leave out an age the transport could not tell, and
// stop when the Instruments close.
func TestDepthGaugesReportTheTransportsReading(t *testing.T) {
	t.Parallel()
	rec := busteltest.NewRecorder()
	calls := 0
	in, err := bustel.New(bustel.Config{
		System:         "test",
		MeterProvider:  rec.MeterProvider,
		TracerProvider: rec.TracerProvider,
		Propagator:     propagation.TraceContext{},
		Depth: func(ctx context.Context) ([]bustel.Depth, error) {
			calls++
			if _, ok := ctx.Deadline(); !ok {
				t.Error("the depth callback's context has no deadline")
			}
			return []bustel.Depth{
				{Entity: "q", Active: 3, Scheduled: 1, OldestAge: 1500 * time.Millisecond},
				{Entity: "q/$deadletterqueue", Active: 2, OldestAge: -1},
			}, errors.New("the rest failed")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rec.Collect()
	if err == nil {
		t.Error("collect: no error, want the depth callback's")
	}
	state := func(s string) attribute.KeyValue { return attribute.String("state", s) }
	for _, tt := range []struct {
		metric string
		attrs  []attribute.KeyValue
		want   float64
		ok     bool
	}{
		{bustel.MetricDepth, []attribute.KeyValue{busteltest.Entity("q"), state("active")}, 3, true},
		{bustel.MetricDepth, []attribute.KeyValue{busteltest.Entity("q"), state("scheduled")}, 1, true},
		{bustel.MetricOldestAge, []attribute.KeyValue{busteltest.Entity("q")}, 1.5, true},
		{bustel.MetricDepth, []attribute.KeyValue{busteltest.Entity("q/$deadletterqueue"), state("active")}, 2, true},
		{bustel.MetricOldestAge, []attribute.KeyValue{busteltest.Entity("q/$deadletterqueue")}, 0, false},
	} {
		if got, ok := m.Value(tt.metric, tt.attrs...); got != tt.want || ok != tt.ok {
			t.Errorf("%s%v = %v (reported: %v), want %v (reported: %v)", tt.metric, tt.attrs, got, ok, tt.want, tt.ok)
		}
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	before := calls
	if _, ok := rec.Value(t, bustel.MetricDepth, busteltest.Entity("q")); ok || calls != before {
		t.Errorf("after Close: depth reported %v, callback called %d more times; want neither", ok, calls-before)
	}
}
