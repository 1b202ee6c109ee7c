// Package chaos is the chaos end-to-end driver: it starts the whole suite as
// real processes on a PostgreSQL cluster of its own, submits three-step jobs
// (some told to fail or stall in a worker), SIGKILLs and restarts
// orchestrators, the reconciler and workers at random moments, restarts
// PostgreSQL once mid-run, and then checks from the ledger that every job
// ended as its fault says, that no step's effect was committed twice and that
// nothing left a terminal status. It measures how long live jobs stalled
// after each disruption. `make chaos` runs it in full; `make test` runs a
// short version (chaos_test.go).
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"github.com/lucius-platform/lucius/base/auth"
	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/server"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/tools/stack"
)

// Range is a closed interval of durations.
type Range struct{ Min, Max time.Duration }

// Config describes a chaos run. Zero values take the defaults noted.
type Config struct {
	// BinDir holds the service binaries (make build's .build/bin). Required.
	BinDir string
	// Bus is the suite's transport (stack.Config.Bus): "" or "postgres", or
	// "servicebus" (the Service Bus test broker unless a namespace is set).
	Bus string
	// DataDir holds the run's PostgreSQL cluster, workspace and workflow.
	// Required; it must not hold an earlier run.
	DataDir string
	// Jobs to submit. Default 500.
	Jobs int
	// Rate of submission, jobs per second. Default 10: below what two cores
	// sustain during the chaos, so a job that waits after a kill waits for
	// recovery, not behind a backlog.
	Rate float64
	// Seed draws the faults and the kills. 0 picks one from the clock.
	Seed int64
	// KillEvery is the mean interval between kills (exponentially
	// distributed: kills come at random moments). Default 2s.
	KillEvery time.Duration
	// Down is how long a killed process stays down, uniform in the range.
	// Default 200ms–3s.
	Down Range
	// MinKills keeps the chaos going after the last submission until every
	// kind of process (orchestrator, reconciler, worker) was killed at least
	// this often. Default 0.
	MinKills int
	// PGRestart restarts PostgreSQL once, when half the jobs are accepted.
	PGRestart bool
	// FaultRate is the fraction of jobs given a fault (0 to 1).
	FaultRate float64
	// Timeout bounds the whole run; jobs not terminal by then are problems.
	// Default 10m.
	Timeout time.Duration
	// Output receives the suite's log lines (default: discarded).
	Output io.Writer
	// Progress receives a line per phase and disruption (default: discarded).
	Progress io.Writer
}

