package worker

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/egress"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/process"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus/busconfig"
	"github.com/lucius-platform/lucius/bus/topology"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// The idempotency stores LUCIUS_WORKER_STORE selects.
const (
	// StorePostgres keeps the records in DATABASE_URL's database, shared by
	// every instance of a service (the default).
	StorePostgres = "postgres"
	// StoreLocal keeps them in a file of this instance
	// (LUCIUS_WORKER_STORE_PATH), for workers that must not hold database
	// credentials (with LUCIUS_BUS=servicebus): see OpenLocalStore.
	StoreLocal = "local"
)

// defaultHTTPAddr is where a worker serves /healthz, /readyz and /metrics
// unless LUCIUS_WORKER_HTTP_ADDR says otherwise.
const defaultHTTPAddr = "127.0.0.1:8090"

// settings is everything Run reads from the environment.
type settings struct {
	// services are the services to run, one Runner each, in the order
	// LUCIUS_WORKER_SERVICE lists them.
	services    []Service
	databaseURL string // the PostgreSQL bus's and store's database; empty when neither is used
	store       string // StorePostgres or StoreLocal
	storePath   string
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
	runner Config
	// gatewayTarget is where the worker announces its handlers
	// (WorkerService; LUCIUS_GATEWAY_TARGET); empty: it does not.
	gatewayTarget string
	version       string
}

func (s settings) names() []string {
	names := make([]string, len(s.services))
	for i, svc := range s.services {
		names[i] = svc.Name
	}
	return names
}

