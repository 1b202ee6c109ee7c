// Package telemetry sets up what every Lucius process reports: structured logs
// (log/slog, JSON, with trace and span ids from the context), OpenTelemetry
// traces (exported as the standard OTEL_* environment says, through the
// contrib autoexport package; always propagated across gRPC and the bus) and
// metrics (served for Prometheus at /metrics).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config describes a process's telemetry.
type Config struct {
	// Service is the service name, e.g. "gateway". Required.
	Service string
	// Instance distinguishes replicas, e.g. "orchestrator-2".
	Instance string
	// LogLevel: debug, info (default), warn, error.
	LogLevel string
	// LogFormat: json (default) or text.
	LogFormat string
	// LogOutput defaults to stderr.
	LogOutput io.Writer
	// SpanExporter overrides the exporter the environment configures; tests
	// use an in-memory exporter.
	SpanExporter sdktrace.SpanExporter
	// Pprof serves Go's profiler at /debug/pprof/ next to /metrics.
	Pprof bool
}

// Validate reports a missing or unknown setting.
func (c Config) Validate() error {
	var errs []error
	if c.Service == "" {
		errs = append(errs, errors.New("telemetry: Service is required"))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if c.LogFormat != "" && c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, errors.New("telemetry: LogFormat must be json or text"))
	}
	return errors.Join(errs...)
}

// Telemetry is a process's configured providers.
type Telemetry struct {
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Ops serves /metrics (Prometheus) and, when enabled, /debug/pprof/.
	Ops http.Handler
	// Exporting reports whether spans are exported (recorded at all): the
	// database tracer is installed only then.
	Exporting bool
	shutdown  []func(context.Context) error
}

// Setup builds the providers and installs them as the OpenTelemetry globals
// (with W3C trace-context and baggage propagation).
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	level, _ := parseLevel(cfg.LogLevel)
	out := cfg.LogOutput
	if out == nil {
		out = os.Stderr
	}
	opts := &slog.HandlerOptions{Level: level}
	var handler slog.Handler = slog.NewJSONHandler(out, opts)
	if cfg.LogFormat == "text" {
		handler = slog.NewTextHandler(out, opts)
	}
	attrs := []slog.Attr{slog.String(KeyService, cfg.Service)}
	if cfg.Instance != "" {
		attrs = append(attrs, slog.String(KeyInstance, cfg.Instance))
	}
	logger := slog.New(traceHandler{handler.WithAttrs(attrs)})

	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{Logger: logger}

	exporter := cfg.SpanExporter
	if exporter == nil {
		if exporter, err = envSpanExporter(ctx); err != nil {
			return nil, err
		}
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if exporter != nil {
		// The sampler comes from OTEL_TRACES_SAMPLER (default: parent-based,
		// always on).
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exporter))
		t.Exporting = true
	} else {
		// Nothing reads the spans: record none. Their contexts (trace and
		// span ids) still travel across gRPC and the bus and mark the logs.
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	t.TracerProvider = tp
	t.shutdown = append(t.shutdown, tp.Shutdown)

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	promExporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(promExporter), sdkmetric.WithResource(res))
	t.MeterProvider = mp
	t.shutdown = append(t.shutdown, mp.Shutdown)
	ops := http.NewServeMux()
	ops.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	if cfg.Pprof {
		ops.HandleFunc("/debug/pprof/", pprof.Index)
		ops.HandleFunc("/debug/pprof/profile", pprof.Profile)
		ops.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	t.Ops = ops

	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return t, nil
}

// newResource describes the process: service.name "lucius-<service>" and
// service.instance.id, then what OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES say (they win), and the SDK's own attributes.
func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "lucius-"+cfg.Service),
			attribute.String("service.instance.id", cfg.Instance)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if errors.Is(err, resource.ErrPartialResource) {
		err = nil // a malformed OTEL_RESOURCE_ATTRIBUTES entry is skipped, the rest kept
	}
	return res, err
}

// envSpanExporter is the span exporter the standard environment configures
// (OTEL_TRACES_EXPORTER: otlp, console or none; OTEL_EXPORTER_OTLP_PROTOCOL:
// http/protobuf, the default, or grpc; OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT,
// _HEADERS, _CERTIFICATE, _INSECURE…): TLS unless the endpoint's scheme is
// http or OTEL_EXPORTER_OTLP_INSECURE is true. nil when the environment
// names neither an exporter nor an endpoint, or names none.
func envSpanExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	if os.Getenv("OTEL_TRACES_EXPORTER") == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" &&
		os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: span exporter from OTEL_* environment: %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return nil, nil
	}
	return exp, nil
}

// Shutdown flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if s == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, errors.New("telemetry: LogLevel must be debug, info, warn or error")
	}
	return l, nil
}

// traceHandler adds trace_id and span_id to records logged with a context that
// carries a span, so logs and traces join up.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String(KeyTraceID, sc.TraceID().String()), slog.String(KeySpanID, sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
