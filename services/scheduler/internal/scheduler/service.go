// Package scheduler is the time service of Lucius: runbook batches, members
// and phases due at offsets from a batch start, emitting the five orchestrator
// events of seed 003 on the orchestrator-events topic. This version is the
// running, healthy skeleton: it connects to the database and the bus, declares
// the topology it publishes to, and serves health; it has no runbooks yet.
package scheduler

import (
	"context"

	"github.com/lucius-platform/lucius/core/bus/pgbus"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/database"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/process"
	"github.com/lucius-platform/lucius/core/server"
	"github.com/lucius-platform/lucius/core/topology"
)

// Config configures the scheduler. Zero values take the defaults noted.
type Config struct {
	// Service: gRPC on 127.0.0.1:9094, HTTP on 127.0.0.1:8084, 10 connections by default.
	process.Service
	// Topology is the bus layout and entity options every process declares alike.
	Topology topology.Config
}

// Validate reports missing settings.
func (c *Config) Validate() error { return c.Service.Validate() }

func (c *Config) defaults() { c.Service.Defaults("127.0.0.1:9094", "127.0.0.1:8084", 10) }

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	pool, err := database.Open(ctx, cfg.DatabaseURL, cfg.MaxDBConns, ledger.Migrations, pgbus.Migrations, config.Migrations)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The live configuration: this process reports the revision it applies.
	live, err := config.Watch(ctx, pool, 0, cfg.Logger)
	if err != nil {
		return err
	}
	defer live.Close()
	b, err := pgbus.New(ctx, pool, pgbus.Config{Logger: cfg.Logger})
	if err != nil {
		return err
	}
	defer b.Close(context.Background()) //nolint:errcheck
	if err := topology.Declare(ctx, b, cfg.Topology); err != nil {
		return err
	}
	ep, err := server.NewEndpoint(cfg.GRPCAddr, cfg.HTTPAddr, cfg.Logger)
	if err != nil {
		return err
	}
	cfg.Logger.Info("scheduler serving (no runbooks yet)", "grpc", ep.GRPCAddr(), "http", ep.HTTPAddr())
	return ep.Serve(ctx, cfg.ShutdownGrace, cfg.Ops, func(ctx context.Context) error { return pool.Ping(ctx) })
}
