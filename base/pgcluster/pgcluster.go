// Package pgcluster runs a private PostgreSQL cluster from the machine's
// PostgreSQL binaries, so one database server is all a developer or a CI run
// needs. When the current user is root (PostgreSQL refuses to run as root), the
// cluster runs as the unprivileged "postgres" user.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lucius-platform/lucius/base/freeport"
)

// Config describes a cluster. Zero values pick the documented defaults.
type Config struct {
	// Dir holds the cluster: Dir/data and Dir/postgres.log. Required.
	Dir string
	// BinDir holds initdb, pg_ctl and postgres. Default: $LUCIUS_PG_BIN, then the
	// newest /usr/lib/postgresql/*/bin, then the directory of pg_ctl on PATH.
	BinDir string
	// Port to listen on (127.0.0.1 only). 0 picks a free port.
	Port int
	// Durable keeps fsync and synchronous commit on (make up, benchmarks). Tests
	// turn them off: a crashed test cluster is thrown away anyway.
	Durable bool
	// Database is created if missing. Default "lucius".
	Database string
	// MaxConnections defaults to 400.
	MaxConnections int
	// Settings are added to the server's (name → value), e.g.
	// shared_preload_libraries=pg_stat_statements for benchmarks.
	Settings map[string]string
	Logger   *slog.Logger
}

// Cluster is a running cluster.
type Cluster struct {
	cfg  Config
	bin  string
	data string
	port int
	cred *syscall.Credential
	// URL connects to Database as the superuser "lucius".
	URL string
}

const superuser = "lucius"

// Start initializes the cluster on first use and starts it. A cluster already
// running in Dir (left over by a killed process) is reused.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pgcluster: Dir is required")
	}
	if cfg.Database == "" {
		cfg.Database = "lucius"
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = 400
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	bin, err := findBinDir(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, bin: bin, data: filepath.Join(dir, "data")}
	if os.Geteuid() == 0 {
		if c.cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := c.chown(dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(c.data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := c.initdb(ctx); err != nil {
			return nil, err
		}
	}
	if port, ok := c.runningPort(); ok {
		c.port = port
		cfg.Logger.Info("reusing running PostgreSQL cluster", "dir", dir, "port", port)
	} else if err := c.startOnFreePort(ctx); err != nil {
		return nil, err
	}
	c.URL = fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, c.port, cfg.Database)
	if err := c.ensureDatabase(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Port is the TCP port the cluster listens on.
func (c *Cluster) Port() int { return c.port }

// BinDir holds the cluster's PostgreSQL programs (pg_waldump, …).
func (c *Cluster) BinDir() string { return c.bin }

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return c.data }

// AdminURL connects to the "postgres" maintenance database.
func (c *Cluster) AdminURL() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", superuser, c.port)
}

// Stop shuts the cluster down (fast mode: open transactions roll back).
func (c *Cluster) Stop(ctx context.Context) error {
	return c.pgctl(ctx, "stop", "-w", "-m", "fast", "-D", c.data)
}

// Restart stops and starts the cluster on the same port, as a crash test needs.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.pgctl(ctx, "stop", "-w", "-m", "immediate", "-D", c.data); err != nil {
		return err
	}
	return c.start(ctx)
}

func (c *Cluster) initdb(ctx context.Context) error {
	c.cfg.Logger.Info("initializing PostgreSQL cluster", "dir", c.data)
	return c.run(ctx, filepath.Join(c.bin, "initdb"), "-D", c.data, "-U", superuser,
		"--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync")
}

// startOnFreePort starts the cluster on Config.Port, or else on a free port;
// a start that loses it to another process is tried again on another
// (freeport.Retry).
func (c *Cluster) startOnFreePort(ctx context.Context) error {
	if c.port = c.cfg.Port; c.port != 0 {
		return c.start(ctx)
	}
	var logged int64
	return freeport.Retry(1, pickPort, func(ports []int) error {
		c.port, logged = ports[0], c.logSize()
		return c.start(ctx)
	}, func(error) bool {
		if !c.loggedSince(logged, "Address already in use") {
			return false
		}
		c.cfg.Logger.Info("PostgreSQL lost its port to another process; trying another", "port", c.port)
		return true
	})
}

