// Package reconciler keeps the ledger and the bus in step: its dispatcher
// publishes outbox rows (the durable intent every state change writes in its own
// transaction) and marks them sent; its deliverer posts completion callbacks;
// its sweepers repair drift (ACK timeouts, expired leases, steps stuck
// dispatching, jobs past their SLA, messages stuck in the outbox, requests no
// orchestrator claimed) and collect bus dead letters. Every repair goes through
// the engine's guards, so any number of reconcilers may run.
package reconciler

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/egress"
	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/core/bootstrap"
	"github.com/lucius-platform/lucius/core/breaker"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/workflow"
)

// Config configures a reconciler. Zero values take the defaults noted.
type Config struct {
	// Service: gRPC (health, reflection) on 127.0.0.1:9093, HTTP on
	// 127.0.0.1:8083, 20 connections by default.
	process.Service
	// Bus selects and tunes the transport (default: the PostgreSQL bus in
	// the database). On a bus in the ledger's database the dispatcher
	// publishes in the transaction that marks outbox rows sent.
	Bus busconfig.Config
	// Topology is the bus layout and entity options every process declares alike.
	Topology   topology.Config
	Dispatcher DispatcherConfig
	Callbacks  CallbackConfig
	Sweepers   SweepersConfig
	// Breakers tunes the circuit breakers this reconciler decides (package breaker).
	Breakers breaker.Policy
	// WorkspaceRoot is the URL job workspaces live under (directives of the
	// attempts sweepers start carry it). Required.
	WorkspaceRoot string
	// CallbackKeys sign the callback tokens of re-dispatched directives. Required.
	CallbackKeys *auth.CallbackKeys
	// CallbackTokenGrace is how long a callback token outlives its lease (default 5m).
	CallbackTokenGrace time.Duration
	// CallbackGRPCTarget and CallbackRESTURL are the orchestrators' CallbackService,
	// put in directives of the attempts sweepers start (defaults: the
	// orchestrator's default addresses, 127.0.0.1:9091 and http://127.0.0.1:8081).
	CallbackGRPCTarget string
	CallbackRESTURL    string
	// WorkflowLimits bound workflow definitions and their jobs (zero fields:
	// workflow's defaults); every process should have the same.
	WorkflowLimits workflow.Limits

	// Egress is the policy every completion webhook is dialed through
	// (LUCIUS_EGRESS_ALLOW opens internal ranges).
	Egress egress.Policy

	// OutboxRetention keeps sent rows this long before purging (default 1h).
	OutboxRetention time.Duration
	PurgeInterval   time.Duration // default 1m
}

