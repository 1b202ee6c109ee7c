// Package stack starts the whole Lucius suite as real processes on the embedded
// default: a PostgreSQL cluster the project runs itself (or DATABASE_URL), the
// PostgreSQL bus, the gateway, the reconciler, the scheduler, orchestrators and
// OCR/EMBEDDING/SIS workers built from the skeleton. `make up`, the end-to-end
// tests and the benchmark all start the suite through it.
package stack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/azuritetest"
	"github.com/lucius-platform/lucius/base/env"
	"github.com/lucius-platform/lucius/base/freeport"
	"github.com/lucius-platform/lucius/base/pgcluster"
	"github.com/lucius-platform/lucius/base/sbtest"
	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/busconfig"
)

// Config describes a suite. Zero values take the defaults noted.
type Config struct {
	// BinDir holds the binaries: gateway, orchestrator, reconciler, scheduler, worker.
	BinDir string
	// DataDir holds the PostgreSQL cluster (DataDir/pg), workspaces
	// (DataDir/workspace) and, by default, the one file root (DataDir/files).
	DataDir string
	// FileRoots are the absolute folders file:// refs may name, given to every
	// process as LUCIUS_FILE_ROOTS. Default: DataDir/files, created at start.
	// Never the DataDir itself: it holds the database's files.
	FileRoots []string
	// DatabaseURL, when set, is used instead of starting a cluster.
	DatabaseURL string
	// Durable keeps fsync on in the cluster the stack starts (make up, benchmarks).
	Durable bool
	// PGSettings are added to the cluster the stack starts (pgcluster.Config.Settings).
	PGSettings map[string]string
	// PGPort for the cluster; 0 picks a free port.
	PGPort int
	// Ports: fixed ports (make up) or, when FreePorts, free ones (tests).
	FreePorts     bool
	Orchestrators int // default 2
	// Workers lists the worker processes, each a service or a comma-separated
	// list of services one process serves. Default: ocr, embedding, sis, and
	// raster,tiles,demo (the example workflows' services and the runbook demo pool).
	Workers []string
	// Env is added to every process (timings, log level, worker settings).
	Env map[string]string
	// ProcessEnv is added to one process, by name (e.g. "orchestrator-1").
	ProcessEnv map[string]map[string]string
	// Output receives every process's log lines, prefixed with its name.
	Output io.Writer
	// Bus is the transport every process uses (LUCIUS_BUS): "" or "postgres"
	// for the PostgreSQL bus, "servicebus" for Azure Service Bus. With
	// "servicebus" and no LUCIUS_SERVICEBUS_CONNECTION_STRING or
	// LUCIUS_SERVICEBUS_NAMESPACE in Env or the environment, the stack starts
	// the Service Bus test broker (tools/sbbroker) and points every process at it.
	Bus string
	// Azurite starts the Azure Storage emulator (tools/azurite) and gives
	// every worker its endpoint and key (LUCIUS_BLOB_ENDPOINTS,
	// LUCIUS_BLOB_CREDENTIAL=shared-key, LUCIUS_BLOB_ACCOUNT_KEYS), so jobs
	// can name az://devstoreaccount1/<container>/<path> refs. The stack
	// creates no container: Stack.Azurite does.
	Azurite bool
}

// Endpoints are where the suite listens.
type Endpoints struct {
	GatewayGRPC  string
	GatewayHTTP  string
	Orchestrator []string // gRPC addresses
	OrchHTTP     []string
	Reconciler   string // HTTP
	Scheduler    string // HTTP
	Workers      map[string]string
}

