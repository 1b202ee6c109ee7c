// Package reconciler keeps the ledger and the bus in step: its dispatcher
// publishes outbox rows (the durable intent every state change writes in its own
// transaction) and marks them sent, and its loops keep the outbox small. Later
// sweepers repair drift (steps stuck dispatching, ACK timeouts, expired leases,
// jobs past their SLA). Any number of reconcilers may run.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lucius-platform/lucius/core/bus/pgbus"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/migrate"
	"github.com/lucius-platform/lucius/core/protocol"
	"github.com/lucius-platform/lucius/core/server"
	"github.com/lucius-platform/lucius/core/topology"
)

// Config configures a reconciler. Zero values take the defaults noted.
type Config struct {
	DatabaseURL string // required
	GRPCAddr    string // health and reflection; default 127.0.0.1:9093
	HTTPAddr    string // default 127.0.0.1:8083
	// Topology is the bus layout and entity options every process declares alike.
	Topology topology.Config
	// Protocols name the services whose subscriptions are declared before
	// anything is published to their topics.
	Protocols  *protocol.Registry // required
	Dispatcher DispatcherConfig
	// OutboxRetention keeps sent rows this long before purging (default 1h).
	OutboxRetention time.Duration
	PurgeInterval   time.Duration // default 1m
	MaxDBConns      int32         // default 20
	Logger          *slog.Logger
	Metrics         http.Handler
	ShutdownGrace   time.Duration // default 10s
}

// Validate reports missing settings.
func (c *Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("reconciler: DatabaseURL is required"))
	}
	if c.Protocols == nil {
		errs = append(errs, errors.New("reconciler: Protocols is required"))
	}
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	if c.GRPCAddr == "" {
		c.GRPCAddr = "127.0.0.1:9093"
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:8083"
	}
	if c.OutboxRetention == 0 {
		c.OutboxRetention = time.Hour
	}
	if c.PurgeInterval == 0 {
		c.PurgeInterval = time.Minute
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

// Run serves until ctx ends.
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
	if err := migrate.Apply(ctx, pool, ledger.Migrations, pgbus.Migrations); err != nil {
		return err
	}
	store := ledger.New(pool, log)
	defer store.Close()
	b, err := pgbus.New(ctx, pool, pgbus.Config{Logger: log})
	if err != nil {
		return err
	}
	defer b.Close(context.Background()) //nolint:errcheck
	cfg.Topology.Services = cfg.Protocols.Services()
	if err := topology.Declare(ctx, b, cfg.Topology); err != nil {
		return err
	}
	disp, err := newDispatcher(store, b, pool, cfg.Dispatcher, log)
	if err != nil {
		return err
	}

	grpcServer, health, err := server.NewGRPC(log)
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

	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){
		disp.run,
		func(ctx context.Context) { purgeLoop(ctx, store, cfg.PurgeInterval, cfg.OutboxRetention, log) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(loops) }()
	}
	defer func() { stopLoops(); wg.Wait() }()

	health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	log.Info("reconciler serving", "grpc", grpcListener.Addr().String(), "http", httpListener.Addr().String(),
		"batch_size", disp.cfg.BatchSize, "poll_interval", disp.cfg.PollInterval)
	return server.Run(ctx, cfg.ShutdownGrace,
		server.GRPCRunner{Server: grpcServer, Listener: grpcListener},
		server.HTTPRunner{Server: httpServer, Listener: httpListener})
}
