package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/base/pgtest"
)

// A commit that wrote outbox rows notifies once, naming who has rows
// waiting, so the dispatcher is not woken for a completion callback nor the
// deliverer for a directive.
func TestCommitNotifiesWhoHasRowsWaiting(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := New(pool, slog.New(slog.DiscardHandler))
	t.Cleanup(store.Close)
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close(context.Background()) })
	if _, err := listener.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	next := 0
	msg := func(kind string) OutboxMessage {
		next++
		return OutboxMessage{MessageID: fmt.Sprint("m", next), Destination: "d", Kind: kind, Body: []byte("{}")}
	}
	cases := []struct {
		name  string
		kinds []string
		want  string
	}{
		{"directive", []string{KindDirective}, NotifyPublish},
		{"completion callback", []string{KindCompletion}, NotifyCallbacks},
		{"both", []string{KindCompletion, KindJobRequest}, NotifyPublish + "," + NotifyCallbacks},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := store.InTx(ctx, func(tx *Tx) error {
				for _, k := range c.kinds {
					tx.Enqueue(msg(k))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			wait, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			n, err := listener.WaitForNotification(wait)
			if err != nil {
				t.Fatal(err)
			}
			if n.Payload != c.want {
				t.Fatalf("payload %q, want %q", n.Payload, c.want)
			}
		})
	}
}

// PublishOutbox hands the unsent rows to publish inside its transaction and
// marks them sent with the same commit; if publish fails, nothing is marked
// and the rows stay claimable. While one transaction holds rows, a
// concurrent one skips them.
func TestPublishOutboxMarksSentInThePublishingTransaction(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := New(pool, slog.New(slog.DiscardHandler))
	t.Cleanup(store.Close)
	err = store.InTx(ctx, func(tx *Tx) error {
		for i := range 3 {
			tx.Enqueue(OutboxMessage{MessageID: fmt.Sprint("p", i), Destination: "d", Kind: KindDirective, Body: []byte("{}")})
		}
		tx.Enqueue(OutboxMessage{MessageID: "cb", Destination: "http://x", Kind: KindCompletion, Body: []byte("{}")})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	claim := OutboxClaim{Limit: 10, Kinds: []string{KindCompletion}, Exclude: true}
	unsent := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE sent_at IS NULL AND kind <> $1`, KindCompletion).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A failing publish marks nothing.
	failed := errors.New("bus down")
	n, err := store.PublishOutbox(ctx, claim, func(ctx context.Context, tx pgx.Tx, msgs []OutboxMessage) error {
		if len(msgs) != 3 {
			t.Errorf("publish got %d messages, want the 3 directives", len(msgs))
		}
		return failed
	})
	if !errors.Is(err, failed) || n != 0 || unsent() != 3 {
		t.Fatalf("failing publish: n=%d err=%v unsent=%d, want 0, %v, 3", n, err, unsent(), failed)
	}

	// While a publish holds the rows, a concurrent one finds none; then the
	// first commits and they are sent.
	n, err = store.PublishOutbox(ctx, claim, func(ctx context.Context, tx pgx.Tx, msgs []OutboxMessage) error {
		inner, err := store.PublishOutbox(ctx, claim, func(context.Context, pgx.Tx, []OutboxMessage) error {
			t.Error("a concurrent publish was handed rows another transaction holds")
			return nil
		})
		if err != nil || inner != 0 {
			t.Errorf("concurrent publish: %d, %v; want 0, nil", inner, err)
		}
		if unsent() != 3 {
			t.Error("rows marked sent before the publishing transaction committed")
		}
		// The transaction is usable by the bus.
		_, err = tx.Exec(ctx, `CREATE TABLE published_here (id int)`)
		return err
	})
	if err != nil || n != 3 || unsent() != 0 {
		t.Fatalf("publish: n=%d err=%v unsent=%d, want 3, nil, 0", n, err, unsent())
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('published_here') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		t.Fatalf("the publish's write did not commit with the marks (%v)", err)
	}
}

// The dispatcher claims waiting messages by priority, each level worth
// bus.PriorityHeadStart of waiting: higher first, yet a message that waited
// longer than the highest priority's head start goes before it.
func TestOutboxClaimsByPriorityWithoutStarving(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := New(pool, slog.New(slog.DiscardHandler))
	t.Cleanup(store.Close)
	enqueue := func(msgs ...OutboxMessage) {
		t.Helper()
		if err := store.InTx(ctx, func(tx *Tx) error { tx.Enqueue(msgs...); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	msg := func(id string, priority int) OutboxMessage {
		return OutboxMessage{MessageID: id, Destination: "d", Kind: KindDirective, Body: []byte("{}"), Priority: priority}
	}
	enqueue(msg("old-0", 0))
	if _, err := pool.Exec(ctx, `UPDATE outbox SET available_at = available_at - interval '61 s' WHERE message_id = 'old-0'`); err != nil {
		t.Fatal(err)
	}
	enqueue(msg("a-0", 0), msg("b-3", 3))
	enqueue(msg("c-10", 10), msg("d-3", 3), msg("e-11", 11))
	claimed, err := store.ClaimOutbox(ctx, OutboxClaim{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range claimed {
		order = append(order, fmt.Sprintf("%s:%d", m.MessageID, m.Priority))
	}
	want := []string{"old-0:0", "c-10:10", "e-11:10", "b-3:3", "d-3:3", "a-0:0"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("claimed %v, want %v", order, want)
	}
}
