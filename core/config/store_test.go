package config

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/bus/routing"
)

func TestMain(m *testing.M) { pgtest.Main(m, Migrations) }

// Webhook secrets and request rates are stored with the rest of a tenant's
// overrides and read back whole.
func TestStoreRoundTripsWebhookSecretsAndRates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewStore(pgtest.NewPool(t))
	in := Tenant{TenantID: "acme", UpdatedBy: "test", WebhookSecrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="},
		RequestRate:   &RateLimit{RequestsPerSecond: 2.5, Burst: 5},
		KeyRateLimits: []KeyRateLimit{{Field: "doc_id", Rate: RateLimit{RequestsPerSecond: 0.2}}, {Field: "payload.scene", Rate: RateLimit{RequestsPerSecond: 1, Burst: 3}}}}
	if _, err := s.PutTenant(ctx, in, 0); err != nil {
		t.Fatal(err)
	}
	got, err := s.Tenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.WebhookSecrets, in.WebhookSecrets) || got.RequestRate == nil || *got.RequestRate != *in.RequestRate ||
		!slices.Equal(got.KeyRateLimits, in.KeyRateLimits) {
		t.Fatalf("stored %+v, read back %+v", in, got)
	}
	snap, err := s.Load(ctx)
	if err != nil || !slices.Equal(snap.Tenants["acme"].WebhookSecrets, in.WebhookSecrets) {
		t.Fatalf("load: %+v %v", snap, err)
	}
}

func TestStoreKeepsRevisionsAndRefusesStaleUpdates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewStore(pgtest.NewPool(t))
	if err := s.SeedGlobal(ctx, Global{DefaultMode: routing.ModeDefault, Limits: Limits{Tenant: 5}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SeedGlobal(ctx, Global{Limits: Limits{Tenant: 99}}); err != nil {
		t.Fatal(err)
	}
	g, err := s.Global(ctx)
	if err != nil || g.Limits.Tenant != 5 || g.Revision != 1 {
		t.Fatalf("seeding twice: %+v %v", g, err)
	}
	g.Limits.Lanes = map[routing.Mode]int{routing.ModeBurst: 7}
	g.UpdatedBy = "lucius-local#ops"
	stored, err := s.PutGlobal(ctx, g, g.Revision)
	if err != nil || stored.Revision != 2 {
		t.Fatalf("put with the current revision: %+v %v", stored, err)
	}
	if _, err := s.PutGlobal(ctx, g, 1); !errors.Is(err, ErrRevisionMismatch) {
		t.Fatalf("put with a stale revision: %v", err)
	}
	acme, err := s.PutTenant(ctx, Tenant{TenantID: "  Acme ", Mode: routing.ModeBurst, MaxActive: intp(0), UpdatedBy: "lucius-local#ops"}, 0)
	if err != nil || acme.TenantID != "acme" || acme.Revision != 3 {
		t.Fatalf("put tenant: %+v %v", acme, err)
	}
	if _, err := s.PutTenant(ctx, Tenant{TenantID: "acme", UpdatedBy: "lucius-local#ops"}, 2); !errors.Is(err, ErrRevisionMismatch) {
		t.Fatalf("tenant put with a stale revision: %v", err)
	}
	if _, err := s.PutTenant(ctx, Tenant{TenantID: "beta", UpdatedBy: "lucius-local#beta-ops"}, 0); err != nil {
		t.Fatal(err)
	}
	got, err := s.Tenant(ctx, "ACME")
	if err != nil || got.Mode != routing.ModeBurst || got.MaxActive == nil || *got.MaxActive != 0 {
		t.Fatalf("get tenant: %+v %v", got, err)
	}
	page, err := s.ListTenants(ctx, "acme", 10)
	if err != nil || len(page) != 1 || page[0].TenantID != "beta" {
		t.Fatalf("list after acme: %+v %v", page, err)
	}
	if err := s.DeleteTenant(ctx, "beta", "lucius-local#ops"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, "beta", "lucius-local#ops"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.Tenant(ctx, "beta"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted tenant: %v", err)
	}
	snap, err := s.Load(ctx)
	if err != nil || snap.Revision != 5 || len(snap.Tenants) != 1 || snap.Global.Limits.Lanes[routing.ModeBurst] != 7 {
		t.Fatalf("snapshot %+v %v", snap, err)
	}
	// Every change that happened names who made it, in its row and in the
	// audit trail; refused changes left no trace.
	if g, _ := s.Global(ctx); g.UpdatedBy != "lucius-local#ops" {
		t.Fatalf("global updated by %q", g.UpdatedBy)
	}
	if got, _ := s.Tenant(ctx, "acme"); got.UpdatedBy != "lucius-local#ops" {
		t.Fatalf("acme updated by %q", got.UpdatedBy)
	}
	for scope, want := range map[string][]string{
		"global": {"2 PUT lucius-local#ops", "1 SEED seed"},
		" ACME ": {"3 PUT lucius-local#ops"},
		"beta":   {"5 DELETE lucius-local#ops", "4 PUT lucius-local#beta-ops"},
	} {
		changes, err := s.Changes(ctx, scope, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range changes {
			got = append(got, fmt.Sprintf("%d %s %s", c.Revision, c.Action, c.ChangedBy))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("changes of %q: %v, want %v", scope, got, want)
		}
	}
	if _, err := s.PutGlobal(ctx, Global{}, 0); err == nil {
		t.Fatal("a change naming nobody was stored")
	}
}

// A change reaches every watching process through NOTIFY: the poll fallback is
// set to an hour, so nothing else could deliver it within the test.
func TestChangesReachEveryWatcherWithoutPolling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDB(t)
	var watchers []*Watcher
	for range 3 { // three processes, each with its own pool
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		w, err := Watch(ctx, pool, time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		watchers = append(watchers, w)
	}
	changed := make(chan int64, 10)
	watchers[2].OnChange(func(s *Snapshot) { changed <- s.Revision })
	admin := NewStore(watchers[0].pool)
	for i, change := range []func() error{
		func() error {
			_, err := admin.PutTenant(ctx, Tenant{TenantID: "acme", Mode: routing.ModeBurst, UpdatedBy: "test"}, 0)
			return err
		},
		func() error {
			_, err := admin.PutGlobal(ctx, Global{Limits: Limits{Global: 100}, UpdatedBy: "test"}, 0)
			return err
		},
		func() error { return admin.DeleteTenant(ctx, "acme", "test") },
	} {
		start := time.Now()
		if err := change(); err != nil {
			t.Fatal(err)
		}
		want := int64(i + 1)
		deadline := time.Now().Add(30 * time.Second) // a hang guard, not a speed check
		for _, w := range watchers {
			for w.Current().Revision < want {
				if time.Now().After(deadline) {
					t.Fatalf("revision %d never reached a watcher (at %d)", want, w.Current().Revision)
				}
				time.Sleep(time.Millisecond)
			}
		}
		t.Logf("change %d reached 3 watchers in %s", want, time.Since(start))
		if rev := <-changed; rev != want {
			t.Fatalf("OnChange saw revision %d, want %d", rev, want)
		}
	}
	last := watchers[1].Current()
	if _, ok := last.Tenants["acme"]; ok || last.Global.Limits.Global != 100 {
		t.Fatalf("final snapshot %+v", last)
	}
}
