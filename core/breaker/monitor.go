package breaker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lucius-platform/lucius/base/loop"
	"github.com/lucius-platform/lucius/core/ledger"
)

// Cache tells the engine which services' breakers hold new directives,
// refreshed from the ledger every Policy.Interval. It may lag a transition
// by that long: a breaker that just opened lets a few more directives out,
// and steps held just after a close are released by the monitor's next round.
type Cache struct {
	store   *ledger.Store
	policy  Policy
	log     *slog.Logger
	holding atomic.Pointer[map[string]bool]
}

// NewCache returns a cache; Run keeps it current.
func NewCache(store *ledger.Store, policy Policy, log *slog.Logger) *Cache {
	return &Cache{store: store, policy: policy.WithDefaults(), log: log}
}

// Holding reports whether service's breaker is OPEN or HALF_OPEN.
func (c *Cache) Holding(service string) bool {
	m := c.holding.Load()
	return m != nil && (*m)[service]
}

// Refresh reads the breakers now.
func (c *Cache) Refresh(ctx context.Context) error {
	if c.policy.Disabled {
		return nil
	}
	services, err := c.store.HoldingServices(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]bool, len(services))
	for _, s := range services {
		m[s] = true
	}
	c.holding.Store(&m)
	return nil
}

// Run refreshes the cache until ctx ends.
func (c *Cache) Run(ctx context.Context) {
	if c.policy.Disabled {
		return
	}
	loop.Every(ctx, c.policy.Interval, true, func(ctx context.Context) {
		if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "circuit breakers: refresh failed; keeping the last known states", "error", err)
		}
	})
}

// Release dispatches a held step (engine.Engine.ReleaseHold).
type Release func(ctx context.Context, h ledger.HeldStep) error

// releaseBatch bounds the held steps one round releases per breaker.
const releaseBatch = 500

// Monitor decides every breaker's transitions each Policy.Interval and
// releases the steps they hold (package doc). Several may run (one per
// reconciler): each transition applies once, under the breaker's row lock,
// and releasing a step twice is harmless.
type Monitor struct {
	store   *ledger.Store
	policy  Policy
	release Release
	log     *slog.Logger
	now     func() time.Time
	// after runs after a round that changed a breaker (a cache refresh).
	after func(context.Context)

	transitions metric.Int64Counter
	mu          sync.Mutex
	states      map[string]ledger.BreakerState
	held        map[string]int
}

// State values of lucius_circuit_breaker_state.
var stateValue = map[ledger.BreakerState]int64{ledger.BreakerClosed: 0, ledger.BreakerOpen: 1, ledger.BreakerHalfOpen: 2}

// NewMonitor returns a monitor exporting its metrics with meter;
// after (may be nil) runs when a round changed a breaker.
func NewMonitor(store *ledger.Store, policy Policy, release Release, meter metric.Meter, log *slog.Logger, after func(context.Context)) (*Monitor, error) {
	m := &Monitor{store: store, policy: policy.WithDefaults(), release: release, log: log, now: time.Now, after: after,
		states: map[string]ledger.BreakerState{}, held: map[string]int{}}
	var err error
	if m.transitions, err = meter.Int64Counter("lucius_circuit_breaker_transitions_total",
		metric.WithDescription("Circuit breaker transitions, by service and the state entered.")); err != nil {
		return nil, err
	}
	_, err = meter.Int64ObservableGauge("lucius_circuit_breaker_state",
		metric.WithDescription("Circuit breaker state by worker service: 0 CLOSED, 1 OPEN, 2 HALF_OPEN."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			for svc, st := range m.states {
				o.Observe(stateValue[st], metric.WithAttributes(attribute.String("service", svc)))
			}
			return nil
		}))
	if err != nil {
		return nil, err
	}
	_, err = meter.Int64ObservableGauge("lucius_circuit_breaker_held_steps",
		metric.WithDescription("Steps waiting for their service's circuit breaker, by service."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			for svc, n := range m.held {
				o.Observe(int64(n), metric.WithAttributes(attribute.String("service", svc)))
			}
			return nil
		}))
	return m, err
}

// Run decides every Policy.Interval until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	if m.policy.Disabled {
		return
	}
	loop.Every(ctx, m.policy.Interval, true, func(ctx context.Context) {
		if err := m.Round(ctx); err != nil && ctx.Err() == nil {
			m.log.WarnContext(ctx, "circuit breakers: round failed", "error", err)
		}
	})
}

