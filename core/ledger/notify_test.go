package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lucius-platform/lucius/core/pgtest"
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
