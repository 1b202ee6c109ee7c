// Package gateway is Lucius's ingress and anti-corruption layer. It validates
// partner commands (proto annotations, then the protocol's payload rules and the
// ref policy), derives deterministic job ids, stores each accepted command with
// its orchestrator-jobs message in one transaction and answers 202 with the job
// id. It serves the job API (get, list, steps, events, cancel) from the ledger,
// over gRPC and REST (grpc-gateway, dialed through the gRPC endpoint so REST
// calls pass the same interceptors).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/migrate"
	"github.com/lucius-platform/lucius/core/protocol"
	"github.com/lucius-platform/lucius/core/server"
)

// Config configures the gateway. Zero values take the defaults noted.
type Config struct {
	DatabaseURL string // required
	GRPCAddr    string // default 127.0.0.1:9090
	HTTPAddr    string // default 127.0.0.1:8080
	// MaxDBConns caps the pool (default 20).
	MaxDBConns int32
	Protocols  *protocol.Registry // required
	Policy     Policy
	Logger     *slog.Logger
	// Metrics is served at /metrics when set.
	Metrics http.Handler
	// ShutdownGrace bounds a graceful stop (default 10s).
	ShutdownGrace time.Duration
}

// Validate reports missing settings.
func (c *Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("gateway: DatabaseURL is required"))
	}
	if c.Protocols == nil {
		errs = append(errs, errors.New("gateway: Protocols is required"))
	}
	if len(c.Policy.RefSchemes) == 0 {
		errs = append(errs, errors.New("gateway: Policy.RefSchemes must allow at least one scheme"))
	}
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	if c.GRPCAddr == "" {
		c.GRPCAddr = "127.0.0.1:9090"
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:8080"
	}
	if c.MaxDBConns == 0 {
		c.MaxDBConns = 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 10 * time.Second
	}
}

// Run serves the gateway until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	poolCfg.MaxConns = cfg.MaxDBConns
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("connect database: %w", err)
	}
	defer pool.Close()
	if err := migrate.Apply(ctx, pool, ledger.Migrations); err != nil {
		return err
	}
	store := ledger.New(pool, log)
	defer store.Close()

	commands, err := newCommandService(store, cfg.Protocols, cfg.Policy, log)
	if err != nil {
		return err
	}
	grpcServer, health, err := server.NewGRPC(log)
	if err != nil {
		return err
	}
	luciusv1.RegisterCommandServiceServer(grpcServer, commands)
	luciusv1.RegisterJobServiceServer(grpcServer, &jobService{store: store, log: log})

	grpcListener, err := server.Listen(cfg.GRPCAddr)
	if err != nil {
		return err
	}
	httpListener, err := server.Listen(cfg.HTTPAddr)
	if err != nil {
		grpcListener.Close()
		return err
	}
	rest := server.NewRESTMux(runtime.WithForwardResponseOption(acceptedFor202))
	conn, err := server.Dial(grpcListener.Addr().String())
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := registerREST(ctx, rest, conn); err != nil {
		return err
	}
	ready := func(ctx context.Context) error { return pool.Ping(ctx) }
	httpServer := server.NewHTTPServer(server.NewHTTPMux(rest, cfg.Metrics, ready))
	health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	log.Info("gateway serving", "grpc", grpcListener.Addr().String(), "http", httpListener.Addr().String(),
		"request_types", cfg.Protocols.IDs())
	return server.Run(ctx, cfg.ShutdownGrace,
		server.GRPCRunner{Server: grpcServer, Listener: grpcListener},
		server.HTTPRunner{Server: httpServer, Listener: httpListener})
}

func registerREST(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	if err := luciusv1.RegisterCommandServiceHandler(ctx, mux, conn); err != nil {
		return err
	}
	return luciusv1.RegisterJobServiceHandler(ctx, mux, conn)
}

// acceptedFor202 answers a REST submit with 202 Accepted: the command is
// accepted, its work runs asynchronously.
func acceptedFor202(_ context.Context, w http.ResponseWriter, m proto.Message) error {
	if _, ok := m.(*luciusv1.SubmitResponse); ok {
		w.WriteHeader(http.StatusAccepted)
	}
	return nil
}
