package reconciler

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lucius-platform/lucius/base/egress"
	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/core/ledger"
)

// A completion callback is signed with every webhook secret its tenant holds
// at delivery; a tenant without one gets nothing (never an unsigned POST),
// and an address the egress policy forbids is never connected to. Both
// refusals abandon the callback and say why in the job's events.
func TestDelivererSignsOrRefuses(t *testing.T) {
	t.Parallel()
	loopback := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	tests := []struct {
		name       string
		tenant     string
		policy     egress.Policy
		wantReason string
		wantCalls  int
	}{
		{"signed with both secrets of a rotation", "acme", loopback, "DELIVERED", 1},
		{"a tenant without secrets", "nosecret", loopback, "NO_WEBHOOK_SECRET", 0},
		{"an address the egress policy forbids", "acme", egress.Policy{}, "ADDRESS_FORBIDDEN", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			log := slog.New(slog.DiscardHandler)
			store := ledger.New(pool, log)
			t.Cleanup(store.Close)

			var mu sync.Mutex
			var got []*http.Request
			var bodies [][]byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				got, bodies = append(got, r), append(bodies, b)
				mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(srv.Close)

			body := []byte(`{"job_id":"j1","status":"SUCCEEDED","result_url":"file:///data/out.json"}`)
			err = store.InTx(ctx, func(tx *ledger.Tx) error {
				tx.Enqueue(ledger.OutboxMessage{MessageID: "completion/j1", Destination: srv.URL + "/hooks", Kind: ledger.KindCompletion,
					JobID: "j1", Body: body, ContentType: "application/json", Properties: map[string]string{"tenant_id": tt.tenant}})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			secrets := map[string][]string{"acme": {specSecret, rotatedSecret}}
			d, err := newDeliverer(store, CallbackConfig{}, tt.policy, func(tenant string) []string { return secrets[tenant] }, log)
			if err != nil {
				t.Fatal(err)
			}
			msgs, err := store.ClaimOutbox(ctx, ledger.OutboxClaim{Limit: 10, Lease: time.Minute, Kinds: []string{ledger.KindCompletion}})
			if err != nil || len(msgs) != 1 {
				t.Fatalf("claim: %v %v", msgs, err)
			}
			d.deliver(ctx, msgs[0])

			var reason string
			if err := pool.QueryRow(ctx, `SELECT reason FROM job_events WHERE job_id = 'j1' AND type = $1`,
				ledger.EventCallbackDelivery).Scan(&reason); err != nil || reason != tt.wantReason {
				t.Fatalf("delivery event reason %q (%v), want %s", reason, err, tt.wantReason)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != tt.wantCalls {
				t.Fatalf("%d POSTs reached the receiver, want %d", len(got), tt.wantCalls)
			}
			if tt.wantCalls == 0 {
				if again, _ := store.ClaimOutbox(ctx, ledger.OutboxClaim{Limit: 10, Lease: time.Minute,
					Kinds: []string{ledger.KindCompletion}}); len(again) != 0 {
					t.Fatalf("a refused callback is still pending: %v", again)
				}
				return
			}
			if id := got[0].Header.Get("webhook-id"); id != "completion/j1" {
				t.Errorf("webhook-id %q, want the outbox message id", id)
			}
			for _, secret := range secrets["acme"] {
				wh, _ := standardwebhooks.NewWebhook(secret)
				if err := wh.Verify(bodies[0], got[0].Header); err != nil {
					t.Errorf("the receiver could not verify with %s…: %v", secret[:10], err)
				}
			}
		})
	}
}
