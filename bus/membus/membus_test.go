package membus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/bustest"
	"github.com/lucius-platform/lucius/bus/membus"
)

func newBus(t testing.TB) *membus.Bus {
	t.Helper()
	b, err := membus.New(membus.Config{})
	if err != nil {
		t.Fatalf("new bus: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(context.Background()); err != nil {
			t.Errorf("close bus: %v", err)
		}
	})
	return b
}

// TestConformance runs the suite with a Bus of its own per case.
func TestConformance(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bus.Bus { return newBus(t) })
}

// Among messages waiting together, higher priority is received first, an
// abandoned message keeps its place, and a scheduled message is not
// delivered early because of its priority.
func TestPriorityOrdersWaitingMessages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBus(t)
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := b.NewSender(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(300 * time.Millisecond)
	if err := s.Send(ctx, bus.Message{ID: "a-0"}, bus.Message{ID: "b-5", Priority: 5},
		bus.Message{ID: "c-10", Priority: 10}, bus.Message{ID: "d-5", Priority: 5},
		bus.Message{ID: "e-99", Priority: 99}, // clamped to 10
		bus.Message{ID: "scheduled-10", Priority: 10, ScheduledAt: at}); err != nil {
		t.Fatal(err)
	}
	r, err := b.NewReceiver(ctx, bus.QueueSource("q"))
	if err != nil {
		t.Fatal(err)
	}
	receive := func() *bus.Received {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := r.Receive(rctx, 1)
		if err != nil || len(got) != 1 {
			t.Fatalf("receive: %v (%d messages)", err, len(got))
		}
		return got[0]
	}
	if err := r.Abandon(ctx, receive()); err != nil {
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
	want := []string{"c-10", "e-99", "b-5", "d-5", "a-0", "scheduled-10"}
	if !slices.Equal(order, want) {
		t.Fatalf("order = %v, want %v", order, want)
	}
	if time.Now().Before(at) {
		t.Fatalf("the scheduled message came before its time %v", at)
	}
}

// Received messages are copies: changing one changes nothing in the bus.
func TestReceivedIsACopy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBus(t)
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := b.NewSender(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	body, props := []byte("body"), map[string]string{"k": "v"}
	if err := s.Send(ctx, bus.Message{ID: "m", Body: body, Properties: props}); err != nil {
		t.Fatal(err)
	}
	body[0], props["k"] = 'X', "changed by the sender"
	r, err := b.NewReceiver(ctx, bus.QueueSource("q"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		got, err := r.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		m := got[0]
		if string(m.Body) != "body" || m.Properties["k"] != "v" {
			t.Fatalf("delivery %d: body %q properties %v, want what was sent", i+1, m.Body, m.Properties)
		}
		m.Body[0], m.Properties["k"] = 'Y', "changed by the receiver"
		if err := r.Abandon(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTxPublisherIsNil(t *testing.T) {
	t.Parallel()
	if tp := newBus(t).TxPublisher(); tp != nil {
		t.Fatalf("TxPublisher = %v, want nil: an in-memory bus has no database", tp)
	}
}
