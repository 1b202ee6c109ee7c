package reconciler

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/pgbus"
	"github.com/lucius-platform/lucius/core/config"
	"github.com/lucius-platform/lucius/core/ledger"
)

func TestMain(m *testing.M) { pgtest.Main(m, ledger.Migrations, pgbus.Migrations, config.Migrations) }

// onlySend hides pgbus's bus.TxPublisher: the dispatcher must take the
// leased path, as it does for a bus without it (Azure Service Bus).
type onlySend struct{ bus.Bus }

func (onlySend) TxPublisher() bus.TxPublisher { return nil }

// A round publishes every row whose destination exists and marks it sent; a
// row for a missing destination is released with its error and waits. With
// the PostgreSQL bus on the ledger's pool the round publishes in the
// marking transaction, and falls back to the leased path to sort out a
// failing destination; with any other bus it leases, sends, then marks.
func TestDispatchRoundPublishesAndReleasesFailures(t *testing.T) {
	for _, tt := range []struct {
		name      string
		inTx      bool
		otherPool bool // the bus works on a pool of its own on the ledger's database
		broken    bool // one row's destination does not exist
	}{
		{"in the marking transaction", true, false, false},
		{"in the marking transaction, one destination missing", true, false, true},
		{"in the marking transaction, bus on its own pool", true, true, false},
		{"leased", false, false, false},
		{"leased, one destination missing", false, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			log := slog.New(slog.DiscardHandler)
			store := ledger.New(pool, log)
			t.Cleanup(store.Close)
			busPool := pool
			if tt.otherPool {
				if busPool, err = pgxpool.New(ctx, pool.Config().ConnString()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(busPool.Close)
			}
			pb, err := pgbus.New(ctx, busPool, pgbus.Config{Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pb.Close(context.Background()) }) //nolint:errcheck
			var b bus.Bus = pb
			if !tt.inTx {
				b = onlySend{pb}
			}
			for _, q := range []string{"q1", "q2"} {
				if err := pb.EnsureQueue(ctx, q, bus.QueueOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			dests := []string{"q1", "q2", "q1"}
			if tt.broken {
				dests = append(dests, "missing")
			}
			err = store.InTx(ctx, func(tx *ledger.Tx) error {
				for i, d := range dests {
					tx.Enqueue(ledger.OutboxMessage{MessageID: d + "-" + string(rune('a'+i)), Destination: d,
						Kind: ledger.KindJobRequest, Body: []byte("{}")})
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			d, err := newDispatcher(store, b, pool, DispatcherConfig{RetryAfter: time.Hour}, log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.close)
			if (d.inTx != nil) != tt.inTx {
				t.Fatalf("publishes in the marking transaction: %v, want %v", d.inTx != nil, tt.inTx)
			}
			if n, err := d.round(ctx); err != nil || n != len(dests) {
				t.Fatalf("round: %d, %v; want %d rows claimed", n, err, len(dests))
			}
			for q, want := range map[string]int{"q1": 2, "q2": 1} {
				var got int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM bus_messages WHERE path = $1`, q).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("%s holds %d messages, want %d", q, got, want)
				}
			}
			var sent, waiting int
			var lastError string
			err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE sent_at IS NOT NULL),
				count(*) FILTER (WHERE sent_at IS NULL AND available_at > now() + interval '30 minutes'),
				coalesce(max(last_error), '') FROM outbox`).Scan(&sent, &waiting, &lastError)
			if err != nil {
				t.Fatal(err)
			}
			wantWaiting := 0
			if tt.broken {
				wantWaiting = 1
			}
			if sent != 3 || waiting != wantWaiting || (tt.broken && lastError == "") {
				t.Fatalf("sent %d, waiting for a retry %d (last error %q); want 3 sent, %d waiting with an error", sent, waiting, lastError, wantWaiting)
			}
			if n, err := d.round(ctx); err != nil || n != 0 {
				t.Fatalf("second round: %d, %v; want nothing left to claim", n, err)
			}
		})
	}
}
