// Package scheduler is the time service of Lucius: it turns runbook versions
// and their member data (package runbook) into batches, members and phases
// due at offsets from a batch's start, and emits the five orchestrator events
// of seed 003 on the orchestrator-events topic.
//
// Every tick (Config.Tick) it works through each active runbook version:
//
//  1. Version transitions: a live batch governed by another version of the
//     runbook moves to the active one, once member data was loaded for it
//     (an empty member table would remove every member). The old version's
//     pending phases are skipped; the new version's phases are created due
//     at start + offset, those overdue pending (overdue_behavior rerun: due
//     at once) or skipped (ignore). With rerun_init the new version's init
//     steps run again (batch-init).
//  2. Batch detection: a batch time of the current members with no batch yet
//     becomes a batch with its members and a pending execution of every
//     phase; with init steps, init executions and batch-init (the batch waits
//     in init_dispatched for the orchestrator), else the batch is active.
//  3. Member changes of batches in init_dispatched or active: member-added
//     for a member the data has and the batch lacks, member-removed for one
//     it no longer has with the batch's time.
//  4. Due phases of active batches: step executions pre-created for every
//     active member with rendered params (failed, with the error, for a
//     member whose params do not render), the phase dispatched, phase-due.
//
// and then emits poll-check for polling step and init executions whose
// interval has passed since they were last polled.
//
// Events go through the ledger outbox in the transaction of the row change
// that decided them; the reconciler's dispatcher publishes them. Any number
// of schedulers may run: batches are claimed with FOR NO KEY UPDATE SKIP
// LOCKED, phases and polling rows with FOR UPDATE SKIP LOCKED, inserts are
// ON CONFLICT and updates conditional, and message ids are derived from the
// fact, so no fact is emitted twice. The clock is injected (Config.Now) and
// passed to SQL, so tests run compressed time.
package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/bootstrap"
	"github.com/lucius-platform/lucius/core/runbook"
)

// Config configures the scheduler. Zero values take the defaults noted.
type Config struct {
	// Service: gRPC on 127.0.0.1:9094, HTTP on 127.0.0.1:8084, 10 connections by default.
	process.Service
	// Bus selects and tunes the transport (default: the PostgreSQL bus in
	// the database).
	Bus busconfig.Config
	// Topology is the bus layout and entity options every process declares alike.
	Topology topology.Config
	// Tick is the time between rounds (default 1s).
	Tick time.Duration
	// Batch bounds the rows each stage handles per runbook and tick: batches
	// moved or detected, batches with member changes and members added or
	// removed per batch, phases dispatched, polling rows checked (default 500).
	Batch int
	// Now is the clock every due decision uses (default time.Now).
	Now func() time.Time
	// QueryTimeout bounds each transaction (default 30s).
	QueryTimeout time.Duration
}

// Validate reports missing or invalid settings.
func (c *Config) Validate() error {
	return errors.Join(c.Service.Validate(), c.Bus.Validate(), c.validateScheduling())
}

func (c *Config) validateScheduling() error {
	var errs []error
	if c.Tick < 0 {
		errs = append(errs, errors.New("scheduler: Tick must not be negative"))
	}
	if c.Batch < 0 {
		errs = append(errs, errors.New("scheduler: Batch must not be negative"))
	}
	if c.QueryTimeout < 0 {
		errs = append(errs, errors.New("scheduler: QueryTimeout must not be negative"))
	}
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	c.Service.Defaults("127.0.0.1:9094", "127.0.0.1:8084", 10)
	if c.Tick == 0 {
		c.Tick = time.Second
	}
	if c.Batch == 0 {
		c.Batch = 500
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = 30 * time.Second
	}
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	rt, err := bootstrap.Open(ctx, cfg.Service, bootstrap.Options{Bus: &cfg.Bus})
	if err != nil {
		return err
	}
	defer rt.Close()
	pool, store := rt.Pool, rt.Ledger
	// The topic exists before the first event the dispatcher publishes to it.
	if err := rt.Declare(ctx, cfg.Topology); err != nil {
		return err
	}
	sched, err := New(store, runbook.NewStore(pool), cfg)
	if err != nil {
		return err
	}
	ep, err := cfg.Service.Endpoint(nil)
	if err != nil {
		return err
	}

	// A tick cut short by shutdown rolls back: nothing half-done is kept.
	loopCtx, stopLoop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Failures are logged and counted by the tick; the next one tries again.
		loop.Every(loopCtx, cfg.Tick, true, func(ctx context.Context) { _ = sched.Tick(ctx) })
	}()
	defer func() { stopLoop(); wg.Wait() }()

	log.Info("scheduler serving", "grpc", ep.GRPCAddr(), "http", ep.HTTPAddr(),
		slog.Duration("tick", cfg.Tick), slog.Int("batch", cfg.Batch))
	return rt.Serve(ctx, ep)
}
