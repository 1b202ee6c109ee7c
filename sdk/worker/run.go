package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/database"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/migrate"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/busconfig"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

// registered holds the handlers Handle registers: the service Run serves when
// no WithServices option names its services.
var registered = struct {
	sync.Mutex
	handlers Handlers
}{handlers: Handlers{}}

// Handle registers fn as the handler named name (the step_type of the
// directives it serves, e.g. "OCR"), for Run. Like http.Handle it panics on
// a programming error: an invalid or duplicate name, or a nil fn.
func Handle(name string, fn HandlerFunc) {
	if err := checkStepType(name); err != nil {
		panic(fmt.Sprintf("worker.Handle(%q): %v", name, err))
	}
	if fn == nil {
		panic(fmt.Sprintf("worker.Handle(%q): nil handler", name))
	}
	registered.Lock()
	defer registered.Unlock()
	if _, dup := registered.handlers[name]; dup {
		panic(fmt.Sprintf("worker.Handle(%q): registered twice", name))
	}
	registered.handlers[name] = fn
}

// Service is one platform service a process can run: its name (the bus
// subscriptions' and LUCIUS_WORKER_SERVICE's), what executes its
// directives, and the handlers it announces to Lucius when it starts.
type Service struct {
	Name     string
	Executor Executor
	// Handlers are announced (WorkerService.RegisterWorker); none: the
	// service announces nothing (the workflows that use it are registered
	// with their handlers some other way).
	Handlers []string
}

// Serve is the Service that serves handlers: every name in the map is
// announced.
func Serve(name string, handlers Handlers) Service {
	return Service{Name: name, Executor: handlers, Handlers: handlers.Names()}
}

// Option configures Run.
type Option func(*runOptions)

type runOptions struct {
	name       string
	services   []Service
	middleware []Middleware
	store      Store
}

// WithServices lists the services this binary can run instead of the
// handlers registered with Handle; LUCIUS_WORKER_SERVICE picks which run
// (one, or a comma-separated list; optional when there is one).
func WithServices(services ...Service) Option {
	return func(o *runOptions) { o.services = append(o.services, services...) }
}

// WithName names the service the handlers registered with Handle run as;
// LUCIUS_WORKER_SERVICE may then be left unset.
func WithName(service string) Option { return func(o *runOptions) { o.name = service } }

// WithMiddleware wraps every service's executor (Config.Middleware).
func WithMiddleware(m ...Middleware) Option {
	return func(o *runOptions) { o.middleware = append(o.middleware, m...) }
}

// WithStore replaces the idempotency store LUCIUS_WORKER_STORE selects.
func WithStore(s Store) Option { return func(o *runOptions) { o.store = s } }

// catalog is what the process can run: the WithServices list, or one service
// (named by WithName or LUCIUS_WORKER_SERVICE) serving the registered handlers.
func (o *runOptions) catalog() []Service {
	if len(o.services) > 0 {
		return o.services
	}
	registered.Lock()
	h := maps.Clone(registered.handlers)
	registered.Unlock()
	return []Service{Serve(o.name, h)}
}

// Run runs the worker until ctx ends or the process gets SIGINT or SIGTERM:
// it reads its configuration from the environment (see the SDK's README),
// opens the bus LUCIUS_BUS names and the idempotency store, serves /healthz,
// /readyz and /metrics, announces its handlers to the gateway, and runs one
// Runner per service, each receiving its directives, ACKing, executing,
// heartbeating, saving checkpoints and delivering RESULTs. On a signal each
// runner lets its attempts finish within LUCIUS_WORKER_SHUTDOWN_GRACE. It
// returns nil after a signal, or the error that stopped it.
//
// A process started with the one argument "healthcheck" does not run:
// Run asks the worker listening on LUCIUS_WORKER_HTTP_ADDR for /healthz and
// returns nil when it answers 200 (a container's HEALTHCHECK without a shell).
func Run(ctx context.Context, opts ...Option) error {
	o := &runOptions{}
	for _, opt := range opts {
		opt(o)
	}
	e := env.New()
	if len(os.Args) == 2 && os.Args[1] == process.CommandHealthcheck {
		return process.Healthcheck(ctx, e.String("LUCIUS_WORKER_HTTP_ADDR", defaultHTTPAddr))
	}
	s, err := readSettings(e, o.catalog())
	if err != nil {
		return err
	}
	s.runner.Middleware = append(s.runner.Middleware, o.middleware...)
	return process.Run(ctx, s.telemetry, func(ctx context.Context, tel *telemetry.Telemetry) error {
		return run(ctx, s, o.store, tel)
	})
}

