package reconciler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/core/engine"
	"github.com/lucius-platform/lucius/core/ledger"
)

// SweepConfig tunes one sweeper loop. Zero values take the sweeper's defaults.
type SweepConfig struct {
	Interval     time.Duration // between scans
	BatchSize    int           // candidates per scan; a full batch scans again at once
	QueryTimeout time.Duration // per scan and per repair
	// Age is how long a row must have been stuck (outbox, dispatching, requests).
	Age time.Duration
}

func (c *SweepConfig) defaults(interval, age time.Duration) {
	if c.Interval == 0 {
		c.Interval = interval
	}
	if c.BatchSize == 0 {
		c.BatchSize = 200
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = 10 * time.Second
	}
	if c.Age == 0 {
		c.Age = age
	}
}

// SweepersConfig configures the drift-repair loops (seed 004 §8.3).
type SweepersConfig struct {
	// Acks: attempts past their ACK deadline get a new attempt or fail (every 5s).
	Acks SweepConfig
	// Leases: acknowledged attempts past their lease go to the retry track (every 5s).
	Leases SweepConfig
	// Dispatching: attempts DISPATCHING for Age (default 1m) whose directive left
	// the outbox unpublished are enqueued again (every 15s).
	Dispatching SweepConfig
	// SLA: live jobs past their deadline fail with SLA_EXCEEDED (every 30s).
	SLA SweepConfig
	// Outbox: messages unsent for Age (default 2m) are reported once and their
	// destination declared again (every 30s).
	Outbox SweepConfig
	// Requests: accepted requests no orchestrator claimed for Age (default 5m)
	// are enqueued again (every 60s).
	Requests SweepConfig
	// DeadLetters: bus dead-letter queues are collected into the ledger (every 30s).
	DeadLetters SweepConfig
	// Slots: admission counters are checked against the live work and
	// repaired when they drifted (every 60s).
	Slots SweepConfig
	// Polls: steps waiting in POLLING whose node's poll_interval has passed
	// are dispatched again, or fail POLL_TIMEOUT after poll_timeout (every 1s).
	Polls SweepConfig
	// Retention: finished jobs older than their tenant's retention_days are
	// deleted, BatchSize jobs per transaction (every 1m).
	Retention SweepConfig
}

func (c *SweepersConfig) defaults() {
	c.Acks.defaults(5*time.Second, 0)
	c.Leases.defaults(5*time.Second, 0)
	c.Dispatching.defaults(15*time.Second, time.Minute)
	c.SLA.defaults(30*time.Second, 0)
	c.Outbox.defaults(30*time.Second, 2*time.Minute)
	c.Requests.defaults(time.Minute, 5*time.Minute)
	c.DeadLetters.defaults(30*time.Second, 0)
	c.Slots.defaults(time.Minute, 0)
	c.Polls.defaults(time.Second, 0)
	c.Retention.defaults(time.Minute, 0)
}

// sweeper is one drift-repair loop: scan for candidates, then repair each
// through the engine, which re-checks everything under the job's lock (status,
// attempt, lease), exactly as the normal path does. A candidate that stopped
// qualifying between scan and repair is left alone.
type sweeper[T any] struct {
	name     string
	cfg      SweepConfig
	scan     func(ctx context.Context, limit int) ([]T, error)
	repair   func(ctx context.Context, c T) (engine.Swept, error)
	describe func(c T) []any // log attributes: job_id, step_id, attempt_no
}

// sweepMetrics are shared by every sweeper, labelled by sweeper name.
type sweepMetrics struct {
	actions metric.Int64Counter
	errors  metric.Int64Counter
	log     *slog.Logger
}

func newSweepMetrics(log *slog.Logger) (*sweepMetrics, error) {
	meter := otel.Meter("lucius/reconciler")
	actions, err := meter.Int64Counter("lucius_sweeper_actions_total",
		metric.WithDescription("Sweeper repairs, by sweeper and outcome (RETRIED, FAILED_FINAL, CLOSED, REENQUEUED, REQUEUED, REPORTED, COLLECTED, REPAIRED; retention: PURGED jobs)."))
	if err != nil {
		return nil, err
	}
	errs, err := meter.Int64Counter("lucius_sweeper_errors_total",
		metric.WithDescription("Sweeper scans or repairs that failed, by sweeper."))
	if err != nil {
		return nil, err
	}
	return &sweepMetrics{actions: actions, errors: errs, log: log}, nil
}

func (m *sweepMetrics) action(ctx context.Context, sweeper, outcome string) {
	m.actionN(ctx, sweeper, outcome, 1)
}

// actionN counts n repairs of one kind at once (a batch).
func (m *sweepMetrics) actionN(ctx context.Context, sweeper, outcome string, n int64) {
	m.actions.Add(ctx, n, metric.WithAttributes(attribute.String("sweeper", sweeper), attribute.String("outcome", outcome)))
}

func (m *sweepMetrics) failed(ctx context.Context, sweeper string, err error, attrs ...any) {
	if ctx.Err() != nil {
		return
	}
	m.errors.Add(ctx, 1, metric.WithAttributes(attribute.String("sweeper", sweeper)))
	m.log.WarnContext(ctx, "sweeper "+sweeper, append(attrs, telemetry.Err(err))...)
}

