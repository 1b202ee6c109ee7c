package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
)

// gate remembers which tenants the ledger refused at their own limit, so a
// tenant flooding past it is answered 429 before any parsing or database
// work and cannot crowd out other tenants' submits. The ledger stays the only
// judge of admission: while a tenant is refused, one submit at a time (a
// probe) still asks the ledger, at most every hold, so a freed slot is taken
// within hold.
type gate struct {
	hold time.Duration
	now  func() time.Time

	mu      sync.Mutex
	refused map[string]*refusal // by tenant
}

type refusal struct {
	limit   *ledger.LimitError
	until   time.Time
	probing bool
	lookups chan struct{} // kept while the tenant stays refused; see turnedAway.lookup
}

// turnedAway is a submit the gate refuses.
type turnedAway struct {
	limit   *ledger.LimitError // the tenant's limit the ledger refused it at
	lookups chan struct{}
}

func newGate(hold time.Duration) *gate {
	return &gate{hold: hold, now: time.Now, refused: map[string]*refusal{}}
}

// enter turns a submit away when its tenant was refused at its limit a moment
// ago, or returns nil to let it ask the ledger; probe says it is the one
// submit let through while the tenant is refused. current is the tenant's
// limit now: a changed limit opens the gate. Every nil answer must be
// followed by done.
func (g *gate) enter(tenant string, current int) (away *turnedAway, probe bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.refused[tenant]
	switch {
	case !ok:
		return nil, false
	case r.limit.Limit != current:
		delete(g.refused, tenant)
		return nil, false
	case r.probing || g.now().Before(r.until):
		return &turnedAway{limit: r.limit, lookups: r.lookups}, false
	}
	r.probing = true
	return nil, true
}

// done records what the ledger answered a submit let through: refused at a
// limit (the tenant's: hold the gate closed), created (a slot was free: open
// it), or neither (a duplicate, an error: just end the probe).
func (g *gate) done(tenant string, probe bool, limit *ledger.LimitError, created bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.refused[tenant]
	switch {
	case limit != nil && limit.Scope == ledger.ScopeTenant:
		if !ok {
			r = &refusal{lookups: make(chan struct{}, 1)}
			g.refused[tenant] = r
		}
		r.limit, r.until, r.probing = limit, g.now().Add(g.hold), false
	case limit != nil || created:
		delete(g.refused, tenant) // a lane or global limit is everyone's: each submit asks
	case probe && ok:
		r.probing = false
	}
}

// lookup runs exists, which asks the database whether the turned-away submit
// repeats an accepted command, after the tenant's other turned-away submits'
// lookups: however many a flooding tenant sends at once, they hold one of the
// gateway's few database connections between them, and other tenants'
// admissions do not queue behind them for the rest.
func (a *turnedAway) lookup(ctx context.Context, exists func(context.Context) (bool, error)) (bool, error) {
	select {
	case a.lookups <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-a.lookups }()
	return exists(ctx)
}
