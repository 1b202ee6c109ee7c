// Package reconciler keeps the ledger and the bus in step: its dispatcher
// publishes outbox rows (the durable intent every state change writes in its own
// transaction) and marks them sent, and its loops keep the outbox small. Later
// sweepers repair drift (steps stuck dispatching, ACK timeouts, expired leases,
// jobs past their SLA). Any number of reconcilers may run.
package reconciler

import (
	"context"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/core/bus/pgbus"
	"github.com/lucius-platform/lucius/core/database"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/process"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/server"
	"github.com/lucius-platform/lucius/core/topology"
)

// Config configures a reconciler. Zero values take the defaults noted.
type Config struct {
	// Service: gRPC (health, reflection) on 127.0.0.1:9093, HTTP on
	// 127.0.0.1:8083, 20 connections by default.
	process.Service
	// Topology is the bus layout and entity options every process declares alike.
	Topology   topology.Config
	Dispatcher DispatcherConfig
	Callbacks  CallbackConfig
	// OutboxRetention keeps sent rows this long before purging (default 1h).
	OutboxRetention time.Duration
	PurgeInterval   time.Duration // default 1m
}

// Validate reports missing settings.
func (c *Config) Validate() error {
	return c.Service.Validate()
}

func (c *Config) defaults() {
	c.Service.Defaults("127.0.0.1:9093", "127.0.0.1:8083", 20)
	if c.OutboxRetention == 0 {
		c.OutboxRetention = time.Hour
	}
	if c.PurgeInterval == 0 {
		c.PurgeInterval = time.Minute
	}
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	pool, err := database.Open(ctx, cfg.DatabaseURL, cfg.MaxDBConns, ledger.Migrations, pgbus.Migrations)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := ledger.New(pool, log)
	defer store.Close()
	b, err := pgbus.New(ctx, pool, pgbus.Config{Logger: log})
	if err != nil {
		return err
	}
	defer b.Close(context.Background()) //nolint:errcheck
	// Declare the subscriptions of every service known so far; orchestrators and
	// workers declare theirs too, before anything is published to them.
	if cfg.Topology.Services, err = registry.New(store).Services(ctx); err != nil {
		return err
	}
	if err := topology.Declare(ctx, b, cfg.Topology); err != nil {
		return err
	}
	disp, err := newDispatcher(store, b, pool, cfg.Dispatcher, log)
	if err != nil {
		return err
	}
	deliv, err := newDeliverer(store, cfg.Callbacks, log)
	if err != nil {
		return err
	}
	ep, err := server.NewEndpoint(cfg.GRPCAddr, cfg.HTTPAddr, log)
	if err != nil {
		return err
	}

	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	published, callbacks := make(chan struct{}, 1), make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){
		func(ctx context.Context) { listen(ctx, pool, ledger.NotifyChannel, log, published, callbacks) },
		func(ctx context.Context) { disp.run(ctx, published) },
		func(ctx context.Context) { deliv.run(ctx, callbacks) },
		func(ctx context.Context) { purgeLoop(ctx, store, cfg.PurgeInterval, cfg.OutboxRetention, log) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(loops) }()
	}
	defer func() { stopLoops(); wg.Wait() }()

	log.Info("reconciler serving", "grpc", ep.GRPCAddr(), "http", ep.HTTPAddr(),
		"batch_size", disp.cfg.BatchSize, "poll_interval", disp.cfg.PollInterval)
	return ep.Serve(ctx, cfg.ShutdownGrace, cfg.Ops, func(ctx context.Context) error { return pool.Ping(ctx) })
}
