package server

import (
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"

	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Defaults of Limits.
const (
	DefaultMaxRequestBytes   = 1 << 20
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxJSONDepth      = 100
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
)

// Limits bound what a service's network surface accepts. Zero values take
// the defaults.
type Limits struct {
	// MaxRequestBytes bounds a request: a REST body (413 before it is read
	// when Content-Length says so, else as soon as reading passes it) and a
	// gRPC message (RESOURCE_EXHAUSTED). Default 1 MiB.
	MaxRequestBytes int
	// MaxHeaderBytes bounds an HTTP request's header (431 beyond). Default 64 KiB.
	MaxHeaderBytes int
	// MaxJSONDepth bounds the nesting of a REST body's JSON (each object or
	// list level of a payload counts one). Default 100.
	MaxJSONDepth int
	// ReadHeaderTimeout drops a connection that has not sent its header in
	// time (slow clients holding connections). Default 5s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included. Default 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its header to the end of
	// the answer (it must exceed the longest /debug/pprof/profile). Default 60s.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long. Default 2m.
	IdleTimeout time.Duration
}

// Defaults fills the unset limits.
func (l *Limits) Defaults() {
	setDefault(&l.MaxRequestBytes, DefaultMaxRequestBytes)
	setDefault(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setDefault(&l.MaxJSONDepth, DefaultMaxJSONDepth)
	setDefault(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setDefault(&l.ReadTimeout, DefaultReadTimeout)
	setDefault(&l.WriteTimeout, DefaultWriteTimeout)
	setDefault(&l.IdleTimeout, DefaultIdleTimeout)
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports limits that cannot work: negative ones, and a request or
// header limit under 1 KiB (no request would fit).
func (l Limits) Validate() error {
	var errs []error
	for _, n := range []struct {
		name string
		v    int
	}{{"MaxRequestBytes", l.MaxRequestBytes}, {"MaxHeaderBytes", l.MaxHeaderBytes}} {
		if n.v < 0 || n.v > 0 && n.v < 1024 {
			errs = append(errs, fmt.Errorf("%s must be at least 1024 (0: the default), not %d", n.name, n.v))
		}
	}
	if l.MaxJSONDepth < 0 {
		errs = append(errs, fmt.Errorf("MaxJSONDepth must not be negative, not %d", l.MaxJSONDepth))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ReadHeaderTimeout", l.ReadHeaderTimeout}, {"ReadTimeout", l.ReadTimeout}, {"WriteTimeout", l.WriteTimeout},
		{"IdleTimeout", l.IdleTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, not %s", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

// NewHTTPServer returns an HTTP server with the limits' timeouts and header
// cap (zero limits take the defaults).
func NewHTTPServer(h http.Handler, l Limits) *http.Server {
	l.Defaults()
	return &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout,
		WriteTimeout: l.WriteTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes}
}

// bodyCap is what LimitBody leaves in a request's context for the REST error
// handler: the limit, and whether reading the body passed it.
type bodyCap struct {
	max      int64
	exceeded atomic.Bool
}

type bodyCapKey struct{}

// LimitBody refuses request bodies over max bytes with 413: at once, unread,
// when Content-Length says so; else it caps the body with
// http.MaxBytesReader, and a handler that reads past the cap fails. For
// grpc-gateway handlers, which turn that failure into INVALID_ARGUMENT, the
// REST error handler (NewRESTMux) answers 413 instead.
func LimitBody(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			writeTooLarge(w, max)
			return
		}
		c := &bodyCap{max: max}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &cappedBody{ReadCloser: http.MaxBytesReader(w, r.Body, max), cap: c}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyCapKey{}, c)))
	})
}

// cappedBody notes in its bodyCap when reading passed the cap.
type cappedBody struct {
	io.ReadCloser
	cap *bodyCap
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		b.cap.exceeded.Store(true)
	}
	return n, err
}

// tooLargeStatus is the status of a request over max bytes.
func tooLargeStatus(max int64) *status.Status {
	return Error(codes.ResourceExhausted, luciusv1.ErrorReason_ERROR_REASON_REQUEST_TOO_LARGE,
		fmt.Sprintf("the request is larger than this server takes (%d bytes)", max), "limit_bytes", strconv.FormatInt(max, 10))
}

// writeTooLarge answers 413 with the google.rpc.Status body grpc-gateway
// writes for every other error, and closes the connection (the rest of the
// body is never read).
func writeTooLarge(w http.ResponseWriter, max int64) {
	body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(tooLargeStatus(max).Proto())
	if err != nil {
		body = []byte(`{"code":8,"message":"request too large"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_, _ = w.Write(body)
}

// requestTooLarge reports whether a REST call failed for its size, and the
// limit: its body passed LimitBody's cap, or the gRPC hop refused the
// message it became (grpc-go's own RESOURCE_EXHAUSTED, which carries no
// details, unlike Lucius's admission limits).
func requestTooLarge(ctx context.Context, err error) (int64, bool) {
	c, _ := ctx.Value(bodyCapKey{}).(*bodyCap)
	if c == nil {
		return 0, false
	}
	var mbe *http.MaxBytesError
	if c.exceeded.Load() || errors.As(err, &mbe) {
		return c.max, true
	}
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.ResourceExhausted && len(st.Details()) == 0 &&
		strings.Contains(st.Message(), "message larger than max") {
		return c.max, true
	}
	return 0, false
}

// restErrors writes grpc-gateway's error answer: 413 for a request too large,
// else the default mapping, with Retry-After when the status says when to retry.
func restErrors(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if max, ok := requestTooLarge(ctx, err); ok {
		writeTooLarge(w, max)
		return
	}
	retryAfterErrors(ctx, mux, m, w, r, err)
}