func (c Config) withDefaults() Config {
	if c.Jobs == 0 {
		c.Jobs = 500
	}
	if c.Rate == 0 {
		c.Rate = 10
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	if c.KillEvery == 0 {
		c.KillEvery = 2 * time.Second
	}
	if c.Down == (Range{}) {
		c.Down = Range{200 * time.Millisecond, 3 * time.Second}
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Output == nil {
		c.Output = io.Discard
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// Validate reports what is wrong with the configuration (after defaults).
func (c Config) Validate() error {
	var errs []error
	if c.BinDir == "" || c.DataDir == "" {
		errs = append(errs, errors.New("chaos: BinDir and DataDir are required"))
	}
	if c.Jobs < 1 || c.Rate <= 0 || c.KillEvery <= 0 || c.Timeout <= 0 || c.MinKills < 0 {
		errs = append(errs, errors.New("chaos: Jobs, Rate, KillEvery and Timeout must be positive, MinKills not negative"))
	}
	if c.Down.Min < 0 || c.Down.Max < c.Down.Min {
		errs = append(errs, fmt.Errorf("chaos: Down %s–%s is not a range", c.Down.Min, c.Down.Max))
	}
	if c.FaultRate < 0 || c.FaultRate > 1 {
		errs = append(errs, fmt.Errorf("chaos: FaultRate %g is not a fraction", c.FaultRate))
	}
	return errors.Join(errs...)
}

// env is every process's environment: timings short enough that recovery
// after a kill takes seconds, no-op workers with fault injection, and the
// chaos workflow.
func env(workflows string) map[string]string {
	return map[string]string{
		"LUCIUS_WORKFLOWS_DIR":              workflows,
		"LUCIUS_LOG_LEVEL":                  "warn",
		"LUCIUS_WORKER_NOOP":                "true",
		"LUCIUS_WORKER_FAULTS":              "true",
		"LUCIUS_HEARTBEAT_INTERVAL":         "500ms",
		"LUCIUS_ORPHAN_THRESHOLD":           "3s",
		"LUCIUS_ORPHAN_SCAN_INTERVAL":       "1s",
		"LUCIUS_JOBS_LOCK_DURATION":         "5s",
		"LUCIUS_DIRECTIVE_LOCK_DURATION":    "5s",
		"LUCIUS_SWEEP_ACK_INTERVAL":         "1s",
		"LUCIUS_SWEEP_LEASE_INTERVAL":       "1s",
		"LUCIUS_SWEEP_DISPATCHING_INTERVAL": "2s",
		"LUCIUS_SWEEP_DISPATCHING_AGE":      "10s",
		"LUCIUS_SWEEP_OUTBOX_INTERVAL":      "5s",
		"LUCIUS_SWEEP_REQUESTS_INTERVAL":    "5s",
		"LUCIUS_SWEEP_REQUESTS_AGE":         "20s",
		"LUCIUS_SWEEP_DEADLETTER_INTERVAL":  "5s",
		// Outbox rows a killed reconciler had claimed stay hidden for the
		// lease (default 30s); publishing a batch takes milliseconds.
		"LUCIUS_OUTBOX_LEASE": "5s",
		// A killed worker's directives time out their ACKs, and injected
		// faults fail attempts: enough to open a service's circuit breaker,
		// which then holds its steps for the cool-down (default 30s) and
		// again after each failed probe. Short like every other timing here.
		"LUCIUS_BREAKER_COOL_DOWN": "3s",
		// A HALF_OPEN breaker releases this many held steps per probe round.
		// With the default 2, a round whose probe was a step faulted on every
		// attempt reopened the breaker having moved two steps on: 58 held
		// steps then took longer than the short run's deadline to drain
		// (fresh10, on Service Bus). The rule that closes the breaker is the
		// same; only more of the held work moves per round.
		"LUCIUS_BREAKER_PROBES": "8",
	}
}

// Run performs a chaos run and reports what it found. The error is for a run
// that could not be carried out (the suite did not start, the ledger could
// not be read); what the system got wrong is in Report.Problems.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sh, err := loadShape()
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0)) //nolint:gosec // G404: the run's seeded fault plan, reproducible by design
	faults := planFaults(rng, cfg.Jobs, cfg.FaultRate, sh)
	r := &Report{Config: cfg, Planned: cfg.Jobs, Start: time.Now()}
	progress := func(format string, args ...any) {
		fmt.Fprintf(cfg.Progress, "chaos T+%-7s "+format+"\n", append([]any{time.Since(r.Start).Round(100 * time.Millisecond)}, args...)...)
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	progress("starting the suite")
	su, err := startSuite(runCtx, cfg)
	if err != nil {
		return nil, err
	}
	defer su.close()
	cmds, err := commands(su.s.Files, faults)
	if err != nil {
		return nil, err
	}
	d := newDriver(su.s, cfg, rng, progress)
	sub := su.storm(runCtx, cfg, d, cmds, progress)

	// Check with a fresh deadline: the run's may have passed.
	checkCtx, cancelCheck := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelCheck()
	snap, err := load(checkCtx, su.pool, sub.ids, faults)
	if err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	r.Wall = time.Since(r.Start)
	r.fill(snap, sh, sub, d)
	if runCtx.Err() != nil && ctx.Err() == nil {
		r.Problems = append(r.Problems, fmt.Sprintf("the run hit its %s timeout", cfg.Timeout))
	}
	return r, nil
}

// suite is the running stack and the run's clients of it.
type suite struct {
	s    *stack.Stack
	pool *pgxpool.Pool
	conn *grpc.ClientConn
}

// startSuite starts the stack in a fresh data directory and connects to it.
func startSuite(ctx context.Context, cfg Config) (*suite, error) {
	workflows, err := prepareDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	// The run restarts PostgreSQL, so it must own its cluster: DATABASE_URL
	// (which `make test` sets for the other packages) is deliberately not used.
	// Durable keeps fsync and synchronous commit on, so the immediate
	// (crash-like) shutdown of the restart loses no committed transaction.
	s, err := stack.Start(ctx, stack.Config{BinDir: cfg.BinDir, DataDir: cfg.DataDir, Durable: true, FreePorts: true,
		Workers: []string{"ocr", "embedding", "sis"}, Env: env(workflows), Output: cfg.Output, Bus: cfg.Bus})
	if err != nil {
		return nil, fmt.Errorf("start the suite: %w", err)
	}
	su := &suite{s: s}
	if su.pool, err = pgxpool.New(ctx, s.URL); err != nil {
		su.close()
		return nil, err
	}
	token, err := s.OperatorToken()
	if err != nil {
		su.close()
		return nil, err
	}
	if su.conn, err = server.Dial(s.Endpoints.GatewayGRPC, grpc.WithPerRPCCredentials(auth.BearerToken(token))); err != nil {
		su.close()
		return nil, err
	}
	return su, nil
}

func (su *suite) close() {
	if su.conn != nil {
		su.conn.Close()
	}
	if su.pool != nil {
		su.pool.Close()
	}
	su.s.Stop(context.Background())
}

// storm submits cmds while d kills and restarts processes (and PostgreSQL
// once), then waits for every process to be back and every job to end.
func (su *suite) storm(ctx context.Context, cfg Config, d *driver, cmds []*luciusv1.Command, progress func(string, ...any)) submission {
	chaosCtx, stopChaos := context.WithCancel(ctx)
	defer stopChaos()
	var loops sync.WaitGroup
	loops.Go(func() { d.supervise(chaosCtx) })
	submitted, halfway := make(chan struct{}), make(chan struct{})
	driven := make(chan struct{})
	go func() { defer close(driven); d.run(chaosCtx, submitted, halfway) }()

	progress("submitting %d jobs at %g/s", cfg.Jobs, cfg.Rate)
	sub := submitAll(ctx, luciusv1.NewCommandServiceClient(su.conn), cmds, cfg.Rate, func() { close(halfway) })
	close(submitted)
	progress("submitted; %d accepted", accepted(sub.ids))
	<-driven
	d.waitUp(ctx)
	progress("chaos over; waiting for the jobs to end")
	waitTerminal(ctx, su.pool, nonEmpty(sub.ids), progress)

	stopChaos()
	loops.Wait()
	d.wg.Wait() // restarts in flight end with chaosCtx
	return sub
}

// prepareDataDir creates the data directory, refusing one that holds an
// earlier run, and writes the chaos workflow into it.
func prepareDataDir(dir string) (workflows string, err error) {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return "", fmt.Errorf("chaos: data directory %s is not empty (an earlier run?)", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	workflows = filepath.Join(abs, "workflows")
	if err := os.MkdirAll(workflows, 0o755); err != nil {
		return "", err
	}
	// PostgreSQL runs as its own user when we are root: it must be able to
	// reach its cluster below dir (os.MkdirTemp makes dirs 0700).
	if err := os.Chmod(abs, 0o755); err != nil {
		return "", err
	}
	return workflows, os.WriteFile(filepath.Join(workflows, workflowID+".yaml"), []byte(workflowYAML), 0o644)
}

// commands builds every planned job's command, reading one shared input
// from files (a file root) and writing under files/out.
func commands(files string, faults []*Fault) ([]*luciusv1.Command, error) {
	input := filepath.Join(files, "chaos-input.txt")
	if err := os.WriteFile(input, []byte("Lucius chaos input.\n"), 0o644); err != nil {
		return nil, err
	}
	cmds := make([]*luciusv1.Command, len(faults))
	for i, f := range faults {
		var err error
		if cmds[i], err = command(i, f, "file://"+input, filepath.Join(files, "out")); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// waitTerminal polls until every job is terminal or ctx ends. Errors (the
// ledger restarting) are retried.
func waitTerminal(ctx context.Context, pool *pgxpool.Pool, ids []string, progress func(string, ...any)) {
	lastReport := time.Now()
	for {
		n, err := countTerminal(ctx, pool, ids)
		if err == nil && n == len(ids) {
			progress("all %d jobs terminal", n)
			return
		}
		if time.Since(lastReport) > 5*time.Second {
			progress("%d of %d jobs terminal", n, len(ids))
			lastReport = time.Now()
		}
		if !loop.Sleep(ctx, 250*time.Millisecond) {
			progress("deadline: %d of %d jobs terminal", n, len(ids))
			return
		}
	}
}

func accepted(ids []string) int { return len(nonEmpty(ids)) }

func nonEmpty(ids []string) []string {
	var out []string
	for _, id := range ids {
		if id != "" {
			out = append(out, id)
		}
	}
	return out
}