// run sweeps every interval until ctx ends.
func (s sweeper[T]) run(ctx context.Context, m *sweepMetrics) {
	loop.Every(ctx, s.cfg.Interval, true, func(ctx context.Context) { s.round(ctx, m) }) // at once: a restarted reconciler catches up
}

// round scans and repairs until a scan comes back short or a repair fails: a
// candidate that keeps failing would be found again at once, so it waits for
// the next interval instead.
func (s sweeper[T]) round(ctx context.Context, m *sweepMetrics) {
	_, _ = loop.Drain(ctx, s.cfg.BatchSize, s.cfg.QueryTimeout, func(sctx context.Context, limit int) (int64, error) {
		found, err := s.scan(sctx, limit)
		if err != nil {
			m.failed(ctx, s.name, err)
			return 0, err
		}
		var failures error
		for _, c := range found {
			rctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
			out, err := s.repair(rctx, c)
			cancel()
			switch {
			case err != nil:
				m.failed(ctx, s.name, err, s.describe(c)...)
				failures = errors.Join(failures, err)
			case out.Applied:
				m.action(ctx, s.name, out.Outcome)
				m.log.InfoContext(ctx, "sweeper "+s.name, append(s.describe(c), slog.String(telemetry.KeyOutcome, out.Outcome))...)
			}
		}
		return int64(len(found)), failures
	})
}

// sweepers builds the loops over the ledger and the engine.
func sweepers(store *ledger.Store, eng *engine.Engine, cfg SweepersConfig, stale func(ctx context.Context, r ledger.StaleOutboxRow) (engine.Swept, error)) []func(context.Context, *sweepMetrics) {
	attempt := func(k ledger.AttemptKey) []any {
		return []any{telemetry.JobID(k.JobID), telemetry.StepID(k.StepID), telemetry.AttemptNo(k.AttemptNo)}
	}
	job := func(id string) []any { return []any{telemetry.JobID(id)} }
	return []func(context.Context, *sweepMetrics){
		sweeper[ledger.AttemptKey]{name: "ack_timeout", cfg: cfg.Acks, describe: attempt,
			scan: store.DueAcks, repair: eng.ExpireAck}.run,
		sweeper[ledger.AttemptKey]{name: "lease_expiry", cfg: cfg.Leases, describe: attempt,
			scan: store.DueLeases, repair: eng.ExpireLease}.run,
		sweeper[ledger.AttemptKey]{name: "dispatching", cfg: cfg.Dispatching, describe: attempt,
			scan: func(ctx context.Context, limit int) ([]ledger.AttemptKey, error) {
				return store.StuckDispatching(ctx, cfg.Dispatching.Age, limit)
			}, repair: eng.Redispatch}.run,
		sweeper[ledger.AttemptKey]{name: "poll", cfg: cfg.Polls, describe: attempt,
			scan: store.DuePolls, repair: eng.PollDue}.run,
		sweeper[string]{name: "sla", cfg: cfg.SLA, describe: job, scan: store.DueSLAs, repair: eng.ExpireSLA}.run,
		sweeper[string]{name: "stranded_request", cfg: cfg.Requests, describe: job,
			scan: func(ctx context.Context, limit int) ([]string, error) {
				return store.StrandedRequests(ctx, cfg.Requests.Age, engine.MaxRequeues, limit)
			},
			repair: func(ctx context.Context, id string) (engine.Swept, error) { return engine.Requeue(ctx, store, id) }}.run,
		sweeper[ledger.StaleOutboxRow]{name: "stale_outbox", cfg: cfg.Outbox,
			describe: func(r ledger.StaleOutboxRow) []any {
				return []any{telemetry.JobID(r.JobID), telemetry.StepID(r.StepID), telemetry.AttemptNo(r.AttemptNo),
					"outbox_id", r.ID, "kind", r.Kind, "destination", r.Destination, "publish_attempts", r.Attempts,
					"last_error", r.LastError}
			},
			scan: func(ctx context.Context, limit int) ([]ledger.StaleOutboxRow, error) {
				return store.StaleOutbox(ctx, cfg.Outbox.Age, limit)
			}, repair: stale}.run,
		slotRepair(store, cfg.Slots),
	}
}

// slotRepair checks the admission counters every interval and sets any that
// drifted from the live requests and jobs (a leaked or lost slot) right.
func slotRepair(store *ledger.Store, cfg SweepConfig) func(context.Context, *sweepMetrics) {
	return func(ctx context.Context, m *sweepMetrics) {
		loop.Every(ctx, cfg.Interval, true, func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, cfg.QueryTimeout)
			defer cancel()
			fixed, err := store.RepairSlots(ctx)
			if err != nil {
				m.failed(ctx, "slots", err)
			}
			for _, r := range fixed {
				m.action(ctx, "slots", "REPAIRED")
				m.log.WarnContext(ctx, "sweeper slots: admission counter repaired", telemetry.TenantID(r.Tenant),
					"counted", r.Was, "live", r.Counted)
			}
		})
	}
}

// runAll runs the loops until ctx ends.
func runAll(ctx context.Context, m *sweepMetrics, loops []func(context.Context, *sweepMetrics)) {
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); l(ctx, m) }()
	}
	wg.Wait()
}
