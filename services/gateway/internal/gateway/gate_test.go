package gateway

import (
	"testing"
	"time"

	"github.com/lucius-platform/lucius/core/ledger"
)

func TestGateRefusesEarlyAndProbesOneAtATime(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	g := newGate(100 * time.Millisecond)
	g.now = func() time.Time { return now }
	tenantLimit := &ledger.LimitError{Scope: ledger.ScopeTenant, Key: "flood", Limit: 5}
	steps := []struct {
		do      string // enter, done, wait
		tenant  string
		refused bool               // enter: the gate answers
		limit   *ledger.LimitError // done: the ledger refused
		created bool               // done: the ledger created the job
		current int                // enter: the tenant's limit now (0: tenantLimit's)
		wait    time.Duration
	}{
		{do: "enter", tenant: "flood"},
		{do: "done", tenant: "flood", limit: tenantLimit},
		{do: "enter", tenant: "flood", refused: true},
		{do: "enter", tenant: "calm"}, // other tenants are not affected
		{do: "wait", wait: 101 * time.Millisecond},
		{do: "enter", tenant: "flood"},                // the probe
		{do: "enter", tenant: "flood", refused: true}, // while it is out, the rest wait
		{do: "done", tenant: "flood", limit: tenantLimit},
		{do: "enter", tenant: "flood", refused: true},
		{do: "wait", wait: 101 * time.Millisecond},
		{do: "enter", tenant: "flood"},
		{do: "done", tenant: "flood"}, // the probe was a duplicate: still refused, the next probe may go
		{do: "enter", tenant: "flood"},
		{do: "done", tenant: "flood", created: true}, // a slot was free: the gate opens
		{do: "enter", tenant: "flood"},
		{do: "enter", tenant: "flood"},
		{do: "done", tenant: "flood", limit: &ledger.LimitError{Scope: ledger.ScopeGlobal, Limit: 9}},
		{do: "enter", tenant: "flood"}, // a global limit is not the tenant's doing
		{do: "done", tenant: "flood", limit: tenantLimit},
		{do: "enter", tenant: "flood", refused: true},
		{do: "enter", tenant: "flood", current: 6}, // the limit was raised meanwhile
		{do: "done", tenant: "flood", created: true},
	}
	probe := map[string]bool{}
	for i, st := range steps {
		switch st.do {
		case "enter":
			current := st.current
			if current == 0 {
				current = tenantLimit.Limit
			}
			limit, p := g.enter(st.tenant, current)
			if (limit != nil) != st.refused {
				t.Fatalf("step %d: enter(%s) refused=%v, want %v", i, st.tenant, limit != nil, st.refused)
			}
			if limit == nil {
				probe[st.tenant] = p
			}
		case "done":
			g.done(st.tenant, probe[st.tenant], st.limit, st.created)
		case "wait":
			now = now.Add(st.wait)
		}
	}
}
