package server

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lucius-platform/lucius/base/loop"
)

// Endpoint is a service's network surface: its gRPC server and, on a second
// listener, HTTP with REST (grpc-gateway dialed through the gRPC endpoint, so REST
// calls pass the same interceptors), /healthz, /readyz and the operations handler.
type Endpoint struct {
	// GRPC is where the service registers its gRPC services.
	GRPC *grpc.Server
	// REST is where it registers grpc-gateway handlers, over Conn.
	REST *runtime.ServeMux
	// Front, when set, serves the HTTP surface in front of REST: a
	// service's own routes and middleware (the gateway's console at /ui/),
	// handing everything else to rest.
	Front  func(rest http.Handler) http.Handler
	conn   *grpc.ClientConn
	health *health.Server
	guard  Guard
	grpcL  net.Listener
	httpL  net.Listener
	limits Limits
}

// EndpointConfig says where an endpoint listens, who may call it and what
// it accepts.
type EndpointConfig struct {
	GRPCAddr, HTTPAddr string
	Logger             *slog.Logger
	// Guard authenticates and authorizes every call. Required.
	Guard Guard
	// TLS, when set, serves gRPC over TLS; with ClientCAs set, callers may
	// authenticate with client certificates (mTLS). See TLSFiles.
	TLS *tls.Config
	// Limits bound requests (zero values take the defaults): one request size
	// for gRPC messages and REST bodies, JSON depth, HTTP timeouts and header size.
	Limits Limits
	// Unary interceptors run after authentication and validation, in order
	// (a service's own policies, such as request rates, that need the caller).
	Unary []grpc.UnaryServerInterceptor
}

// NewEndpoint opens both listeners and builds the servers.
func NewEndpoint(cfg EndpointConfig, restOpts ...runtime.ServeMuxOption) (*Endpoint, error) {
	limits := cfg.Limits
	limits.Defaults()
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(limits.MaxRequestBytes)}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	if len(cfg.Unary) > 0 {
		opts = append(opts, grpc.ChainUnaryInterceptor(cfg.Unary...))
	}
	srv, hs, err := NewGRPC(cfg.Logger, cfg.Guard, opts...)
	if err != nil {
		return nil, err
	}
	e := &Endpoint{GRPC: srv, health: hs, guard: cfg.Guard, REST: NewRESTMux(limits, restOpts...), limits: limits}
	if e.grpcL, err = Listen(cfg.GRPCAddr); err != nil {
		return nil, err
	}
	if e.httpL, err = Listen(cfg.HTTPAddr); err != nil {
		e.grpcL.Close()
		return nil, err
	}
	// The REST hop sends what the gRPC server takes (a larger message fails
	// here, before it is sent, and answers 413) and accepts any answer the
	// server sends: a page of large jobs is not the caller's fault.
	selfOpts := []grpc.DialOption{grpc.WithDefaultCallOptions(
		grpc.MaxCallSendMsgSize(limits.MaxRequestBytes), grpc.MaxCallRecvMsgSize(math.MaxInt32))}
	if cfg.TLS != nil {
		selfOpts = append(selfOpts, grpc.WithTransportCredentials(credentials.NewTLS(selfTLS(cfg.TLS))))
	}
	if e.conn, err = Dial(e.grpcL.Addr().String(), selfOpts...); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Conn is a client connection to this endpoint's own gRPC server.
func (e *Endpoint) Conn() *grpc.ClientConn { return e.conn }

// GRPCAddr is the gRPC listener's address.
func (e *Endpoint) GRPCAddr() string { return e.grpcL.Addr().String() }

// HTTPAddr is the HTTP listener's address.
func (e *Endpoint) HTTPAddr() string { return e.httpL.Addr().String() }

// Serve serves until ctx ends, then shuts both servers down within grace. It
// closes the endpoint. gRPC health (grpc.health.v1, service "") follows
// ready, as /readyz does: SERVING while it answers, NOT_SERVING while it
// fails (the database or the bus unreachable) and from the moment the
// endpoint starts draining.
func (e *Endpoint) Serve(ctx context.Context, grace time.Duration, ops http.Handler, ready ReadyFunc) error {
	defer e.conn.Close()
	e.followReadiness(ready, ReadinessInterval)
	serving, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	go func() {
		loop.Every(serving, ReadinessInterval, false, func(context.Context) { e.followReadiness(ready, ReadinessInterval) })
		e.health.Shutdown() // NOT_SERVING from now on: draining
	}()
	if ops != nil {
		ops = e.guard.HTTP(ops)
	}
	rest := LimitBody(e.REST, int64(e.limits.MaxRequestBytes))
	if e.Front != nil {
		rest = e.Front(rest)
	}
	httpServer := NewHTTPServer(NewHTTPMux(rest, ops, ready), e.limits)
	return Run(ctx, grace, GRPCRunner{Server: e.GRPC, Listener: e.grpcL}, HTTPRunner{Server: httpServer, Listener: e.httpL})
}

// ReadinessInterval is how often gRPC health asks the readiness check.
var ReadinessInterval = 2 * time.Second

// followReadiness sets the gRPC health status from one readiness check.
func (e *Endpoint) followReadiness(ready ReadyFunc, timeout time.Duration) {
	status := healthpb.HealthCheckResponse_SERVING
	if ready != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if ready(ctx) != nil {
			status = healthpb.HealthCheckResponse_NOT_SERVING
		}
	}
	e.health.SetServingStatus("", status)
}

// Close releases an endpoint that will not Serve.
func (e *Endpoint) Close() {
	e.grpcL.Close()
	e.httpL.Close()
	if e.conn != nil {
		e.conn.Close()
	}
}
