package reconciler

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/lucius-platform/lucius/base/pgtest"
	"github.com/lucius-platform/lucius/base/telemetry/telemetrytest"
	"github.com/lucius-platform/lucius/core/ledger"
)

// lucius_dead_letters_pending reports each kind, 0 when there is none, and
// stops counting a step dead letter once its job is replayed.
func TestPendingDeadLettersGaugeReportsEveryKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := ledger.New(pool, slog.New(slog.DiscardHandler))
	t.Cleanup(store.Close)
	rec := telemetrytest.New()
	gauge, err := registerPendingDeadLetters(rec.Provider.Meter("test"), store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unregister(gauge, slog.New(slog.DiscardHandler)) })
	pending := func(kind string) float64 {
		return rec.Value(t, "lucius_dead_letters_pending", attribute.String("kind", kind))
	}
	if s, b := pending(ledger.DeadLetterStep), pending(ledger.DeadLetterBus); s != 0 || b != 0 {
		t.Fatalf("an empty ledger has %v step and %v bus dead letters pending", s, b)
	}
	for _, id := range []string{"j1", "j2"} {
		err := store.InTx(ctx, func(tx *ledger.Tx) error {
			return tx.InsertDeadLetter(ctx, ledger.DeadLetter{Kind: ledger.DeadLetterStep, JobID: id, StepID: "ocr", Reason: "ACK_TIMEOUT"})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.CollectDeadLetter(ctx, ledger.DeadLetter{Kind: ledger.DeadLetterBus, Reason: "PoisonMessage",
		Entity: "orchestrator-jobs/$deadletterqueue", MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	if err := store.InTx(ctx, func(tx *ledger.Tx) error { return tx.MarkReplayed(ctx, "j1", "j1-replay") }); err != nil {
		t.Fatal(err)
	}
	if s, b := pending(ledger.DeadLetterStep), pending(ledger.DeadLetterBus); s != 1 || b != 1 {
		t.Fatalf("%v step and %v bus dead letters pending, want 1 and 1", s, b)
	}
}