// Validate reports missing settings.
func (c *Config) Validate() error {
	errs := []error{c.Service.Validate(), c.WorkflowLimits.Validate(), c.Bus.Validate(), c.Breakers.Validate()}
	if c.WorkspaceRoot == "" {
		errs = append(errs, errors.New("reconciler: WorkspaceRoot is required"))
	}
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	c.Service.Defaults("127.0.0.1:9093", "127.0.0.1:8083", 20)
	if c.OutboxRetention == 0 {
		c.OutboxRetention = time.Hour
	}
	if c.PurgeInterval == 0 {
		c.PurgeInterval = time.Minute
	}
	if c.CallbackGRPCTarget == "" && c.CallbackRESTURL == "" {
		c.CallbackGRPCTarget, c.CallbackRESTURL = "127.0.0.1:9091", "http://127.0.0.1:8081"
	}
	c.Sweepers.defaults()
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
	pool, live, store, b := rt.Pool, rt.Live, rt.Ledger, rt.Bus
	// Declare the subscriptions of every service known so far; orchestrators and
	// workers declare theirs too, before anything is published to them.
	workflows := registry.New(store, cfg.WorkflowLimits)
	declare := func(ctx context.Context) (topology.Config, error) {
		topo := cfg.Topology
		var err error
		if topo.Services, err = workflows.Services(ctx); err != nil {
			return topo, err
		}
		return topo, rt.Declare(ctx, topo)
	}
	if _, err := declare(ctx); err != nil {
		return err
	}
	breakers := breaker.NewCache(store, cfg.Breakers, log)
	eng, err := engine.New(store, engine.Config{Definitions: workflows, CallbackKeys: cfg.CallbackKeys, CallbackTokenGrace: cfg.CallbackTokenGrace, WorkspaceRoot: cfg.WorkspaceRoot, Logger: log,
		Callbacks: engine.Callbacks{GRPCTarget: cfg.CallbackGRPCTarget, RESTBaseURL: cfg.CallbackRESTURL}, Breakers: breakers, Pauses: live})
	if err != nil {
		return err
	}
	monitor, err := breaker.NewMonitor(store, cfg.Breakers, func(ctx context.Context, h ledger.HeldStep) error {
		_, err := eng.ReleaseHold(ctx, h)
		return err
	}, otel.Meter("lucius/reconciler"), log, func(ctx context.Context) { breakers.Refresh(ctx) }) //nolint:errcheck // Run retries
	if err != nil {
		return err
	}
	metrics, err := newSweepMetrics(log)
	if err != nil {
		return err
	}
	pendingGauge, err := registerPendingDeadLetters(otel.Meter("lucius/reconciler"), store)
	if err != nil {
		return err
	}
	defer unregister(pendingGauge, log)
	dead := &collector{bus: b, store: store, cfg: cfg.Sweepers.DeadLetters, log: log, receivers: map[string]bus.Receiver{}, draining: map[string]bool{}, opening: map[string]bool{},
		slots: make(chan struct{}, drainConcurrency),
		sources: func(ctx context.Context) ([]bus.Source, error) {
			topo := cfg.Topology
			var err error
			topo.Services, err = workflows.Services(ctx)
			return topology.Sources(topo), err
		}}
	defer dead.close()
	loops := append(sweepers(store, eng, cfg.Sweepers, staleOutbox(store, declare)),
		retentionSweeper(store, live, cfg.Sweepers.Retention, time.Now),
		func(ctx context.Context, m *sweepMetrics) {
			loop.Every(ctx, cfg.Sweepers.DeadLetters.Interval, true, func(ctx context.Context) { dead.round(ctx, m) })
		})
	disp, err := newDispatcher(store, b, pool, cfg.Dispatcher, log)
	if err != nil {
		return err
	}
	defer disp.close()
	deliv, err := newDeliverer(store, cfg.Callbacks, cfg.Egress, liveSecrets(live), log)
	if err != nil {
		return err
	}
	ep, err := cfg.Service.Endpoint(nil)
	if err != nil {
		return err
	}

	background, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	published, callbacks := make(chan struct{}, 1), make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){
		func(ctx context.Context) {
			listen(ctx, pool, ledger.NotifyChannel, log, map[string]chan<- struct{}{
				ledger.NotifyPublish: published, ledger.NotifyCallbacks: callbacks})
		},
		func(ctx context.Context) { disp.run(ctx, published) },
		func(ctx context.Context) { deliv.run(ctx, callbacks) },
		func(ctx context.Context) { purgeLoop(ctx, store, cfg.PurgeInterval, cfg.OutboxRetention, log) },
		func(ctx context.Context) { runAll(ctx, metrics, loops) },
		breakers.Run,
		monitor.Run,
		newResumer(store, eng, live, log).run,
	} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(background) }()
	}
	defer func() { stopLoops(); wg.Wait() }()

	log.Info("reconciler serving", "grpc", ep.GRPCAddr(), "http", ep.HTTPAddr(),
		"batch_size", disp.cfg.BatchSize, "poll_interval", disp.cfg.PollInterval,
		"ack_sweep", cfg.Sweepers.Acks.Interval, "lease_sweep", cfg.Sweepers.Leases.Interval,
		"callback_grpc_target", cfg.CallbackGRPCTarget)
	return rt.Serve(ctx, ep)
}

// staleOutbox repairs a message stuck in the outbox: it declares the bus
// topology again (a missing entity is the usual cause; at most once a minute)
// and records an OUTBOX_STALE event on the job.
func staleOutbox(store *ledger.Store, declare func(context.Context) (topology.Config, error)) func(context.Context, ledger.StaleOutboxRow) (engine.Swept, error) {
	var mu sync.Mutex
	var declared time.Time
	return func(ctx context.Context, r ledger.StaleOutboxRow) (engine.Swept, error) {
		mu.Lock()
		if time.Since(declared) > time.Minute {
			if _, err := declare(ctx); err != nil {
				mu.Unlock()
				return engine.Swept{}, err
			}
			declared = time.Now()
		}
		mu.Unlock()
		if r.JobID != "" {
			err := store.RecordEvents(ctx, ledger.Event{JobID: r.JobID, StepID: r.StepID, AttemptNo: r.AttemptNo,
				Type: ledger.EventOutboxStale, Reason: "UNSENT_TOO_LONG", Data: map[string]any{"outbox_id": r.ID,
					"kind": r.Kind, "destination": r.Destination, "publish_attempts": r.Attempts, "last_error": r.LastError}})
			if err != nil {
				return engine.Swept{}, err
			}
		}
		return engine.Swept{Applied: true, Outcome: "REPORTED"}, nil
	}
}
