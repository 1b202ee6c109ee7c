package gateway

import (
	"context"
	"errors"
	"sync"
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
			away, p := g.enter(st.tenant, current)
			if (away != nil) != st.refused {
				t.Fatalf("step %d: enter(%s) refused=%v, want %v", i, st.tenant, away != nil, st.refused)
			}
			if away != nil && away.limit != tenantLimit {
				t.Fatalf("step %d: enter(%s) turned away at %v, want %v", i, st.tenant, away.limit, tenantLimit)
			}
			if away == nil {
				probe[st.tenant] = p
			}
		case "done":
			g.done(st.tenant, probe[st.tenant], st.limit, st.created)
		case "wait":
			now = now.Add(st.wait)
		}
	}
}

// A flooding tenant's turned-away submits look themselves up one at a time,
// also across re-refusals, while another refused tenant's lookups go on
// beside them.
func TestTurnedAwaySubmitsOfATenantLookUpOneAtATime(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	g := newGate(time.Second)
	g.now = func() time.Time { return now }
	limit := &ledger.LimitError{Scope: ledger.ScopeTenant, Limit: 1}
	for _, tenant := range []string{"flood", "other"} {
		g.enter(tenant, 1)
		g.done(tenant, false, limit, false)
	}
	var turnedAway []*turnedAway
	var tenants []string
	for i := range 200 {
		if i == 100 { // the ledger refuses the next probes: refused anew
			now = now.Add(time.Second)
			for _, tenant := range []string{"flood", "other"} {
				if away, probe := g.enter(tenant, 1); away != nil || !probe {
					t.Fatalf("enter after hold: turned away %v, probe %v; want the probe", away != nil, probe)
				}
				g.done(tenant, true, limit, false)
			}
		}
		tenant := []string{"flood", "other"}[i%2]
		away, _ := g.enter(tenant, 1)
		if away == nil {
			t.Fatalf("submit %d of %s let through, want it turned away", i, tenant)
		}
		turnedAway, tenants = append(turnedAway, away), append(tenants, tenant)
	}
	var mu sync.Mutex
	inFlight := map[string]int{}
	most := map[string]int{}
	var wg sync.WaitGroup
	for i, away := range turnedAway {
		tenant := tenants[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := away.lookup(context.Background(), func(context.Context) (bool, error) {
				mu.Lock()
				inFlight[tenant]++
				most[tenant] = max(most[tenant], inFlight[tenant])
				mu.Unlock()
				time.Sleep(100 * time.Microsecond) // long enough for others to pile up
				mu.Lock()
				inFlight[tenant]--
				mu.Unlock()
				return false, nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if most["flood"] != 1 || most["other"] != 1 {
		t.Fatalf("lookups in flight at once: %v, want 1 per tenant", most)
	}
}

func TestTurnedAwayLookupGivesUpWithItsCaller(t *testing.T) {
	t.Parallel()
	g := newGate(time.Hour)
	g.enter("flood", 1)
	g.done("flood", false, &ledger.LimitError{Scope: ledger.ScopeTenant, Limit: 1}, false)
	first, _ := g.enter("flood", 1)
	second, _ := g.enter("flood", 1)
	release := make(chan struct{})
	started := make(chan struct{})
	go first.lookup(context.Background(), func(context.Context) (bool, error) { //nolint:errcheck // holds the slot
		close(started)
		<-release
		return false, nil
	})
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := second.lookup(ctx, func(context.Context) (bool, error) { return true, nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("lookup with a cancelled caller behind another: %v, want context.Canceled", err)
	}
	close(release)
}

func TestRefusalPaceIsSpreadAroundRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		retryAfter time.Duration
		lo, hi     time.Duration // the pace's bounds
	}{
		{time.Second, 500 * time.Millisecond, 1500 * time.Millisecond},
		{200 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond},
		{time.Minute, maxRefusalPace / 2, maxRefusalPace * 3 / 2},
		{0, 0, 0},
	} {
		least, most := tc.hi, tc.lo
		for range 1000 {
			p := refusalPace(tc.retryAfter)
			if p < tc.lo || p > tc.hi {
				t.Fatalf("refusalPace(%v) = %v, want within [%v, %v]", tc.retryAfter, p, tc.lo, tc.hi)
			}
			least, most = min(least, p), max(most, p)
		}
		// Spread over the range, not one value: requests answered together
		// come back apart.
		if spread := tc.hi - tc.lo; spread > 0 && most-least < spread*8/10 {
			t.Fatalf("refusalPace(%v) over 1000 draws spans [%v, %v], want most of [%v, %v]", tc.retryAfter, least, most, tc.lo, tc.hi)
		}
	}
}
