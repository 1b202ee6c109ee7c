package gateway

import (
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
}

func newGate(hold time.Duration) *gate {
	return &gate{hold: hold, now: time.Now, refused: map[string]*refusal{}}
}

// enter returns the limit a tenant was refused at a moment ago, or nil to
// let this submit ask the ledger; probe says it is the one submit let through
// while the tenant is refused. current is the tenant's limit now: a changed
// limit opens the gate. Every nil answer must be followed by done.
func (g *gate) enter(tenant string, current int) (limit *ledger.LimitError, probe bool) {
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
		return r.limit, false
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
	switch {
	case limit != nil && limit.Scope == ledger.ScopeTenant:
		g.refused[tenant] = &refusal{limit: limit, until: g.now().Add(g.hold)}
	case limit != nil || created:
		delete(g.refused, tenant) // a lane or global limit is everyone's: each submit asks
	case probe:
		if r, ok := g.refused[tenant]; ok {
			r.probing = false
		}
	}
}