// run is the worker's life inside process.Run: backends, runners, the HTTP
// server, announcements, then the runners until a signal.
func run(ctx context.Context, s settings, given Store, tel *telemetry.Telemetry) error {
	log := tel.Logger
	b, store, ready, closeAll, err := openBackends(ctx, s, given, log)
	if err != nil {
		return err
	}
	defer closeAll()

	runners := make([]*Runner, len(s.services))
	for i, svc := range s.services {
		cfg := s.runner
		cfg.Service = svc.Name
		cfg.Logger = log
		if len(s.services) > 1 {
			cfg.Logger = log.With("runner", svc.Name) // tell the runners' records apart
		}
		if runners[i], err = NewRunner(b, store, svc.Executor, cfg); err != nil {
			return err
		}
	}
	ln, err := server.Listen(s.httpAddr)
	if err != nil {
		return err
	}
	readyz := func(ctx context.Context) error {
		if err := ready(ctx); err != nil {
			return err
		}
		for i, r := range runners {
			if err := r.Ready(ctx); err != nil {
				return fmt.Errorf("service %s: %w", s.services[i].Name, err)
			}
		}
		return nil
	}
	authn, err := auth.NewAuthenticator(s.auth)
	if err != nil {
		return err
	}
	ops := auth.NewGuard(authn, log).HTTP(tel.Ops) // /metrics needs an operator token
	httpRunner := server.HTTPRunner{Server: server.NewHTTPServer(server.NewHTTPMux(nil, ops, readyz), s.limits), Listener: ln}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		if err := httpRunner.Serve(); err != nil {
			cancel(fmt.Errorf("serve http: %w", err))
		}
	}()
	go pruneLoop(runCtx, store, s.retention, log)
	if err := announceAll(runCtx, s, runners[0].WorkerID(), log); err != nil {
		return err
	}

	log.InfoContext(ctx, "worker starting", "platform_service", strings.Join(s.names(), ","), "http", ln.Addr().String(),
		"worker_id", runners[0].WorkerID(), "store", s.store, "bus", string(s.bus.Transport))
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

// openBackends opens what the settings select: the database when the bus
// or the store lives there (migrated for both), the bus, and the store
// (given, or PostgreSQL, or the local file). ready pings what can fail;
// closeAll closes everything in reverse order.
func openBackends(ctx context.Context, s settings, given Store, log *slog.Logger) (
	b bus.Bus, store Store, ready func(context.Context) error, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	ready = func(context.Context) error { return nil }
	var pool *pgxpool.Pool
	if s.databaseURL != "" {
		sets := s.bus.Migrations()
		if given == nil && s.store == StorePostgres {
			sets = append([]migrate.Set{Migrations}, sets...)
		}
		if pool, err = database.Open(ctx, s.databaseURL, int32(s.maxConns), sets...); err != nil {
			return nil, nil, nil, nil, err
		}
		closers = append(closers, pool.Close)
		ready = func(ctx context.Context) error {
			if err := pool.Ping(ctx); err != nil {
				return fmt.Errorf("database: %w", err)
			}
			return nil
		}
	}
	switch {
	case given != nil:
		store = given
	case s.store == StoreLocal:
		local, err := OpenLocalStore(s.storePath)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		closers = append(closers, func() { _ = local.Close() })
		store = local
	default:
		store = NewPGStore(pool)
	}
	if b, err = busconfig.Open(ctx, s.bus, pool, log); err != nil {
		return nil, nil, nil, nil, err
	}
	closers = append(closers, func() { _ = b.Close(context.Background()) })
	return b, store, ready, closeAll, nil
}

// runAll runs every runner until ctx ends. A runner that cannot start stops
// the others (through cancel): the process serves all its services or none.
func runAll(ctx context.Context, cancel context.CancelCauseFunc, services []Service, runners []*Runner) error {
	errs := make([]error, len(runners))
	var wg sync.WaitGroup
	for i, r := range runners {
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("service %s: %w", services[i].Name, err)
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
func pruneLoop(ctx context.Context, store Store, retention time.Duration, log *slog.Logger) {
	loop.Every(ctx, time.Hour, false, func(ctx context.Context) {
		_, err := loop.Drain(ctx, 5000, 30*time.Second, func(ctx context.Context, limit int) (int64, error) {
			return store.Prune(ctx, time.Now().Add(-retention), limit)
		})
		if err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "prune worker records", telemetry.Err(err))
		}
	})
}

// announceAll tells the gateway, in the background, which handlers each
// service runs (Announce), when LUCIUS_GATEWAY_TARGET is set.
func announceAll(ctx context.Context, s settings, instance string, log *slog.Logger) error {
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
	for _, svc := range s.services {
		if len(svc.Handlers) == 0 {
			continue // the demo pool, or a no-op service: nothing to announce
		}
		var handlers []*luciusv1.HandlerInfo
		for _, name := range svc.Handlers {
			handlers = append(handlers, &luciusv1.HandlerInfo{Name: name, Version: s.version})
		}
		go Announce(ctx, client, Announcement{Service: svc.Name, InstanceID: instance, Version: s.version,
			Handlers: handlers}, log)
	}
	return nil
}
