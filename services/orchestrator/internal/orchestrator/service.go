// Package orchestrator runs jobs. Instances compete for accepted commands on the
// orchestrator-jobs queue; the winner creates the job, owns it (heartbeating its
// ownership, reclaiming orphans of silent instances) and dispatches its first
// step. Every instance serves the CallbackService: ACK and RESULT move steps on
// and dispatch the next one, each in one ledger transaction (package engine).
// Instances also compete for the orchestrator-events subscription: the runbook
// executor carries out the scheduler's events (seed 003) through jobs.
package orchestrator

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/bootstrap"
	"github.com/lucius-platform/lucius/core/breaker"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/registry"
	"github.com/lucius-platform/lucius/core/runbook"
	"github.com/lucius-platform/lucius/core/workflow"
)

// Config configures an orchestrator instance. Zero values take the defaults noted.
type Config struct {
	// Service: gRPC on 127.0.0.1:9091, HTTP on 127.0.0.1:8081, 30 connections by default.
	process.Service
	// OwnerID names this instance in job ownership. Required (main derives a unique one).
	OwnerID string
	// WorkflowsDir holds definitions (and a handlers.yaml) registered at start,
	// after the built-in ones. Optional.
	WorkflowsDir string
	// WorkflowLimits bound workflow definitions and their jobs (zero fields:
	// workflow's defaults); every process should have the same.
	WorkflowLimits workflow.Limits
	// Breakers: the circuit breakers this orchestrator's dispatches respect
	// (the reconciler decides them; only Disabled and Interval matter here).
	Breakers breaker.Policy
	// Bus selects and tunes the transport (default: the PostgreSQL bus in
	// the database).
	Bus busconfig.Config
	// Topology is the bus layout and entity options every process declares alike.
	Topology topology.Config
	// WorkspaceRoot is the URL job workspaces live under. Required.
	WorkspaceRoot string
	// CallbackKeys sign and check the callback tokens of directives. Required.
	CallbackKeys *auth.CallbackKeys
	// CallbackTokenGrace is how long a callback token outlives its lease (default 5m).
	CallbackTokenGrace time.Duration
	// CallbackGRPCTarget and CallbackRESTURL are put in directives for workers;
	// defaults: this instance's own gRPC and HTTP addresses.
	CallbackGRPCTarget string
	CallbackRESTURL    string
	// JobConcurrency bounds orchestrator-jobs messages handled at once (default 8).
	JobConcurrency int
	Ownership      OwnershipConfig
	// Now is the runbook executor's clock (default time.Now; tests compress time).
	Now func() time.Time
}

// Validate reports missing settings.
func (c *Config) Validate() error {
	errs := []error{c.Service.Validate(), c.WorkflowLimits.Validate(), c.Bus.Validate(), c.Breakers.Validate()}
	if c.OwnerID == "" {
		errs = append(errs, errors.New("orchestrator: OwnerID is required"))
	}
	if c.WorkspaceRoot == "" {
		errs = append(errs, errors.New("orchestrator: WorkspaceRoot is required"))
	}
	if c.JobConcurrency < 0 {
		errs = append(errs, errors.New("orchestrator: JobConcurrency must not be negative"))
	}
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	c.Service.Defaults("127.0.0.1:9091", "127.0.0.1:8081", 30)
	if c.JobConcurrency == 0 {
		c.JobConcurrency = 8
	}
	c.Ownership.defaults()
}

// Migrations are the schemas an orchestrator applies at start: the ledger,
// the live configuration, runbooks, and the PostgreSQL bus's tables when that
// is the transport. They include every set the reconciler and the scheduler
// apply and the gateway's control-plane sets, so `orchestrator migrate`
// migrates for all of them; the gateway's own tables (console sessions,
// request ids) it migrates itself at start, under the same lock.
func Migrations(b busconfig.Config) []migrate.Set {
	return bootstrap.Options{Bus: &b}.Sets()
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.Logger = cfg.Logger.With("owner_id", cfg.OwnerID)
	log := cfg.Logger
	rt, err := bootstrap.Open(ctx, cfg.Service, bootstrap.Options{Bus: &cfg.Bus})
	if err != nil {
		return err
	}
	defer rt.Close()
	pool, live, store, b := rt.Pool, rt.Live, rt.Ledger, rt.Bus
	workflows, err := registry.Open(ctx, store, cfg.WorkflowsDir, cfg.WorkflowLimits)
	if err != nil {
		return err
	}
	if cfg.Topology.Services, err = workflows.Services(ctx); err != nil {
		return err
	}
	if err := rt.Declare(ctx, cfg.Topology); err != nil {
		return err
	}

	ep, err := cfg.Service.Endpoint(nil)
	if err != nil {
		return err
	}
	callbacks := engine.Callbacks{GRPCTarget: cfg.CallbackGRPCTarget, RESTBaseURL: cfg.CallbackRESTURL}
	if callbacks.GRPCTarget == "" {
		callbacks.GRPCTarget = ep.GRPCAddr()
	}
	if callbacks.RESTBaseURL == "" {
		callbacks.RESTBaseURL = "http://" + ep.HTTPAddr()
	}
	breakers := breaker.NewCache(store, cfg.Breakers, log)
	eng, err := engine.New(store, engine.Config{Definitions: workflows, CallbackKeys: cfg.CallbackKeys, CallbackTokenGrace: cfg.CallbackTokenGrace, Callbacks: callbacks,
		WorkspaceRoot: cfg.WorkspaceRoot, Logger: log, Breakers: breakers, Pauses: live})
	if err != nil {
		ep.Close()
		return err
	}
	cbService, err := newCallbackService(eng, cfg.CallbackKeys, log)
	if err != nil {
		ep.Close()
		return err
	}
	luciusv1.RegisterCallbackServiceServer(ep.GRPC, cbService)
	if err := luciusv1.RegisterCallbackServiceHandler(ctx, ep.REST, ep.Conn()); err != nil {
		ep.Close()
		return err
	}

	receiver, err := b.NewReceiver(ctx, bus.QueueSource(topology.QueueOrchestratorJobs))
	if err != nil {
		ep.Close()
		return err
	}
	owned, err := newOwnership(store, eng, cfg.OwnerID, cfg.Ownership, log)
	if err != nil {
		ep.Close()
		return err
	}
	defer owned.close()
	if err := owned.load(ctx); err != nil {
		ep.Close()
		return err
	}
	consumer, err := newJobConsumer(receiver, eng, owned, cfg.JobConcurrency, log)
	if err != nil {
		ep.Close()
		return err
	}
	events, err := b.NewReceiver(ctx, bus.SubscriptionSource(topology.TopicOrchestratorEvents, topology.SubscriptionOrchestrator))
	if err != nil {
		ep.Close()
		return err
	}
	executor, err := newRunbookExecutor(store, runbook.NewStore(pool), eng, workflows, events, cfg.Now, log)
	if err != nil {
		ep.Close()
		return err
	}
	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){
		consumer.run,
		owned.run,
		executor.run,
		breakers.Run,
	} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(loops) }()
	}
	defer func() {
		stopLoops()
		wg.Wait()
		receiver.Close(context.Background()) //nolint:errcheck
		events.Close(context.Background())   //nolint:errcheck
	}()

	log.Info("orchestrator serving", "grpc", ep.GRPCAddr(), "http", ep.HTTPAddr(),
		"callback_grpc_target", callbacks.GRPCTarget, "heartbeat", cfg.Ownership.HeartbeatInterval,
		"orphan_threshold", cfg.Ownership.OrphanThreshold, "orphan_scan", cfg.Ownership.OrphanScan)
	return rt.Serve(ctx, ep)
}
