// Package telemetrytest reads back, in tests, the metrics code records
// through OpenTelemetry.
package telemetrytest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Reader collects what a meter provider of its own recorded.
type Reader struct {
	// Provider is the meter provider to record with.
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// New returns a Reader with its own meter provider.
func New() *Reader {
	reader := sdkmetric.NewManualReader()
	return &Reader{Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), reader: reader}
}

// InstallGlobal returns a Reader whose provider is the OpenTelemetry global,
// for code whose instruments are on the global provider. Call it once per
// test binary, in TestMain: instruments made from the global provider before
// it is set are bound to the first provider set. The metrics are the whole
// binary's, so a test reads what it caused as the change across its run.
func InstallGlobal() *Reader {
	r := New()
	otel.SetMeterProvider(r.Provider)
	return r
}

func (r *Reader) collect(t testing.TB) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	return rm
}

// Value returns the total of the counter or gauge name over its points whose
// attributes include attrs (0 when there is none).
func (r *Reader) Value(t testing.TB, name string, attrs ...attribute.KeyValue) float64 {
	t.Helper()
	var v float64
	for _, m := range r.metrics(t, name) {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				if includes(p.Attributes, attrs) {
					v += float64(p.Value)
				}
			}
		case metricdata.Sum[float64]:
			for _, p := range d.DataPoints {
				if includes(p.Attributes, attrs) {
					v += p.Value
				}
			}
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				if includes(p.Attributes, attrs) {
					v += float64(p.Value)
				}
			}
		case metricdata.Gauge[float64]:
			for _, p := range d.DataPoints {
				if includes(p.Attributes, attrs) {
					v += p.Value
				}
			}
		default:
			t.Fatalf("metric %s is a %T, not a counter or gauge", name, m.Data)
		}
	}
	return v
}

// Histogram returns the count and sum of the float histogram name over its
// points whose attributes include attrs.
func (r *Reader) Histogram(t testing.TB, name string, attrs ...attribute.KeyValue) (count uint64, sum float64) {
	t.Helper()
	for _, m := range r.metrics(t, name) {
		h, ok := m.Data.(metricdata.Histogram[float64])
		if !ok {
			t.Fatalf("metric %s is a %T, not a float histogram", name, m.Data)
		}
		for _, p := range h.DataPoints {
			if includes(p.Attributes, attrs) {
				count += p.Count
				sum += p.Sum
			}
		}
	}
	return count, sum
}

func (r *Reader) metrics(t testing.TB, name string) []metricdata.Metrics {
	t.Helper()
	var out []metricdata.Metrics
	for _, sm := range r.collect(t).ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				out = append(out, m)
			}
		}
	}
	return out
}

func includes(set attribute.Set, attrs []attribute.KeyValue) bool {
	for _, kv := range attrs {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}
