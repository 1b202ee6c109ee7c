package process

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/lucius-platform/lucius/core/env"
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
}

// ReadService reads the common settings of service name (e.g. "gateway"):
// DATABASE_URL, LUCIUS_<NAME>_GRPC_ADDR, LUCIUS_<NAME>_HTTP_ADDR and
// LUCIUS_DB_MAX_CONNS, with the given defaults.
func ReadService(e *env.Reader, name, grpcAddr, httpAddr string, maxConns int) Service {
	prefix := "LUCIUS_" + strings.ToUpper(name) + "_"
	return Service{
		DatabaseURL: e.Required("DATABASE_URL"),
		GRPCAddr:    e.String(prefix+"GRPC_ADDR", grpcAddr),
		HTTPAddr:    e.String(prefix+"HTTP_ADDR", httpAddr),
		MaxDBConns:  int32(e.Int("LUCIUS_DB_MAX_CONNS", maxConns)),
	}
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
	return errors.Join(errs...)
}
