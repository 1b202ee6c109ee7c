// Command worker runs example platform services (OCR, EMBEDDING, SIS, RASTER,
// TILES) on the worker skeleton: it receives each service's directives from
// the bus, ACKs, executes, writes workspace artifacts and sends RESULT.
// LUCIUS_WORKER_SERVICE names one service or a comma-separated list; every
// service gets its own Runner, and they share the process's database pool,
// bus, idempotency store and HTTP endpoints. The database holds the
// idempotency store, and the bus too when it is the PostgreSQL bus
// (LUCIUS_BUS=postgres, the default); with LUCIUS_BUS=servicebus the bus is
// Azure Service Bus (package busconfig opens either). Configuration comes
// from the environment; see README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/database"
	"github.com/lucius-platform/lucius/base/egress"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/topology"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/embedding"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/ocr"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/phased"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/raster"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/runbookdemo"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/sis"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/tiles"
)

// platform is one example service this binary can run: its executor and
// the handlers it announces to Lucius (WorkerService) at start.
type platform struct {
	exec     worker.Executor
	handlers []string
}

// served is a service whose executor is a worker.Handlers: it announces every name.
func served(h worker.Handlers) platform { return platform{exec: h, handlers: h.Names()} }

// executors are the example services this binary can run, by service name.
// raster and tiles serve several workflow handlers each (worker.Handlers). A
// fork replaces this map with its own executors.
var executors = map[string]platform{
	"ocr":       {exec: ocr.Executor{}, handlers: []string{"OCR"}},
	"embedding": {exec: embedding.Executor{}, handlers: []string{"EMBEDDING"}},
	"sis":       {exec: sis.Executor{}, handlers: []string{"SIS"}},
	"raster":    served(raster.NewExecutor()),
	"tiles":     served(tiles.NewExecutor()),
	// A long step in phases that resumes from its checkpoints.
	phased.Service: {exec: phased.Executor{}, handlers: []string{phased.Handler}},
	// The demo pool for runbooks: any function, behaving as its params say.
	// It announces none: the runbooks that use it register their functions.
	runbookdemo.Service: {exec: runbookdemo.Executor{}},
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// settings is everything main reads from the environment.
type settings struct {
	// services are the platform services to run, one Runner each, in the
	// order LUCIUS_WORKER_SERVICE lists them.
	services    []string
	databaseURL string // the idempotency store's database (and the PostgreSQL bus's)
	httpAddr    string
	maxConns    int
	// bus selects the transport: the PostgreSQL bus in the database, or Azure Service Bus.
	bus       busconfig.Config
	retention time.Duration
	limits    server.Limits // the HTTP listener's timeouts and header cap
	telemetry telemetry.Config
	// auth checks the operator token /metrics requires.
	auth auth.Config
	// runner is every Runner's configuration but its Service.
	runner worker.Config
	// gatewayTarget is where the worker announces its handlers
	// (WorkerService; LUCIUS_GATEWAY_TARGET); empty: it does not.
	gatewayTarget string
	version       string
}

func readSettings(e *env.Reader) (settings, error) {
	services := splitServices(e.Required("LUCIUS_WORKER_SERVICE"))
	instance := e.String("LUCIUS_INSTANCE", "")
	s := settings{
		services:      services,
		databaseURL:   e.Required("DATABASE_URL"),
		httpAddr:      e.String("LUCIUS_WORKER_HTTP_ADDR", "127.0.0.1:8090"),
		maxConns:      e.Int("LUCIUS_DB_MAX_CONNS", 10),
		retention:     e.Duration("LUCIUS_WORKER_RETENTION", 14*24*time.Hour),
		gatewayTarget: e.String("LUCIUS_GATEWAY_TARGET", ""),
		version:       e.String("LUCIUS_WORKER_VERSION", buildVersion()),
		limits:        process.ReadLimits(e),
		telemetry:     process.TelemetryConfig(e, "worker-"+strings.Join(services, "-")),
		runner: worker.Config{
			WorkerID:          instance,
			Concurrency:       e.Int("LUCIUS_WORKER_CONCURRENCY", worker.DefaultConcurrency),
			Prefetch:          e.Int("LUCIUS_WORKER_PREFETCH", worker.DefaultPrefetch),
			NoOp:              e.Bool("LUCIUS_WORKER_NOOP", false),
			TaskTimeout:       e.Duration("LUCIUS_WORKER_TASK_TIMEOUT", 0),
			ShutdownGrace:     e.Duration("LUCIUS_WORKER_SHUTDOWN_GRACE", 0),
			ExecutionDelay:    e.Duration("LUCIUS_WORKER_DELAY", 0),
			Faults:            e.Bool("LUCIUS_WORKER_FAULTS", false),
			FileRoots:         splitFileRoots(e.String("LUCIUS_FILE_ROOTS", "")),
			InlineOutputLimit: e.Int("LUCIUS_WORKER_INLINE_OUTPUT_BYTES", worker.DefaultInlineOutputLimit),
		},
	}
	var err error
	if s.runner.Egress.Allow, err = egress.ParseAllow(e.String("LUCIUS_EGRESS_ALLOW", "")); err != nil {
		e.Fail(err)
	}
	if s.runner.Azure, err = readBlobConfig(e); err != nil {
		e.Fail(err)
	}
	if s.auth, err = auth.ReadConfig(e); err != nil {
		return settings{}, err
	}
	s.bus, err = busconfig.ConfigFromEnv(e)
	e.Fail(err) // reported with the rest
	// How the worker authenticates its callbacks: a bearer token from a file
	// (re-read when it changes), or an mTLS client certificate.
	if s.runner.DialOptions, err = callbackCredentials(e); err != nil {
		return settings{}, err
	}
	topo, err := topology.ConfigFromEnv(e) // the same settings every Lucius process declares
	if err != nil {
		return settings{}, err
	}
	s.runner.Topology, s.runner.LockDuration, s.runner.MaxDeliveryCount = topo.Topology, topo.DirectiveLockDuration, topo.MaxDeliveryCount
	if err := e.Err(); err != nil {
		return settings{}, err
	}
	var errs []error
	if len(services) == 0 {
		errs = append(errs, errors.New("LUCIUS_WORKER_SERVICE names no service"))
	}
	if err := s.limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for _, service := range services {
		if seen[service] {
			errs = append(errs, fmt.Errorf("LUCIUS_WORKER_SERVICE: %q is listed twice", service))
		}
		seen[service] = true
		if _, ok := executors[service]; !ok && !s.runner.NoOp {
			errs = append(errs, fmt.Errorf("LUCIUS_WORKER_SERVICE names %q: want one of %s, or a comma-separated list of them (any service name with LUCIUS_WORKER_NOOP=true)",
				service, strings.Join(serviceNames(), ", ")))
		}
	}
	if s.maxConns < 2 {
		errs = append(errs, fmt.Errorf("LUCIUS_DB_MAX_CONNS=%d: want at least 2", s.maxConns))
	}
	if s.retention < time.Hour {
		errs = append(errs, fmt.Errorf("LUCIUS_WORKER_RETENTION=%v: want at least 1h", s.retention))
	}
	for i, service := range services {
		cfg := s.runner
		if i > 0 {
			cfg = worker.Config{} // report the shared settings once
		}
		cfg.Service = service
		if err := cfg.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return s, errors.Join(errs...)
}

// readBlobConfig reads the az:// store's settings: LUCIUS_BLOB_ENDPOINTS
// (account=URL,...), LUCIUS_BLOB_CREDENTIAL (default, workload-identity,
// managed-identity or shared-key), LUCIUS_BLOB_ACCOUNT_KEYS
// (account=base64 key,..., shared-key only) and LUCIUS_BLOB_BLOCK_SIZE.
// worker.Config.Validate checks them.
func readBlobConfig(e *env.Reader) (blob.AzureConfig, error) {
	cfg := blob.AzureConfig{
		Credential: blob.CredentialMode(e.String("LUCIUS_BLOB_CREDENTIAL", string(blob.CredentialDefault))),
		BlockSize:  int64(e.Int("LUCIUS_BLOB_BLOCK_SIZE", blob.DefaultBlockSize)),
	}
	var errs []error
	var err error
	if cfg.Endpoints, err = blob.ParseAccountMap(e.String("LUCIUS_BLOB_ENDPOINTS", "")); err != nil {
		errs = append(errs, fmt.Errorf("LUCIUS_BLOB_ENDPOINTS: %w", err))
	}
	if cfg.AccountKeys, err = blob.ParseAccountMap(e.String("LUCIUS_BLOB_ACCOUNT_KEYS", "")); err != nil {
		errs = append(errs, fmt.Errorf("LUCIUS_BLOB_ACCOUNT_KEYS: %w", err))
	}
	return cfg, errors.Join(errs...)
}

// splitFileRoots splits LUCIUS_FILE_ROOTS's colon-separated list of
// folders, trimming spaces and dropping empty items (Config.Validate checks
// that each is absolute).
func splitFileRoots(v string) []string {
	var roots []string
	for _, r := range filepath.SplitList(v) {
		if r = strings.TrimSpace(r); r != "" {
			roots = append(roots, r)
		}
	}
	return roots
}

// splitServices splits LUCIUS_WORKER_SERVICE's comma-separated list,
// trimming spaces and dropping empty items.
func splitServices(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func serviceNames() []string {
	names := make([]string, 0, len(executors))
	for n := range executors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := readSettings(env.New())
	if err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, s.telemetry)
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.Background()) //nolint:errcheck
	log := tel.Logger

	pool, b, err := openBackends(ctx, s, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	defer b.Close(context.Background()) //nolint:errcheck
	store := worker.NewPGStore(pool)

	runners := make([]*worker.Runner, len(s.services))
	for i, service := range s.services {
		cfg := s.runner
		cfg.Service = service
		cfg.Logger = log
		if len(s.services) > 1 {
			cfg.Logger = log.With("runner", service) // tell the runners' records apart
		}
		if runners[i], err = worker.NewRunner(b, store, executors[service].exec, cfg); err != nil {
			return err
		}
	}

	ln, err := server.Listen(s.httpAddr)
	if err != nil {
		return err
	}
	ready := func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("database: %w", err)
		}
		for i, r := range runners {
			if err := r.Ready(ctx); err != nil {
				return fmt.Errorf("service %s: %w", s.services[i], err)
			}
		}
		return nil
	}
	authn, err := auth.NewAuthenticator(s.auth)
	if err != nil {
		return err
	}
	ops := auth.NewGuard(authn, log).HTTP(tel.Ops) // /metrics needs an operator token
	httpRunner := server.HTTPRunner{Server: server.NewHTTPServer(server.NewHTTPMux(nil, ops, ready), s.limits), Listener: ln}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		if err := httpRunner.Serve(); err != nil {
			cancel(fmt.Errorf("serve http: %w", err))
		}
	}()
	go pruneLoop(runCtx, store, s.retention, log)
	if err := announce(runCtx, s, runners[0].WorkerID(), log); err != nil {
		return err
	}

	log.InfoContext(ctx, "worker starting", "platform_service", strings.Join(s.services, ","), "http", ln.Addr().String(),
		"worker_id", runners[0].WorkerID())
	runErr := runAll(runCtx, cancel, s.services, runners)
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := httpRunner.Shutdown(shutdownCtx); err != nil {
		log.WarnContext(shutdownCtx, "shut down http", telemetry.Err(err))
	}
	if ctx.Err() == nil && runErr == nil {
		// Not a signal: the HTTP server failed and stopped the runners.
		return context.Cause(runCtx)
	}
	return runErr // nil after a signal, or the runner that could not start
}

