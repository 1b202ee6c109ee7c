package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The standard OTEL_* environment decides whether and where spans go.
func TestSpanExportFollowsTheStandardEnvironment(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		exporting bool
	}{
		{"nothing configured: spans propagate, none recorded", nil, false},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false},
		{"console exporter", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{"an OTLP endpoint alone", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, true},
		{"a traces endpoint over gRPC", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
				t.Setenv(k, tt.env[k])
			}
			tel, err := Setup(context.Background(), Config{Service: "test", LogOutput: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			_, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "s")
			defer func() {
				span.End()
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				tel.Shutdown(ctx) //nolint:errcheck // nothing listens at the endpoints
			}()
			if tel.Exporting != tt.exporting || span.IsRecording() != tt.exporting {
				t.Fatalf("exporting %v, span recording %v; want %v", tel.Exporting, span.IsRecording(), tt.exporting)
			}
			if !span.SpanContext().IsValid() {
				t.Fatal("a span without a valid context: trace ids would not travel")
			}
		})
	}
}

// Spans reach an OTLP/HTTP endpoint, described by the service's name and
// what OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES add.
func TestSpansReachAnOTLPEndpointWithTheEnvironmentsResource(t *testing.T) {
	var mu sync.Mutex
	var got []*coltrace.ExportTraceServiceRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &coltrace.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(out) //nolint:errcheck // the test reads what arrived
	}))
	defer srv.Close()
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test,k8s.pod.name=gw-1")
	tel, err := Setup(context.Background(), Config{Service: "gateway", Instance: "gateway-1", LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "submit")
	span.End()
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || len(got[0].GetResourceSpans()) == 0 {
		t.Fatal("no spans reached the endpoint")
	}
	rs := got[0].GetResourceSpans()[0]
	attrs := map[string]string{}
	for _, kv := range rs.GetResource().GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	want := map[string]string{"service.name": "lucius-gateway", "service.instance.id": "gateway-1",
		"deployment.environment.name": "test", "k8s.pod.name": "gw-1"}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("resource %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}
	if name := rs.GetScopeSpans()[0].GetSpans()[0].GetName(); name != "submit" {
		t.Errorf("span %q", name)
	}
}