// pickPort picks the port to try (a test picks a taken one first).
var pickPort = freeport.Port

func (c *Cluster) logFile() string { return filepath.Join(filepath.Dir(c.data), "postgres.log") }

func (c *Cluster) logSize() int64 {
	if fi, err := os.Stat(c.logFile()); err == nil {
		return fi.Size()
	}
	return 0
}

// loggedSince reports whether the server log holds text past offset.
func (c *Cluster) loggedSince(offset int64, text string) bool {
	b, err := os.ReadFile(c.logFile())
	return err == nil && int64(len(b)) >= offset && bytes.Contains(b[offset:], []byte(text))
}

func (c *Cluster) start(ctx context.Context) error {
	settings := []string{
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(c.port),
		"-c", "unix_socket_directories=",
		"-c", "max_connections=" + strconv.Itoa(c.cfg.MaxConnections),
		"-c", "shared_buffers=256MB",
		"-c", "max_wal_size=2GB",
		"-c", "log_min_messages=warning",
	}
	if !c.cfg.Durable {
		settings = append(settings, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for _, name := range slices.Sorted(maps.Keys(c.cfg.Settings)) {
		settings = append(settings, "-c", name+"="+c.cfg.Settings[name])
	}
	logFile := c.logFile()
	c.cfg.Logger.Info("starting PostgreSQL", "port", c.port, "durable", c.cfg.Durable, "log", logFile)
	return c.pgctl(ctx, "start", "-w", "-t", "60", "-D", c.data, "-l", logFile, "-o", strings.Join(settings, " "))
}

// runningPort reports the port of a postmaster already running in the data dir.
func (c *Cluster) runningPort() (int, bool) {
	if err := c.pgctl(context.Background(), "status", "-D", c.data); err != nil {
		return 0, false
	}
	pid, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(pid), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	return port, err == nil
}

func (c *Cluster) ensureDatabase(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	var conn *pgx.Conn
	var err error
	for {
		conn, err = pgx.Connect(ctx, c.AdminURL())
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("pgcluster: connect: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, c.cfg.Database).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{c.cfg.Database}.Sanitize()); err != nil {
			return fmt.Errorf("pgcluster: create database: %w", err)
		}
	}
	return nil
}

func (c *Cluster) pgctl(ctx context.Context, args ...string) error {
	return c.run(ctx, filepath.Join(c.bin, "pg_ctl"), args...)
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The server gets its own process group: a Ctrl-C meant for the launcher must
	// not stop the database before the services that use it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	cmd.Dir = "/"
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(name), args[0], err, strings.TrimSpace(out.String()))
	}
	return nil
}

// chown hands the cluster directory to the postgres user when running as root.
func (c *Cluster) chown(dir string) error {
	if c.cred == nil {
		return nil
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(c.cred.Uid), int(c.cred.Gid)) //nolint:gosec // G122: the cluster's own folder, created just before
	})
}

func postgresCredential() (*syscall.Credential, error) {
	name := os.Getenv("LUCIUS_PG_USER")
	if name == "" {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root needs an unprivileged user %q to run PostgreSQL (set LUCIUS_PG_USER): %w", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func findBinDir(explicit string) (string, error) {
	if explicit == "" {
		explicit = os.Getenv("LUCIUS_PG_BIN")
	}
	if explicit != "" {
		return explicit, nil
	}
	candidates, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(candidates, func(i, j int) bool { return versionOf(candidates[i]) > versionOf(candidates[j]) })
	for _, dir := range candidates {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("pgcluster: no PostgreSQL binaries found (looked in /usr/lib/postgresql/*/bin and PATH; set LUCIUS_PG_BIN or DATABASE_URL)")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}
