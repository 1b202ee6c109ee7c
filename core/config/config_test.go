package config

import (
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus/routing"
)

func intp(n int) *int { return &n }

func TestEffectiveConfigInheritsWhatTheTenantDoesNotSet(t *testing.T) {
	t.Parallel()
	global := Global{DefaultMode: routing.ModeBurst, Limits: Limits{Tenant: 10},
		Refs: RefPolicy{Schemes: []string{"file"}}, RetentionDays: 30}
	snap := &Snapshot{Global: global, Tenants: map[string]Tenant{
		"acme": {TenantID: "acme", Mode: routing.ModeDefault, MaxActive: intp(3), AllowedModes: []routing.Mode{routing.ModeDefault},
			RetentionDays: intp(7)},
		"open":    {TenantID: "open", MaxActive: intp(0), Refs: &RefPolicy{Schemes: []string{"az"}}, RetentionDays: intp(0)},
		"inherit": {TenantID: "inherit"},
	}}
	tests := []struct {
		tenant     string
		mode       routing.Mode
		maxActive  int
		schemes    []string
		burstAllow bool
		retention  int
	}{
		{"acme", routing.ModeDefault, 3, []string{"file"}, false, 7},
		{"  ACME ", routing.ModeDefault, 3, []string{"file"}, false, 7}, // normalized
		{"open", "", 0, []string{"az"}, true, 0},                        // 0 is "no limit" / "forever", not "inherit"
		{"inherit", "", 10, []string{"file"}, true, 30},
		{"unknown", "", 10, []string{"file"}, true, 30},
	}
	for _, tt := range tests {
		e := snap.For(tt.tenant)
		if e.Mode != tt.mode || e.GlobalMode != routing.ModeBurst || e.MaxActive != tt.maxActive ||
			len(e.Refs.Schemes) != 1 || e.Refs.Schemes[0] != tt.schemes[0] || e.ModeAllowed(routing.ModeBurst) != tt.burstAllow ||
			e.RetentionDays != tt.retention {
			t.Errorf("%q: %+v", tt.tenant, e)
		}
		if e.RetryAfter != time.Second {
			t.Errorf("%q: retry after %s, want the 1s default", tt.tenant, e.RetryAfter)
		}
	}
}

func TestRetentionListsTheGlobalDaysAndTheTenantsThatSetTheirOwn(t *testing.T) {
	t.Parallel()
	snap := &Snapshot{Global: Global{RetentionDays: 30}, Tenants: map[string]Tenant{
		"acme": {RetentionDays: intp(7)}, "open": {RetentionDays: intp(0)}, "inherit": {}}}
	global, tenants := snap.Retention()
	if global != 30 || len(tenants) != 2 || tenants["acme"] != 7 || tenants["open"] != 0 {
		t.Fatalf("Retention() = %d %v", global, tenants)
	}
	if _, ok := tenants["inherit"]; ok {
		t.Fatal("a tenant without its own retention is listed")
	}
}

// The effective mode feeds routing.Resolve: request, then tenant, then global.
func TestModePrecedenceThroughRouting(t *testing.T) {
	t.Parallel()
	snap := &Snapshot{Global: Global{DefaultMode: routing.ModeBurst}, Tenants: map[string]Tenant{
		"pinned": {TenantID: "pinned", Mode: routing.ModeDefault},
	}}
	tests := []struct {
		tenant    string
		requested routing.Mode
		mode      routing.Mode
		source    routing.Source
	}{
		{"pinned", routing.ModeBurst, routing.ModeBurst, routing.SourceRequest},
		{"pinned", "", routing.ModeDefault, routing.SourceTenantConfig},
		{"other", "", routing.ModeBurst, routing.SourceGlobalConfig},
	}
	for _, tt := range tests {
		e := snap.For(tt.tenant)
		d, err := routing.Resolve(routing.Input{TenantID: tt.tenant, DocID: "doc-1", Requested: tt.requested,
			TenantDefault: e.Mode, GlobalDefault: e.GlobalMode})
		if err != nil || d.Mode != tt.mode || d.Source != tt.source {
			t.Errorf("%s/%q: %+v %v, want %s from %s", tt.tenant, tt.requested, d, err, tt.mode, tt.source)
		}
	}
}