// openBackends opens the database, which holds the idempotency store (and
// the bus's tables when the bus is the PostgreSQL one: Migrations is empty for
// Service Bus), and the bus the settings select. The caller closes the bus,
// then the pool.
func openBackends(ctx context.Context, s settings, log *slog.Logger) (*pgxpool.Pool, bus.Bus, error) {
	pool, err := database.Open(ctx, s.databaseURL, int32(s.maxConns),
		append([]migrate.Set{worker.Migrations}, s.bus.Migrations()...)...)
	if err != nil {
		return nil, nil, err
	}
	b, err := busconfig.Open(ctx, s.bus, pool, log)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, b, nil
}

// runAll runs every runner until ctx ends. A runner that cannot start stops
// the others (through cancel): the process serves all its services or none.
// Each runner lets its in-flight directives finish within its shutdown grace.
func runAll(ctx context.Context, cancel context.CancelCauseFunc, services []string, runners []*worker.Runner) error {
	errs := make([]error, len(runners))
	var wg sync.WaitGroup
	for i, r := range runners {
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("service %s: %w", services[i], err)
				cancel(errs[i])
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pruneLoop deletes idempotency records and step effects older than
// retention, hourly. Keep retention above the bus's message TTL (14 days by
// default), or a very late redelivery would run its attempt again.
func pruneLoop(ctx context.Context, store worker.Store, retention time.Duration, log *slog.Logger) {
	loop.Every(ctx, time.Hour, false, func(ctx context.Context) {
		_, err := loop.Drain(ctx, 5000, 30*time.Second, func(ctx context.Context, limit int) (int64, error) {
			return store.Prune(ctx, time.Now().Add(-retention), limit)
		})
		if err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "prune worker records", telemetry.Err(err))
		}
	})
}

