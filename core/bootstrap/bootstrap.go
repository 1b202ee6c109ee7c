// Package bootstrap opens what every control-plane service stands on, in one
// order and one way: the database pool with its migrations, the live
// configuration, the ledger, and the bus (through busconfig, the bus factory)
// with its topology. A service's Run opens a Runtime, builds its own parts on
// it, serves its endpoint with Runtime.Serve (whose readiness is the
// database's) and closes it; process.Main around Run gives every binary the
// same signals, settings and telemetry.
package bootstrap

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/database"
	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/schema"
)

// Options says what a service needs beyond the pool, the live configuration
// and the ledger, which every service opens.
type Options struct {
	// Migrations are the service's own sets, applied after the control
	// plane's (schema.Sets) and before the bus's.
	Migrations []migrate.Set
	// SeedGlobal, when set, is stored as the global configuration if the
	// database has none yet, before the live configuration loads (the
	// gateway's admission policy).
	SeedGlobal *config.Global
	// Bus, when set, opens the bus it selects; the PostgreSQL bus's tables
	// are migrated with the rest.
	Bus *busconfig.Config
}

// Sets are the migration sets Open applies, in order: the control plane's
// (schema.Sets), the service's own, then the bus's.
func (o Options) Sets() []migrate.Set {
	sets := schema.Sets(o.Migrations...)
	if o.Bus != nil {
		sets = append(sets, o.Bus.Migrations()...)
	}
	return sets
}

// Runtime is a service's open foundation. Close releases it in the reverse
// order of opening.
type Runtime struct {
	Pool *pgxpool.Pool
	// Live is the live configuration; this process reports the revision it applies.
	Live   *config.Watcher
	Ledger *ledger.Store
	// Bus is nil unless Options.Bus asked for one.
	Bus bus.Bus

	svc     process.Service
	closers []func()
}

// Open opens svc's database (migrated), the live configuration, the ledger
// and, when asked, the bus. On an error what was opened is closed again.
func Open(ctx context.Context, svc process.Service, opts Options) (_ *Runtime, err error) {
	log := svc.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rt := &Runtime{svc: svc}
	defer func() {
		if err != nil {
			rt.Close()
		}
	}()
	if rt.Pool, err = database.Open(ctx, svc.DatabaseURL, svc.MaxDBConns, opts.Sets()...); err != nil {
		return nil, err
	}
	rt.closers = append(rt.closers, rt.Pool.Close)
	if opts.SeedGlobal != nil {
		if err := config.NewStore(rt.Pool).SeedGlobal(ctx, *opts.SeedGlobal); err != nil {
			return nil, err
		}
	}
	if rt.Live, err = config.Watch(ctx, rt.Pool, 0, log); err != nil {
		return nil, err
	}
	rt.closers = append(rt.closers, rt.Live.Close)
	rt.Ledger = ledger.New(rt.Pool, log)
	rt.closers = append(rt.closers, rt.Ledger.Close)
	if opts.Bus != nil {
		if rt.Bus, err = busconfig.Open(ctx, *opts.Bus, rt.Pool, log); err != nil {
			return nil, err
		}
		rt.closers = append(rt.closers, func() { _ = rt.Bus.Close(context.Background()) })
	}
	return rt, nil
}

// Declare creates topo's topics, queues and subscriptions on the bus, so that
// nothing is published where no one is subscribed yet.
func (rt *Runtime) Declare(ctx context.Context, topo topology.Config) error {
	if rt.Bus == nil {
		return errors.New("bootstrap: Declare needs the bus (Options.Bus)")
	}
	return topology.Declare(ctx, rt.Bus, topo)
}

// Ready is the service's readiness: its database answers.
func (rt *Runtime) Ready(ctx context.Context) error { return rt.Pool.Ping(ctx) }

// Serve serves ep until ctx ends, with the service's shutdown grace, its
// operations handler (/metrics, pprof) and Ready behind /readyz.
func (rt *Runtime) Serve(ctx context.Context, ep *server.Endpoint) error {
	return ep.Serve(ctx, rt.svc.ShutdownGrace, rt.svc.Ops, rt.Ready)
}

// Close closes the bus, the ledger, the live configuration and the pool.
func (rt *Runtime) Close() {
	for i := len(rt.closers) - 1; i >= 0; i-- {
		rt.closers[i]()
	}
	rt.closers = nil
}