// readSettings reads the environment; catalog is what the binary can run
// (one unnamed service: the handlers registered with Handle, named by
// LUCIUS_WORKER_SERVICE). Every problem is reported at once.
func readSettings(e *env.Reader, catalog []Service) (settings, error) {
	var errs []error
	noop := e.Bool("LUCIUS_WORKER_NOOP", false)
	services, err := pickServices(e, catalog, noop)
	if err != nil {
		errs = append(errs, err)
	}
	s := settings{
		services:      services,
		store:         e.String("LUCIUS_WORKER_STORE", StorePostgres),
		storePath:     e.String("LUCIUS_WORKER_STORE_PATH", ""),
		httpAddr:      e.String("LUCIUS_WORKER_HTTP_ADDR", defaultHTTPAddr),
		maxConns:      e.Int("LUCIUS_DB_MAX_CONNS", 10),
		retention:     e.Duration("LUCIUS_WORKER_RETENTION", 14*24*time.Hour),
		gatewayTarget: e.String("LUCIUS_GATEWAY_TARGET", ""),
		version:       e.String("LUCIUS_WORKER_VERSION", buildVersion()),
		limits:        process.ReadLimits(e),
		runner: Config{
			WorkerID:          e.String("LUCIUS_INSTANCE", ""),
			Concurrency:       e.Int("LUCIUS_WORKER_CONCURRENCY", DefaultConcurrency),
			Prefetch:          e.Int("LUCIUS_WORKER_PREFETCH", DefaultPrefetch),
			NoOp:              noop,
			TaskTimeout:       e.Duration("LUCIUS_WORKER_TASK_TIMEOUT", 0),
			ShutdownGrace:     e.Duration("LUCIUS_WORKER_SHUTDOWN_GRACE", 0),
			AckLinger:         e.Duration("LUCIUS_WORKER_ACK_LINGER", 0),
			ExecutionDelay:    e.Duration("LUCIUS_WORKER_DELAY", 0),
			FileRoots:         splitFileRoots(e.String("LUCIUS_FILE_ROOTS", "")),
			InlineOutputLimit: e.Int("LUCIUS_WORKER_INLINE_OUTPUT_BYTES", DefaultInlineOutputLimit),
		},
	}
	s.telemetry = process.TelemetryConfig(e, "worker-"+strings.Join(s.names(), "-"))
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
	switch s.store {
	case StorePostgres:
	case StoreLocal:
		if s.storePath == "" {
			errs = append(errs, errors.New("LUCIUS_WORKER_STORE=local needs LUCIUS_WORKER_STORE_PATH, the store's file"))
		}
	default:
		errs = append(errs, fmt.Errorf("LUCIUS_WORKER_STORE=%q: want %s or %s", s.store, StorePostgres, StoreLocal))
	}
	// The database holds the PostgreSQL bus and the PostgreSQL store; a
	// worker using neither needs no database credentials.
	if len(s.bus.Migrations()) > 0 || s.store == StorePostgres {
		s.databaseURL = e.Required("DATABASE_URL")
	}
	if err := e.Err(); err != nil {
		return settings{}, errors.Join(append([]error{err}, errs...)...)
	}
	if err := s.limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if s.maxConns < 2 {
		errs = append(errs, fmt.Errorf("LUCIUS_DB_MAX_CONNS=%d: want at least 2", s.maxConns))
	}
	if s.retention < time.Hour {
		errs = append(errs, fmt.Errorf("LUCIUS_WORKER_RETENTION=%v: want at least 1h", s.retention))
	}
	for i, svc := range services {
		cfg := s.runner
		if i > 0 {
			cfg = Config{} // report the shared settings once
		}
		cfg.Service = svc.Name
		if err := cfg.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return s, errors.Join(errs...)
}

// pickServices resolves LUCIUS_WORKER_SERVICE against the catalog: a
// comma-separated list of its services (optional when it has one named
// service), or, for the registered handlers, the one name they run under.
// With LUCIUS_WORKER_NOOP any names run, with nothing announced.
func pickServices(e *env.Reader, catalog []Service, noop bool) ([]Service, error) {
	raw := e.String("LUCIUS_WORKER_SERVICE", "")
	if raw == "" {
		if len(catalog) != 1 || catalog[0].Name == "" {
			e.Required("LUCIUS_WORKER_SERVICE") // reported with the rest
			return nil, nil
		}
		raw = catalog[0].Name
	}
	names := env.SplitList(raw)
	if len(names) == 0 {
		return nil, errors.New("LUCIUS_WORKER_SERVICE names no service")
	}
	byName := map[string]Service{}
	var known []string
	for _, svc := range catalog {
		if svc.Name != "" {
			byName[svc.Name] = svc
			known = append(known, svc.Name)
		}
	}
	slices.Sort(known)
	var (
		picked []Service
		errs   []error
		seen   = map[string]bool{}
	)
	for _, name := range names {
		if seen[name] {
			errs = append(errs, fmt.Errorf("LUCIUS_WORKER_SERVICE: %q is listed twice", name))
			continue
		}
		seen[name] = true
		svc, ok := byName[name]
		switch {
		case ok:
		case len(known) == 0 && len(names) == 1:
			// The registered handlers, under the name the environment gives.
			svc = catalog[0]
			svc.Name = name
			if len(svc.Handlers) == 0 && !noop {
				errs = append(errs, errors.New("no handler is registered (worker.Handle) and LUCIUS_WORKER_NOOP is not set"))
			}
		case noop:
			svc = Service{Name: name}
		case len(known) == 0:
			errs = append(errs, fmt.Errorf("LUCIUS_WORKER_SERVICE names %d services: the registered handlers run as one", len(names)))
		default:
			errs = append(errs, fmt.Errorf("LUCIUS_WORKER_SERVICE names %q: want one of %s, or a comma-separated list of them (any service name with LUCIUS_WORKER_NOOP=true)",
				name, strings.Join(known, ", ")))
		}
		if noop {
			svc.Handlers = nil // a no-op service serves no real handler
		}
		picked = append(picked, svc)
	}
	return picked, errors.Join(errs...)
}

// readBlobConfig reads the az:// store's settings: LUCIUS_BLOB_ENDPOINTS
// (account=URL,...), LUCIUS_BLOB_CREDENTIAL (default, workload-identity,
// managed-identity or shared-key), LUCIUS_BLOB_ACCOUNT_KEYS
// (account=base64 key,..., shared-key only) and LUCIUS_BLOB_BLOCK_SIZE.
// Config.Validate checks them.
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

// buildVersion is the main module's version as Go recorded it.
func buildVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "unknown"
}
