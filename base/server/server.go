// Package server holds the plumbing every Lucius service runs the same way: a
// gRPC server (OpenTelemetry stats handler, request logging, panic recovery,
// protovalidate validation, grpc.health.v1 and reflection), an HTTP server for
// REST (grpc-gateway), /healthz, /readyz and /metrics, and graceful shutdown.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"buf.build/go/protovalidate"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Guard authenticates and authorizes calls (package auth implements it):
// every server has one, so no route is served unguarded.
type Guard interface {
	UnaryServerInterceptor() grpc.UnaryServerInterceptor
	StreamServerInterceptor() grpc.StreamServerInterceptor
	// HTTP guards the operations endpoints (/metrics, /debug/pprof/).
	HTTP(h http.Handler) http.Handler
}

// NewGRPC returns a gRPC server with Lucius's interceptors, the health service
// (serving once the caller marks it) and reflection. The guard runs before
// validation, so an unauthenticated caller learns nothing of the request's rules.
func NewGRPC(log *slog.Logger, guard Guard, opts ...grpc.ServerOption) (*grpc.Server, *health.Server, error) {
	if guard == nil {
		return nil, nil, errors.New("server: a guard is required")
	}
	validator, err := protovalidate.New()
	if err != nil {
		return nil, nil, fmt.Errorf("protovalidate: %w", err)
	}
	opts = append([]grpc.ServerOption{
		// Limits.MaxRequestBytes by default; NewEndpoint passes the configured one.
		grpc.MaxRecvMsgSize(DefaultMaxRequestBytes),
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.ChainUnaryInterceptor(recoverUnary(log), logUnary(log), guard.UnaryServerInterceptor(), validateUnary(validator)),
		grpc.ChainStreamInterceptor(guard.StreamServerInterceptor(), validateStream(validator)),
	}, opts...)
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs, nil
}

// Dial returns a client connection with tracing, for calling a Lucius gRPC
// endpoint (including the process's own, as grpc-gateway does).
func Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
	}, opts...)
	return grpc.NewClient(target, opts...)
}

func validateUnary(v protovalidate.Validator) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := validate(v, req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// validateStream checks every message a stream receives, as validateUnary
// checks a unary request.
func validateStream(v protovalidate.Validator) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, validatingStream{ServerStream: ss, v: v})
	}
}

type validatingStream struct {
	grpc.ServerStream
	v protovalidate.Validator
}

func (s validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return validate(s.v, m)
}

// validate answers a message that breaks the contract's rules with
// INVALID_ARGUMENT and its field violations, after clearing its OUTPUT_ONLY
// fields (ignored on input, AIP-203).
func validate(v protovalidate.Validator, req any) error {
	msg, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	ClearOutputOnly(msg)
	if err := v.Validate(msg); err != nil {
		var verr *protovalidate.ValidationError
		if errors.As(err, &verr) {
			return ValidationStatus(verr).Err()
		}
		return status.Errorf(codes.Internal, "validate request: %v", err)
	}
	return nil
}

func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		code := status.Code(err)
		level := slog.LevelDebug
		switch {
		case code == codes.Internal || code == codes.Unknown || code == codes.DataLoss:
			level = slog.LevelError
		case code != codes.OK:
			level = slog.LevelInfo
		}
		log.Log(ctx, level, "rpc", "method", info.FullMethod, "code", code.String(),
			"duration_ms", float64(time.Since(start).Microseconds())/1000, "err", err)
		return resp, err
	}
}

func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.ErrorContext(ctx, "panic in rpc", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(ctx, req)
	}
}

// Runner is something Run serves and stops.
type Runner interface {
	Serve() error
	Shutdown(ctx context.Context) error
}

// GRPCRunner serves a gRPC server on a listener.
type GRPCRunner struct {
	Server   *grpc.Server
	Listener net.Listener
}

// Serve serves until stopped.
func (r GRPCRunner) Serve() error { return r.Server.Serve(r.Listener) }

// Shutdown stops gracefully, forcing a stop when ctx ends.
func (r GRPCRunner) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { r.Server.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.Server.Stop()
	}
	return nil
}

// HTTPRunner serves an HTTP server on a listener.
type HTTPRunner struct {
	Server   *http.Server
	Listener net.Listener
}

// Serve serves until stopped.
func (r HTTPRunner) Serve() error {
	if err := r.Server.Serve(r.Listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops gracefully.
func (r HTTPRunner) Shutdown(ctx context.Context) error { return r.Server.Shutdown(ctx) }

// Run serves every runner until ctx ends or one fails, then shuts all down
// within the grace period.
func Run(ctx context.Context, grace time.Duration, runners ...Runner) error {
	errc := make(chan error, len(runners))
	for _, r := range runners {
		go func() { errc <- r.Serve() }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	for _, r := range runners {
		if serr := r.Shutdown(shutdownCtx); serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// Listen opens a TCP listener, naming the address in the error; a listener
// the launcher handed down for addr (ListenFDsEnv) is served instead.
func Listen(addr string) (net.Listener, error) {
	if l, err := inheritedListener(addr); err != nil || l != nil {
		return l, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return l, nil
}
