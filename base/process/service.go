package process

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/server"
)

// Service holds the settings every Lucius service has; service configs embed it.
type Service struct {
	DatabaseURL string // required
	GRPCAddr    string
	HTTPAddr    string
	MaxDBConns  int32
	Logger      *slog.Logger
	// Ops serves /metrics and /debug/pprof/ (telemetry.Telemetry.Ops) when set.
	Ops http.Handler
	// ShutdownGrace bounds a graceful stop (default 10s).
	ShutdownGrace time.Duration
	// Auth says whom the service trusts; every call but the health checks
	// must authenticate (package auth).
	Auth auth.Config
	// TLS serves gRPC over TLS, and mTLS with a client CA.
	TLS server.TLSFiles
	// Limits bound requests on both listeners (see server.Limits for the defaults).
	Limits server.Limits
	// Sessions, when set, lets console sessions authenticate calls beside
	// tokens and certificates (the gateway sets it; never read from the environment).
	Sessions auth.SessionStore
	// Authenticator, when set, is the one the endpoint verifies tokens with
	// instead of one built from Auth: a service that also authenticates
	// elsewhere (the gateway's console) shares its key cache and discovery.
	Authenticator *auth.Authenticator
}

// ReadService reads the common settings of service name (e.g. "gateway"):
// DATABASE_URL, LUCIUS_<NAME>_GRPC_ADDR, LUCIUS_<NAME>_HTTP_ADDR,
// LUCIUS_DB_MAX_CONNS, the trust settings (auth.ReadConfig),
// LUCIUS_TLS_CERT_FILE, LUCIUS_TLS_KEY_FILE and LUCIUS_TLS_CLIENT_CA_FILE,
// LUCIUS_SHUTDOWN_GRACE (how long a stop waits for in-flight calls, 10s),
// with the given defaults, and the request limits (ReadLimits).
func ReadService(e *env.Reader, name, grpcAddr, httpAddr string, maxConns int) Service {
	prefix := "LUCIUS_" + strings.ToUpper(name) + "_"
	authCfg, err := auth.ReadConfig(e)
	e.Fail(err)
	return Service{
		DatabaseURL: e.Required("DATABASE_URL"),
		GRPCAddr:    e.String(prefix+"GRPC_ADDR", grpcAddr),
		HTTPAddr:    e.String(prefix+"HTTP_ADDR", httpAddr),
		MaxDBConns:  int32(e.Int("LUCIUS_DB_MAX_CONNS", maxConns)),
		Auth:        authCfg,
		TLS: server.TLSFiles{CertFile: e.String("LUCIUS_TLS_CERT_FILE", ""), KeyFile: e.String("LUCIUS_TLS_KEY_FILE", ""),
			ClientCAFile: e.String("LUCIUS_TLS_CLIENT_CA_FILE", "")},
		Limits:        ReadLimits(e),
		ShutdownGrace: e.Duration("LUCIUS_SHUTDOWN_GRACE", 10*time.Second),
	}
}

// ReadLimits reads the request limits every service applies, defaulting as
// server.Limits does:
//
//	LUCIUS_MAX_REQUEST_BYTES         a gRPC message or REST body (1048576)
//	LUCIUS_MAX_JSON_DEPTH            nesting of a REST body's JSON (100)
//	LUCIUS_HTTP_MAX_HEADER_BYTES     an HTTP request header (65536)
//	LUCIUS_HTTP_READ_HEADER_TIMEOUT  to receive a request header (5s)
//	LUCIUS_HTTP_READ_TIMEOUT         to receive a whole request (30s)
//	LUCIUS_HTTP_WRITE_TIMEOUT        to answer, from the end of the header (60s)
//	LUCIUS_HTTP_IDLE_TIMEOUT         a keep-alive connection's idle time (2m)
func ReadLimits(e *env.Reader) server.Limits {
	return server.Limits{
		MaxRequestBytes:   e.Int("LUCIUS_MAX_REQUEST_BYTES", server.DefaultMaxRequestBytes),
		MaxJSONDepth:      e.Int("LUCIUS_MAX_JSON_DEPTH", server.DefaultMaxJSONDepth),
		MaxHeaderBytes:    e.Int("LUCIUS_HTTP_MAX_HEADER_BYTES", server.DefaultMaxHeaderBytes),
		ReadHeaderTimeout: e.Duration("LUCIUS_HTTP_READ_HEADER_TIMEOUT", server.DefaultReadHeaderTimeout),
		ReadTimeout:       e.Duration("LUCIUS_HTTP_READ_TIMEOUT", server.DefaultReadTimeout),
		WriteTimeout:      e.Duration("LUCIUS_HTTP_WRITE_TIMEOUT", server.DefaultWriteTimeout),
		IdleTimeout:       e.Duration("LUCIUS_HTTP_IDLE_TIMEOUT", server.DefaultIdleTimeout),
	}
}

// Endpoint opens the service's guarded gRPC and HTTP endpoint; unary
// interceptors run after authentication and validation, in order.
func (s Service) Endpoint(unary []grpc.UnaryServerInterceptor, restOpts ...runtime.ServeMuxOption) (*server.Endpoint, error) {
	authn := s.Authenticator
	if authn == nil {
		var err error
		if authn, err = auth.NewAuthenticator(s.Auth); err != nil {
			return nil, err
		}
	}
	tlsCfg, err := s.TLS.Config()
	if err != nil {
		return nil, err
	}
	return server.NewEndpoint(server.EndpointConfig{GRPCAddr: s.GRPCAddr, HTTPAddr: s.HTTPAddr, Logger: s.Logger,
		Guard: auth.NewGuard(authn, s.Logger).WithSessions(s.Sessions), TLS: tlsCfg, Limits: s.Limits, Unary: unary}, restOpts...)
}

// Defaults fills unset addresses and pool size with the service's own
// defaults, and the logger and grace period with the common ones.
func (s *Service) Defaults(grpcAddr, httpAddr string, maxConns int32) {
	if s.GRPCAddr == "" {
		s.GRPCAddr = grpcAddr
	}
	if s.HTTPAddr == "" {
		s.HTTPAddr = httpAddr
	}
	if s.MaxDBConns == 0 {
		s.MaxDBConns = maxConns
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.ShutdownGrace == 0 {
		s.ShutdownGrace = 10 * time.Second
	}
	s.Limits.Defaults()
}

// Validate reports missing or invalid common settings.
func (s Service) Validate() error {
	var errs []error
	if s.DatabaseURL == "" {
		errs = append(errs, errors.New("DatabaseURL is required"))
	}
	if s.MaxDBConns < 0 {
		errs = append(errs, errors.New("MaxDBConns must not be negative"))
	}
	if err := s.Limits.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("limits: %w", err))
	}
	return errors.Join(errs...)
}
