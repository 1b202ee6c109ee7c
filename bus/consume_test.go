package bus_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lucius-platform/lucius/bus"
	"github.com/lucius-platform/lucius/bus/membus"
)

// queueWith returns a receiver on a fresh in-memory queue holding n messages
// with bodies "0" … "n-1".
func queueWith(t *testing.T, n int) bus.Receiver {
	t.Helper()
	ctx := context.Background()
	b, err := membus.New(membus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(ctx) })
	if err := b.EnsureQueue(ctx, "q", bus.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := b.NewSender(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := s.Send(ctx, bus.Message{ID: strconv.Itoa(i), Body: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := b.NewReceiver(ctx, bus.QueueSource("q"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConsume(t *testing.T) {
	const n = 40
	tests := []struct {
		name        string
		concurrency int
		ordered     bool
	}{
		{"one after another keeps the order", 1, true},
		{"several at once stay within the bound", 4, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := queueWith(t, n)
			ctx, cancel := context.WithCancel(context.Background())
			var mu sync.Mutex
			var got []string
			var running, peak atomic.Int32
			done := make(chan struct{})
			go func() {
				defer close(done)
				bus.Consume(ctx, r, bus.ConsumeOptions{Batch: 8, Concurrency: tc.concurrency}, func(ctx context.Context, m *bus.Received) {
					raisePeak(&peak, running.Add(1))
					time.Sleep(time.Millisecond)
					mu.Lock()
					got = append(got, string(m.Body))
					if len(got) == n {
						cancel()
					}
					mu.Unlock()
					if err := r.Complete(ctx, m); err != nil && ctx.Err() == nil {
						t.Error(err)
					}
					running.Add(-1)
				})
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Consume did not return after its context ended")
			}
			if running.Load() != 0 {
				t.Fatal("Consume returned before its handlers")
			}
			if len(got) != n {
				t.Fatalf("handled %d messages, want %d", len(got), n)
			}
			if p := peak.Load(); p > int32(tc.concurrency) || (tc.concurrency > 1 && p < 2) {
				t.Fatalf("peak concurrency %d with Concurrency %d", p, tc.concurrency)
			}
			if tc.ordered {
				for i, body := range got {
					if body != strconv.Itoa(i) {
						t.Fatalf("position %d handled message %s", i, body)
					}
				}
			}
		})
	}
}

// raisePeak records now in peak when it is higher.
func raisePeak(peak *atomic.Int32, now int32) {
	for p := peak.Load(); now > p; p = peak.Load() {
		if peak.CompareAndSwap(p, now) {
			return
		}
	}
}

// failingReceiver fails every Receive.
type failingReceiver struct{ bus.Receiver }

func (failingReceiver) Receive(context.Context, int) ([]*bus.Received, error) {
	return nil, errors.New("broker unreachable")
}

func TestConsumeReportsFailedReceivesAndRetries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var failures atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Consume(ctx, failingReceiver{}, bus.ConsumeOptions{RetryDelay: time.Millisecond,
			OnError: func(context.Context, error) {
				if failures.Add(1) == 3 {
					cancel()
				}
			}}, func(context.Context, *bus.Received) { t.Error("handled a message no Receive returned") })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Consume kept going after its context ended")
	}
	if failures.Load() != 3 {
		t.Fatalf("%d failures reported, want 3", failures.Load())
	}
}

// closedReceiver is a receiver whose bus was closed.
type closedReceiver struct{ bus.Receiver }

func (closedReceiver) Receive(context.Context, int) ([]*bus.Received, error) {
	return nil, bus.ErrClosed
}

func TestConsumeEndsWhenTheReceiverIsClosed(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Consume(context.Background(), closedReceiver{}, bus.ConsumeOptions{
			OnError: func(context.Context, error) { t.Error("a closed receiver reported as a failure") }},
			func(context.Context, *bus.Received) {})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Consume kept receiving from a closed receiver")
	}
}