// Stack is a running suite.
type Stack struct {
	cfg       Config
	cluster   *pgcluster.Cluster
	URL       string
	Workspace string // absolute path of the workspace root
	DataDir   string // absolute path of the data folder (JoinEnvFile, issuer, tokens)
	// FileRoots are the folders file:// refs may name (LUCIUS_FILE_ROOTS);
	// Files is the first, where tools put the inputs and outputs of jobs.
	FileRoots []string
	Files     string
	Endpoints Endpoints
	procs     map[string]*Process
	order     []string
	// reserved holds the free ports the plan picked that no process serves
	// (a process holds its own: Process.reserved).
	reserved map[string]net.Listener
	trust    *trust
	// broker is the Service Bus test broker the stack started (nil: none).
	broker *sbtest.Broker
	// Azurite is the storage emulator the stack started (Config.Azurite).
	Azurite *azuritetest.Server
	// stopRefresh ends the worker token refresh.
	stopRefresh context.CancelFunc
}

// Process is one running binary.
type Process struct {
	Name   string
	binary string
	args   []string
	env    []string
	health string // HTTP URL answering 200 when ready
	out    io.Writer
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	// stopping marks an exit the stack asked for.
	stopping bool
	// serves are the addresses the process listens on; each run is handed
	// a socket bound to each (server.ListenFDsEnv), so no other process on
	// the machine can take one between the stack's choice and the bind.
	serves []string
	// reserved holds the free ports picked for serves, bound since the plan,
	// until the first run takes them.
	reserved map[string]net.Listener
}