// Round decides once for every service that has a breaker row or attempts
// that ended within the window.
func (m *Monitor) Round(ctx context.Context) error {
	breakers, err := m.store.Breakers(ctx, "", 0)
	if err != nil {
		return err
	}
	outcomes, err := m.store.ServiceOutcomes(ctx, m.policy.Window)
	if err != nil {
		return err
	}
	byService := map[string]ledger.Breaker{}
	for _, b := range breakers {
		byService[b.Service] = b
	}
	seen := map[string]ledger.ServiceOutcomes{}
	for _, o := range outcomes {
		seen[o.Service] = o
		if _, ok := byService[o.Service]; !ok {
			byService[o.Service] = ledger.Breaker{Service: o.Service, State: ledger.BreakerClosed}
		}
	}
	var errs []error
	changed := false
	states, held := map[string]ledger.BreakerState{}, map[string]int{}
	for _, svc := range slices.Sorted(maps.Keys(byService)) {
		b, o := byService[svc], seen[svc]
		after, moved, err := m.decide(ctx, b, o)
		if err != nil {
			errs = append(errs, err)
		}
		changed = changed || moved
		states[svc], held[svc] = after.State, after.Held
	}
	m.mu.Lock()
	m.states, m.held = states, held
	m.mu.Unlock()
	if changed && m.after != nil {
		m.after(ctx)
	}
	return errors.Join(errs...)
}

// decide applies one decision and returns the breaker after it.
func (m *Monitor) decide(ctx context.Context, b ledger.Breaker, o ledger.ServiceOutcomes) (ledger.Breaker, bool, error) {
	now := m.now()
	d := m.policy.Decide(b, o, b.Held, now)
	moved := false
	if d.To != "" {
		c := ledger.BreakerChange{Service: b.Service, From: b.State, To: d.To, Reason: d.Reason, FailureRate: Rate(o),
			Attempts: o.Ended, Principal: "reconciler"}
		if d.To == ledger.BreakerOpen {
			c.RetryAt = now.Add(m.policy.CoolDown)
		}
		if _, err := m.store.ChangeBreaker(ctx, c); errors.Is(err, ledger.ErrBreakerMoved) {
			return b, false, nil // another monitor or an operator moved it: next round
		} else if err != nil {
			return b, false, err
		}
		m.transitions.Add(ctx, 1, metric.WithAttributes(attribute.String("service", b.Service), attribute.String("to", string(d.To))))
		level := slog.LevelWarn
		if d.To == ledger.BreakerClosed {
			level = slog.LevelInfo
		}
		m.log.Log(ctx, level, "circuit breaker "+string(b.State)+" → "+string(d.To), "service", b.Service, "reason", d.Reason,
			"failure_rate", Rate(o), "attempts", o.Ended, "held_steps", b.Held)
		b.State, b.Probes, moved = d.To, 0, true
		if d.To == ledger.BreakerHalfOpen {
			d.Release = min(m.policy.Probes, b.Held)
		}
	} else if d.RestartProbes {
		if err := m.store.CountProbes(ctx, b.Service, 0, true); err != nil {
			return b, false, err
		}
		m.log.InfoContext(ctx, "circuit breaker: no probe came back; probing again", "service", b.Service)
	}
	if d.Release == 0 {
		return b, moved, nil
	}
	n, err := m.releaseHeld(ctx, b, d.Release)
	b.Held -= n
	return b, moved, err
}

// releaseHeld dispatches up to n steps b holds and returns how many went.
func (m *Monitor) releaseHeld(ctx context.Context, b ledger.Breaker, n int) (int, error) {
	steps, err := m.store.HeldSteps(ctx, ledger.HoldCircuit, b.Service, min(n, releaseBatch))
	if err != nil {
		return 0, err
	}
	released := 0
	var errs []error
	for _, h := range steps {
		if err := m.release(ctx, h); err != nil {
			errs = append(errs, err)
			continue
		}
		released++
	}
	if b.State == ledger.BreakerHalfOpen && released > 0 {
		if err := m.store.CountProbes(ctx, b.Service, released, false); err != nil {
			errs = append(errs, err)
		}
		m.log.InfoContext(ctx, "circuit breaker: probes released", "service", b.Service, "probes", released)
	}
	return released, errors.Join(errs...)
}
