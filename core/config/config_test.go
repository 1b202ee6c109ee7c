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
		Refs: RefPolicy{Schemes: []string{"file"}}}
	snap := &Snapshot{Global: global, Tenants: map[string]Tenant{
		"acme":    {TenantID: "acme", Mode: routing.ModeDefault, MaxActive: intp(3), AllowedModes: []routing.Mode{routing.ModeDefault}},
		"open":    {TenantID: "open", MaxActive: intp(0), Refs: &RefPolicy{Schemes: []string{"az"}}},
		"inherit": {TenantID: "inherit"},
	}}
	tests := []struct {
		tenant     string
		mode       routing.Mode
		maxActive  int
		schemes    []string
		burstAllow bool
	}{
		{"acme", routing.ModeDefault, 3, []string{"file"}, false},
		{"  ACME ", routing.ModeDefault, 3, []string{"file"}, false}, // normalized
		{"open", "", 0, []string{"az"}, true},                        // 0 is "no limit", not "inherit"
		{"inherit", "", 10, []string{"file"}, true},
		{"unknown", "", 10, []string{"file"}, true},
	}
	for _, tt := range tests {
		e := snap.For(tt.tenant)
		if e.Mode != tt.mode || e.GlobalMode != routing.ModeBurst || e.MaxActive != tt.maxActive ||
			len(e.Refs.Schemes) != 1 || e.Refs.Schemes[0] != tt.schemes[0] || e.ModeAllowed(routing.ModeBurst) != tt.burstAllow {
			t.Errorf("%q: %+v", tt.tenant, e)
		}
		if e.RetryAfter != time.Second {
			t.Errorf("%q: retry after %s, want the 1s default", tt.tenant, e.RetryAfter)
		}
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