// Start starts the suite and waits until every process reports ready.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	if cfg.BinDir == "" || cfg.DataDir == "" {
		return nil, errors.New("stack: BinDir and DataDir are required")
	}
	if cfg.Orchestrators == 0 {
		cfg.Orchestrators = 2
	}
	if cfg.Workers == nil {
		cfg.Workers = []string{"ocr", "embedding", "sis", "raster,tiles,demo"}
	}
	if cfg.Output == nil {
		cfg.Output = io.Discard
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s := &Stack{cfg: cfg, procs: map[string]*Process{}, URL: cfg.DatabaseURL, Workspace: filepath.Join(dataDir, "workspace"), DataDir: dataDir,
		FileRoots: cfg.FileRoots}
	if len(s.FileRoots) == 0 {
		s.FileRoots = []string{filepath.Join(dataDir, "files")}
	}
	for _, dir := range append([]string{s.Workspace}, s.FileRoots...) {
		if !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("stack: file root %q is not an absolute path", dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	s.Files = s.FileRoots[0]
	if s.trust, err = newTrust(dataDir); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	if s.URL == "" {
		s.cluster, err = pgcluster.Start(ctx, pgcluster.Config{Dir: filepath.Join(dataDir, "pg"), Port: cfg.PGPort, Durable: cfg.Durable,
			Settings: cfg.PGSettings})
		if err != nil {
			return nil, err
		}
		s.URL = s.cluster.URL
	}
	if err := s.startBroker(ctx); err != nil {
		s.Stop(context.Background())
		return nil, err
	}
	if cfg.Azurite {
		if s.Azurite, err = azuritetest.StartServer(ctx); err != nil {
			s.Stop(context.Background())
			return nil, fmt.Errorf("stack: %w", err)
		}
	}
	if err := s.plan(); err != nil {
		s.Stop(context.Background())
		return nil, err
	}
	for _, name := range s.order {
		if err := s.procs[name].start(); err != nil {
			s.Stop(context.Background())
			return nil, err
		}
	}
	if err := s.waitReady(ctx, 60*time.Second); err != nil {
		s.Stop(context.Background())
		return nil, err
	}
	refreshCtx, stopRefresh := context.WithCancel(context.Background())
	s.stopRefresh = stopRefresh
	go s.trust.refresh(refreshCtx)
	return s, nil
}

// plan assigns addresses and environments to every process.
func (s *Stack) plan() error {
	port, reserved := portAllocator(s.cfg.FreePorts)
	s.reserved = reserved
	gwGRPC, gwHTTP := port(9090), port(8080)
	s.Endpoints = Endpoints{GatewayGRPC: gwGRPC, GatewayHTTP: gwHTTP, Workers: map[string]string{}}
	var orchGRPC, orchHTTP []string
	for i := range s.cfg.Orchestrators {
		offset := 0 // orchestrator-1 on 9091/8081, the next on 9095/8085, 9096/8086, …
		if i > 0 {
			offset = 3 + i
		}
		orchGRPC = append(orchGRPC, port(9091+offset))
		orchHTTP = append(orchHTTP, port(8081+offset))
	}
	s.Endpoints.Orchestrator, s.Endpoints.OrchHTTP = orchGRPC, orchHTTP
	s.Endpoints.Reconciler, s.Endpoints.Scheduler = port(8083), port(8084)
	recGRPC, schedGRPC := port(9093), port(9094)
	common := map[string]string{
		"DATABASE_URL":          s.URL,
		"LUCIUS_WORKSPACE_ROOT": "file://" + s.Workspace,
		"LUCIUS_FILE_ROOTS":     strings.Join(s.FileRoots, string(filepath.ListSeparator)),
		"LUCIUS_LOG_FORMAT":     "text",
	}
	for k, v := range s.trust.env() {
		common[k] = v
	}
	for k, v := range s.busEnv() {
		common[k] = v
	}
	add := func(name, binary, healthAddr string, env map[string]string) {
		merged := map[string]string{}
		for _, m := range []map[string]string{common, s.cfg.Env, env, s.cfg.ProcessEnv[name]} {
			for k, v := range m {
				merged[k] = v
			}
		}
		merged["LUCIUS_INSTANCE"] = name
		p := &Process{Name: name, binary: filepath.Join(s.cfg.BinDir, binary), health: "http://" + healthAddr + "/readyz",
			out: prefixWriter(s.cfg.Output, name), reserved: map[string]net.Listener{}}
		for k, v := range merged {
			p.env = append(p.env, k+"="+v)
			if strings.HasSuffix(k, "_GRPC_ADDR") || strings.HasSuffix(k, "_HTTP_ADDR") {
				p.serves = append(p.serves, v)
				if l, ok := s.reserved[v]; ok {
					p.reserved[v] = l
					delete(s.reserved, v)
				}
			}
		}
		s.procs[name] = p
		s.order = append(s.order, name)
	}
	// What every worker adds to the common environment; a worker started
	// outside the stack (lucius worker env, JoinEnvFile) gets the same.
	workers := map[string]string{"LUCIUS_GATEWAY_TARGET": gwGRPC}
	maps.Copy(workers, s.blobEnv())
	join := map[string]string{}
	for _, m := range []map[string]string{common, s.cfg.Env, workers} {
		maps.Copy(join, m)
	}
	if err := writeJoinEnv(filepath.Join(s.DataDir, JoinEnvFile), join); err != nil {
		return err
	}
	// Workers call back any orchestrator; the reconciler's retries carry the same.
	callbackTarget := "ipv4:" + strings.Join(orchGRPC, ",")
	add("reconciler", "reconciler", s.Endpoints.Reconciler, map[string]string{
		"LUCIUS_RECONCILER_GRPC_ADDR": recGRPC, "LUCIUS_RECONCILER_HTTP_ADDR": s.Endpoints.Reconciler,
		"LUCIUS_CALLBACK_GRPC_TARGET": callbackTarget, "LUCIUS_CALLBACK_KEYS_FILE": s.trust.callbackKeys})
	for i := range s.cfg.Orchestrators {
		add(fmt.Sprintf("orchestrator-%d", i+1), "orchestrator", orchHTTP[i], map[string]string{
			"LUCIUS_ORCHESTRATOR_GRPC_ADDR": orchGRPC[i], "LUCIUS_ORCHESTRATOR_HTTP_ADDR": orchHTTP[i],
			"LUCIUS_OWNER_ID": fmt.Sprintf("orchestrator-%d", i+1), "LUCIUS_CALLBACK_GRPC_TARGET": callbackTarget,
			"LUCIUS_CALLBACK_KEYS_FILE": s.trust.callbackKeys})
	}
	add("gateway", "gateway", gwHTTP, map[string]string{
		"LUCIUS_GATEWAY_GRPC_ADDR": gwGRPC, "LUCIUS_GATEWAY_HTTP_ADDR": gwHTTP})
	add("scheduler", "scheduler", s.Endpoints.Scheduler, map[string]string{
		"LUCIUS_SCHEDULER_GRPC_ADDR": schedGRPC, "LUCIUS_SCHEDULER_HTTP_ADDR": s.Endpoints.Scheduler})
	for i, w := range s.cfg.Workers {
		addr := port(8090 + i)
		name := "worker-" + strings.ReplaceAll(w, ",", "-")
		s.Endpoints.Workers[w] = addr
		token, err := s.trust.workerToken(name, strings.Split(w, ","))
		if err != nil {
			return err
		}
		workerEnv := maps.Clone(workers)
		workerEnv["LUCIUS_WORKER_SERVICE"], workerEnv["LUCIUS_WORKER_HTTP_ADDR"], workerEnv["LUCIUS_AUTH_TOKEN_FILE"] = w, addr, token
		add(name, "worker", addr, workerEnv)
	}
	for _, name := range s.order {
		if _, err := os.Stat(s.procs[name].binary); err != nil {
			return fmt.Errorf("stack: binary for %s: %w (run make build)", name, err)
		}
	}
	return nil
}

// Cluster is the PostgreSQL cluster the stack started (nil with DatabaseURL).
func (s *Stack) Cluster() *pgcluster.Cluster { return s.cluster }

// Names lists the processes in start order.
func (s *Stack) Names() []string { return append([]string(nil), s.order...) }

// Process returns a process by name.
func (s *Stack) Process(name string) *Process { return s.procs[name] }

// Kill sends SIGKILL to a process and waits for it to die.
func (s *Stack) Kill(name string) error { return s.signal(name, syscall.SIGKILL) }

// Terminate sends SIGTERM to a process and waits for it to exit (after its
// own shutdown grace).
func (s *Stack) Terminate(name string) error { return s.signal(name, syscall.SIGTERM) }

// Signal sends sig to a process (SIGSTOP and SIGCONT freeze and resume it).
func (s *Stack) Signal(name string, sig syscall.Signal) error {
	p := s.procs[name]
	if p == nil {
		return fmt.Errorf("stack: no process %s", name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("stack: %s is not running", name)
	}
	return p.cmd.Process.Signal(sig)
}

func (s *Stack) signal(name string, sig syscall.Signal) error {
	p := s.procs[name]
	if p == nil {
		return fmt.Errorf("stack: no process %s", name)
	}
	p.mu.Lock()
	p.stopping = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	<-done
	return nil
}

// Restart starts a stopped or killed process again and waits until it is ready.
func (s *Stack) Restart(ctx context.Context, name string) error {
	p := s.procs[name]
	if p == nil {
		return fmt.Errorf("stack: no process %s", name)
	}
	if err := p.start(); err != nil {
		return err
	}
	return p.waitReady(ctx, 60*time.Second)
}

// Stop stops the processes (SIGTERM, then SIGKILL after a grace period) in
// reverse start order, then the cluster it started.
func (s *Stack) Stop(ctx context.Context) {
	if s.stopRefresh != nil {
		s.stopRefresh()
	}
	for _, l := range s.reserved {
		l.Close()
	}
	for i := len(s.order) - 1; i >= 0; i-- {
		p := s.procs[s.order[i]]
		p.mu.Lock()
		p.stopping = true
		cmd, done := p.cmd, p.done
		closeAll(slices.Collect(maps.Values(p.reserved)))
		p.mu.Unlock()
		if cmd == nil || cmd.Process == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen process cannot terminate
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	if s.broker != nil {
		s.broker.Stop()
	}
	if s.Azurite != nil {
		s.Azurite.Stop()
	}
	if s.cluster != nil {
		_ = s.cluster.Stop(ctx)
	}
}

// serviceBus tells whether the stack runs on Service Bus.
func (s *Stack) serviceBus() bool { return s.cfg.Bus == string(busconfig.ServiceBus) }

// startBroker starts the Service Bus test broker when the stack runs on
// Service Bus and no namespace is configured.
func (s *Stack) startBroker(ctx context.Context) error {
	if !s.serviceBus() {
		return nil
	}
	for _, k := range []string{"LUCIUS_SERVICEBUS_CONNECTION_STRING", "LUCIUS_SERVICEBUS_NAMESPACE"} {
		if s.cfg.Env[k] != "" || os.Getenv(k) != "" {
			return nil // a real namespace (or an emulator) the operator named
		}
	}
	b, err := sbtest.StartBroker(ctx)
	if err != nil {
		return fmt.Errorf("stack: Service Bus test broker: %w", err)
	}
	s.broker = b
	return nil
}

// blobEnv is what a worker needs to reach the stack's Azurite, if any.
func (s *Stack) blobEnv() map[string]string {
	if s.Azurite == nil {
		return nil
	}
	return map[string]string{
		"LUCIUS_BLOB_ENDPOINTS":    s.Azurite.Account + "=" + s.Azurite.Endpoint,
		"LUCIUS_BLOB_CREDENTIAL":   "shared-key",
		"LUCIUS_BLOB_ACCOUNT_KEYS": s.Azurite.Account + "=" + s.Azurite.Key,
	}
}

// JoinEnvFile is the file, in the data folder, holding the environment a
// worker started outside the stack needs to join it (bus, database,
// gateway, file roots, trust), without its service, token
// (LUCIUS_AUTH_TOKEN_FILE) or HTTP address: `lucius worker env` reads it.
const JoinEnvFile = "worker.env"

// writeJoinEnv writes env as KEY=VALUE lines.
func writeJoinEnv(path string, env map[string]string) error {
	var b strings.Builder
	b.WriteString("# Written by the running Lucius stack (make up) for `lucius worker env SERVICE`.\n")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "%s=%s\n", k, env[k])
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// busEnv is what every process needs to reach the stack's bus.
func (s *Stack) busEnv() map[string]string {
	if !s.serviceBus() {
		return map[string]string{"LUCIUS_BUS": string(busconfig.Postgres)}
	}
	env := map[string]string{"LUCIUS_BUS": string(busconfig.ServiceBus)}
	if s.broker != nil {
		env["LUCIUS_SERVICEBUS_CONNECTION_STRING"] = s.broker.ConnectionString
		env["LUCIUS_SERVICEBUS_ADMIN_ENDPOINT"] = s.broker.AdminURL
	}
	return env
}

// OpenBus opens the bus the stack's processes use, for tools and tests that
// send or receive beside them (pool: the stack's database, for the
// PostgreSQL bus). Close it when done.
func (s *Stack) OpenBus(ctx context.Context, pool *pgxpool.Pool) (bus.Bus, error) {
	merged := map[string]string{}
	for _, k := range []string{"LUCIUS_SERVICEBUS_CONNECTION_STRING", "LUCIUS_SERVICEBUS_NAMESPACE",
		"LUCIUS_SERVICEBUS_PROVISION", "LUCIUS_SERVICEBUS_ADMIN_ENDPOINT"} {
		if v := os.Getenv(k); v != "" {
			merged[k] = v
		}
	}
	for _, m := range []map[string]string{s.cfg.Env, s.busEnv()} {
		for k, v := range m {
			merged[k] = v
		}
	}
	cfg, err := busconfig.ConfigFromEnv(env.FromMap(merged))
	if err != nil {
		return nil, err
	}
	return busconfig.Open(ctx, cfg, pool, slog.New(slog.DiscardHandler))
}

// BusDescription says which transport the processes use, for launchers to
// print: the PostgreSQL bus, the test broker the stack started, or the
// Service Bus namespace LUCIUS_SERVICEBUS_* name.
func (s *Stack) BusDescription() string {
	switch {
	case !s.serviceBus():
		return "PostgreSQL bus (LUCIUS_BUS=postgres), in the suite's database"
	case s.broker != nil:
		return "Service Bus test broker at amqp://" + s.broker.AMQPAddr + " (LUCIUS_BUS=servicebus; set LUCIUS_SERVICEBUS_NAMESPACE for Azure)"
	default:
		return strings.TrimSpace("Azure Service Bus "+os.Getenv("LUCIUS_SERVICEBUS_NAMESPACE")) + " (LUCIUS_BUS=servicebus)"
	}
}

func (s *Stack) waitReady(ctx context.Context, timeout time.Duration) error {
	for _, name := range s.order {
		if err := s.procs[name].waitReady(ctx, timeout); err != nil {
			return err
		}
	}
	return nil
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.binary, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// Own process group: the terminal's Ctrl-C reaches the launcher, which then
	// stops the processes in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The process serves on the sockets it is handed; the stack's copies
	// close once it has its own.
	listeners := p.bindServed()
	defer closeAll(listeners)
	release, err := server.HandDown(cmd, listeners)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	defer release()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.cmd, p.done, p.stopping = cmd, make(chan struct{}), false
	done := p.done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		stopping := p.stopping
		p.mu.Unlock()
		if !stopping {
			fmt.Fprintf(p.out, "exited unexpectedly: %v\n", err)
		}
		close(done)
	}()
	return nil
}

// OpsURL is the base URL of the process's HTTP operations surface
// (/healthz, /readyz, /metrics, and /debug/pprof/ with LUCIUS_PPROF=true).
func (p *Process) OpsURL() string { return strings.TrimSuffix(p.health, "/readyz") }

// Pid is the operating system's id of the current run, or 0 before the first.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process is alive.
func (p *Process) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Exited is closed when the current run of the process ends.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Stopping reports whether the stack asked the current run to end.
func (p *Process) Stopping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping
}

func (p *Process) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("%s exited before it was ready", p.Name)
		default:
		}
		if resp, err := client.Get(p.health); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (%s)", p.Name, timeout, p.health)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// binaries maps each binary the suite runs to its package, relative to the
// repository root.
var binaries = map[string]string{
	"gateway":      "./services/gateway/cmd/gateway",
	"orchestrator": "./services/orchestrator/cmd/orchestrator",
	"reconciler":   "./services/reconciler/cmd/reconciler",
	"scheduler":    "./services/scheduler/cmd/scheduler",
	"worker":       "./services/worker-skeleton/cmd/worker",
}

// Build builds the binaries a suite runs into dir from the repository at
// root, for tests run outside `make build` (LUCIUS_BIN_DIR unset).
func Build(ctx context.Context, root, dir string) error {
	for name, pkg := range binaries {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w: %s", name, err, out)
		}
	}
	return nil
}

