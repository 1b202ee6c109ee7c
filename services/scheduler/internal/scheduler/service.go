// Package scheduler is the time service of Lucius: runbook batches, members
// and phases due at offsets from a batch start, emitting the five orchestrator
// events of seed 003 on the orchestrator-events topic. This version is the
// running, healthy skeleton: it connects to the database and the bus, declares
// the topology it publishes to, and serves health; it has no runbooks yet.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lucius-platform/lucius/core/bus/pgbus"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/migrate"
	"github.com/lucius-platform/lucius/core/server"
	"github.com/lucius-platform/lucius/core/topology"
)

// Config configures the scheduler. Zero values take the defaults noted.
type Config struct {
	DatabaseURL string // required
	GRPCAddr    string // default 127.0.0.1:9094
	HTTPAddr    string // default 127.0.0.1:8084
	// Topology is the bus layout and entity options every process declares alike.
	Topology      topology.Config
	Logger        *slog.Logger
	Metrics       http.Handler
	ShutdownGrace time.Duration // default 10s
}

// Validate reports missing settings.
func (c *Config) Validate() error {
	if c.DatabaseURL == "" {
		return errors.New("scheduler: DatabaseURL is required")
	}
	return nil
}

func (c *Config) defaults() {
	if c.GRPCAddr == "" {
		c.GRPCAddr = "127.0.0.1:9094"
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:8084"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 10 * time.Second
	}
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect database: %w", err)
	}
	defer pool.Close()
	if err := migrate.Apply(ctx, pool, ledger.Migrations, pgbus.Migrations); err != nil {
		return err
	}
	b, err := pgbus.New(ctx, pool, pgbus.Config{Logger: cfg.Logger})
	if err != nil {
		return err
	}
	defer b.Close(context.Background()) //nolint:errcheck
	if err := topology.Declare(ctx, b, cfg.Topology); err != nil {
		return err
	}
	grpcServer, health, err := server.NewGRPC(cfg.Logger)
	if err != nil {
		return err
	}
	grpcListener, err := server.Listen(cfg.GRPCAddr)
	if err != nil {
		return err
	}
	httpListener, err := server.Listen(cfg.HTTPAddr)
	if err != nil {
		grpcListener.Close()
		return err
	}
	ready := func(ctx context.Context) error { return pool.Ping(ctx) }
	httpServer := server.NewHTTPServer(server.NewHTTPMux(nil, cfg.Metrics, ready))
	health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	cfg.Logger.Info("scheduler serving (no runbooks yet)", "grpc", grpcListener.Addr().String(), "http", httpListener.Addr().String())
	return server.Run(ctx, cfg.ShutdownGrace,
		server.GRPCRunner{Server: grpcServer, Listener: grpcListener},
		server.HTTPRunner{Server: httpServer, Listener: httpListener})
}
