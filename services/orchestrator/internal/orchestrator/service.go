// Package orchestrator runs jobs. Instances compete for accepted commands on the
// orchestrator-jobs queue; the winner creates the job, owns it (heartbeating its
// ownership, reclaiming orphans of silent instances) and dispatches its first
// step. Every instance serves the CallbackService: ACK and RESULT move steps on
// and dispatch the next one, each in one ledger transaction (package engine).
package orchestrator

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

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/bus"
	"github.com/lucius-platform/lucius/core/bus/pgbus"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
	"github.com/lucius-platform/lucius/core/migrate"
	"github.com/lucius-platform/lucius/core/protocol"
	"github.com/lucius-platform/lucius/core/server"
	"github.com/lucius-platform/lucius/core/topology"
)

// Config configures an orchestrator instance. Zero values take the defaults noted.
type Config struct {
	DatabaseURL string // required
	GRPCAddr    string // default 127.0.0.1:9091
	HTTPAddr    string // default 127.0.0.1:8081
	// OwnerID names this instance in job ownership. Required (main derives a unique one).
	OwnerID   string
	Protocols *protocol.Registry // required
	// Topology is the bus layout and entity options every process declares alike.
	Topology topology.Config
	// WorkspaceRoot is the URL job workspaces live under. Required.
	WorkspaceRoot string
	// CallbackGRPCTarget and CallbackRESTURL are put in directives for workers;
	// defaults: this instance's own gRPC and HTTP addresses.
	CallbackGRPCTarget string
	CallbackRESTURL    string
	// JobConcurrency bounds orchestrator-jobs messages handled at once (default 8).
	JobConcurrency  int
	Ownership       OwnershipConfig
	RetryBackoff    time.Duration // default 2s
	MaxDBConns      int32         // default 30
	BusPollInterval time.Duration // default: pgbus's
	Logger          *slog.Logger
	Metrics         http.Handler
	ShutdownGrace   time.Duration // default 10s
}

// Validate reports missing settings.
func (c *Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("orchestrator: DatabaseURL is required"))
	}
	if c.OwnerID == "" {
		errs = append(errs, errors.New("orchestrator: OwnerID is required"))
	}
	if c.Protocols == nil {
		errs = append(errs, errors.New("orchestrator: Protocols is required"))
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
	if c.GRPCAddr == "" {
		c.GRPCAddr = "127.0.0.1:9091"
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:8081"
	}
	if c.JobConcurrency == 0 {
		c.JobConcurrency = 8
	}
	if c.MaxDBConns == 0 {
		c.MaxDBConns = 30
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	c.Ownership.defaults()
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger.With("owner_id", cfg.OwnerID)
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
	b, err := pgbus.New(ctx, pool, pgbus.Config{Logger: log, PollInterval: cfg.BusPollInterval})
	if err != nil {
		return err
	}
	defer b.Close(context.Background()) //nolint:errcheck
	cfg.Topology.Services = cfg.Protocols.Services()
	if err := topology.Declare(ctx, b, cfg.Topology); err != nil {
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
	callbacks := engine.Callbacks{GRPCTarget: cfg.CallbackGRPCTarget, RESTBaseURL: cfg.CallbackRESTURL}
	if callbacks.GRPCTarget == "" {
		callbacks.GRPCTarget = grpcListener.Addr().String()
	}
	if callbacks.RESTBaseURL == "" {
		callbacks.RESTBaseURL = "http://" + httpListener.Addr().String()
	}
	eng, err := engine.New(store, engine.Config{Protocols: cfg.Protocols, Callbacks: callbacks,
		WorkspaceRoot: cfg.WorkspaceRoot, RetryBackoff: cfg.RetryBackoff, Logger: log})
	if err != nil {
		return err
	}
	cbService, err := newCallbackService(eng, log)
	if err != nil {
		return err
	}
	grpcServer, health, err := server.NewGRPC(log)
	if err != nil {
		return err
	}
	luciusv1.RegisterCallbackServiceServer(grpcServer, cbService)
	conn, err := server.Dial(grpcListener.Addr().String())
	if err != nil {
		return err
	}
	defer conn.Close()
	rest := server.NewRESTMux()
	if err := luciusv1.RegisterCallbackServiceHandler(ctx, rest, conn); err != nil {
		return err
	}
	ready := func(ctx context.Context) error { return pool.Ping(ctx) }
	httpServer := server.NewHTTPServer(server.NewHTTPMux(rest, cfg.Metrics, ready))

	receiver, err := b.NewReceiver(ctx, bus.QueueSource(topology.QueueOrchestratorJobs))
	if err != nil {
		return err
	}
	consumer, err := newJobConsumer(receiver, eng, cfg.OwnerID, cfg.JobConcurrency, log)
	if err != nil {
		return err
	}
	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){
		consumer.run,
		func(ctx context.Context) {
			heartbeatLoop(ctx, store, cfg.OwnerID, cfg.Ownership.HeartbeatInterval, log)
		},
		func(ctx context.Context) { orphanLoop(ctx, store, cfg.OwnerID, cfg.Ownership, log) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(loops) }()
	}
	defer func() {
		stopLoops()
		wg.Wait()
		receiver.Close(context.Background()) //nolint:errcheck
	}()

	health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	log.Info("orchestrator serving", "grpc", grpcListener.Addr().String(), "http", httpListener.Addr().String(),
		"callback_grpc_target", callbacks.GRPCTarget, "heartbeat", cfg.Ownership.HeartbeatInterval,
		"orphan_threshold", cfg.Ownership.OrphanThreshold, "orphan_scan", cfg.Ownership.OrphanScan)
	return server.Run(ctx, cfg.ShutdownGrace,
		server.GRPCRunner{Server: grpcServer, Listener: grpcListener},
		server.HTTPRunner{Server: httpServer, Listener: httpListener})
}
