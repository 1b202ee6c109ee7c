package pgbus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/pgbus"
)

// Among messages waiting together, higher priority is received first; a
// message that waited longer than the head start of a higher priority goes
// before it (no starvation); an abandoned message keeps its place; a
// scheduled message is never delivered early because of its priority.
func TestPriorityOrdersWaitingMessages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	b := newBus(t, pool, pgbus.Config{})
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	send := mustSender(t, b, "q")
	if err := send.Send(ctx, bus.Message{ID: "old-0"}); err != nil {
		t.Fatal(err)
	}
	// old-0 has waited longer than priority 10's head start (60 s).
	if _, err := pool.Exec(ctx, `UPDATE bus_messages SET enqueued_at = enqueued_at - interval '61 s',
		available_at = available_at - interval '61 s' WHERE message_id = 'old-0'`); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := send.Send(ctx, bus.Message{ID: "a-0"}, bus.Message{ID: "b-5", Priority: 5},
		bus.Message{ID: "c-10", Priority: 10}, bus.Message{ID: "d-5", Priority: 5},
		bus.Message{ID: "e-99", Priority: 99}, // clamped to 10
		bus.Message{ID: "scheduled-10", Priority: 10, ScheduledAt: later}); err != nil {
		t.Fatal(err)
	}
	r := mustReceiver(t, b, bus.QueueSource("q"))
	receive := func() *bus.Received {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, eventually)
		defer cancel()
		got, err := r.Receive(rctx, 1)
		if err != nil || len(got) != 1 {
			t.Fatalf("receive: %v (%d messages)", err, len(got))
		}
		return got[0]
	}
	first := receive()
	if first.ID != "old-0" {
		t.Fatalf("first = %s, want old-0 (waited past every head start)", first.ID)
	}
	if err := r.Abandon(ctx, first); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 6 {
		m := receive()
		order = append(order, m.ID)
		if err := r.Complete(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"old-0", "c-10", "e-99", "b-5", "d-5", "a-0"}
	if !slices.Equal(order, want) {
		t.Fatalf("order = %v, want %v", order, want)
	}
	var waiting string
	if err := pool.QueryRow(ctx, `SELECT message_id FROM bus_messages WHERE path = 'q' AND available_at > now() + interval '50 minutes'`).Scan(&waiting); err != nil {
		t.Fatalf("the scheduled message is not kept for its time: %v", err)
	}
}
