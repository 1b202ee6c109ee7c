package server

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// ReadyFunc reports whether the process can serve (its dependencies answer).
type ReadyFunc func(ctx context.Context) error

// NewHTTPMux returns the HTTP surface of a service: the grpc-gateway REST mux
// (may be nil) at /, /healthz (alive), /readyz (ready runs), and the operations
// handler (telemetry.Telemetry.Ops) at /metrics and /debug/pprof/.
func NewHTTPMux(rest http.Handler, ops http.Handler, ready ReadyFunc) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	if ops != nil {
		mux.Handle("GET /metrics", ops)
		mux.Handle("/debug/pprof/", ops)
	}
	if rest != nil {
		mux.Handle("/", otelhttp.NewHandler(rest, "rest", otelhttp.WithSpanNameFormatter(
			func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path })))
	}
	return mux
}

// NewRESTMux returns a grpc-gateway mux with Lucius's JSON conventions: proto
// field names (snake_case, as in the seeds) and enum names on output; both
// snake_case and camelCase accepted on input, nested at most
// l.MaxJSONDepth levels. A request refused for its size (see LimitBody)
// answers 413; an error carrying RetryInfo (e.g. RESOURCE_EXHAUSTED → 429)
// gets a Retry-After header.
func NewRESTMux(l Limits, opts ...runtime.ServeMuxOption) *runtime.ServeMux {
	l.Defaults()
	jsonPb := &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false, RecursionLimit: l.MaxJSONDepth},
	}
	opts = append([]runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, jsonPb),
		runtime.WithMarshalerOption(MIMEEventStream, eventStream{jsonPb}),
		runtime.WithErrorHandler(restErrors),
	}, opts...)
	return runtime.NewServeMux(opts...)
}

// retryAfterErrors writes grpc-gateway's error answer, with Retry-After
// (whole seconds, at least 1) when the status says when to retry, and with
// WWW-Authenticate on 401.
func retryAfterErrors(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if status.Code(err) == codes.Unauthenticated {
		challenge := `Bearer realm="lucius"`
		if r.Header.Get("Authorization") != "" {
			challenge += `, error="invalid_token"`
		}
		// grpc-gateway puts the status message in WWW-Authenticate; RFC 6750 wants a challenge.
		w = challengeWriter{ResponseWriter: w, challenge: challenge}
	}
	if st, ok := status.FromError(err); ok {
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				secs := int(math.Ceil(ri.GetRetryDelay().AsDuration().Seconds()))
				w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
			}
		}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// challengeWriter sets WWW-Authenticate just before the header is written.
type challengeWriter struct {
	http.ResponseWriter
	challenge string
}

func (c challengeWriter) WriteHeader(code int) {
	c.Header().Set("WWW-Authenticate", c.challenge)
	c.ResponseWriter.WriteHeader(code)
}

// MIMEEventStream asks for Server-Sent Events: a streaming RPC (WatchJob)
// then answers each message as one "data:" event, for browsers'
// EventSource; other clients get one JSON object a line.
const MIMEEventStream = "text/event-stream"

// eventStream marshals answers as Server-Sent Events.
type eventStream struct{ *runtime.JSONPb }

// ContentType is text/event-stream.
func (eventStream) ContentType(any) string { return MIMEEventStream }

// Marshal writes one event's data line (JSON holds no raw newline).
func (m eventStream) Marshal(v any) ([]byte, error) {
	b, err := m.JSONPb.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte("data: "), b...), nil
}

// Delimiter ends an event.
func (eventStream) Delimiter() []byte { return []byte("\n\n") }