// portAllocator returns fixed default ports, or free ones, each kept bound
// in reserved (by address) until handed to the process that serves it: no
// two processes, and no other stack's process, are given the same port.
func portAllocator(free bool) (port func(def int) string, reserved map[string]net.Listener) {
	reserved = map[string]net.Listener{}
	port = func(def int) string {
		if free {
			if l, err := freeport.Listen(); err == nil {
				reserved[l.Addr().String()] = l
				return l.Addr().String()
			}
		}
		return fmt.Sprintf("127.0.0.1:%d", def)
	}
	return port, reserved
}

// bindServed returns a socket bound to each address p serves: for the first
// run the port reserved since the plan, for a restart the address bound again
// (the last run released it). An address the stack cannot bind is left to
// the process, which binds it itself and reports why it cannot.
func (p *Process) bindServed() []net.Listener {
	var ls []net.Listener
	for _, addr := range p.serves {
		if l, ok := p.reserved[addr]; ok {
			delete(p.reserved, addr)
			ls = append(ls, l)
			continue
		}
		if l, err := net.Listen("tcp", addr); err == nil {
			ls = append(ls, l)
		}
	}
	return ls
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

// prefixWriter writes each line as "name | line".
func prefixWriter(w io.Writer, name string) io.Writer {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			fmt.Fprintf(w, "%-15s | %s\n", name, sc.Text())
		}
	}()
	return pw
}