// announce tells the gateway, in the background, which handlers each
// service runs (worker.Announce), when LUCIUS_GATEWAY_TARGET is set.
func announce(ctx context.Context, s settings, instance string, log *slog.Logger) error {
	if s.gatewayTarget == "" {
		log.InfoContext(ctx, "handlers not announced: LUCIUS_GATEWAY_TARGET is unset (the handler catalog must list them)")
		return nil
	}
	conn, err := server.Dial(s.gatewayTarget, s.runner.DialOptions...)
	if err != nil {
		return fmt.Errorf("LUCIUS_GATEWAY_TARGET: %w", err)
	}
	context.AfterFunc(ctx, func() { conn.Close() })
	client := luciusv1.NewWorkerServiceClient(conn)
	for _, service := range s.services {
		var handlers []*luciusv1.HandlerInfo
		for _, name := range executors[service].handlers {
			handlers = append(handlers, &luciusv1.HandlerInfo{Name: name, Version: s.version})
		}
		if len(handlers) == 0 {
			continue // the demo pool, or a no-op service: nothing to announce
		}
		go worker.Announce(ctx, client, worker.Announcement{Service: service, InstanceID: instance, Version: s.version,
			Handlers: handlers}, log)
	}
	return nil
}

// buildVersion is the worker module's version as Go recorded it.
func buildVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "unknown"
}
